//! Replays the encoders' reference outputs recorded from PyTorch
//! (`scripts/record_cnn_fixtures.py`): the same formula-made weights, mapped from PyTorch's
//! layout (`out x in x kh x kw`, a channels-first flatten) to Strata's, must give the same
//! features on the same uint8 images.

use std::path::PathBuf;

use strata_nn::{Cnn, CnnArch, CnnCache, ImageShape, Pixels};

/// `scripts/record_cnn_fixtures.py`'s weight formula, by flat PyTorch index.
fn weight(layer: usize, index: usize, fan_in: usize) -> f32 {
    ((0.731 * index as f64 + 1.3 * layer as f64).sin() * 1.5 / (fan_in as f64).sqrt()) as f32
}

fn bias(layer: usize, index: usize) -> f32 {
    (0.05 * (1.7 * index as f64 + layer as f64).cos()) as f32
}

/// Strata's flat parameters holding the fixture's PyTorch weights.
fn params_from_torch_layout(cnn: &Cnn) -> Vec<f32> {
    let mut params = vec![0.0; cnn.num_params()];
    for (l, conv) in cnn.convs().iter().enumerate() {
        let (k, c, o) = (conv.kernel, conv.input.channels, conv.out_channels);
        let (weights, biases) = (cnn.layout().range(2 * l), cnn.layout().range(2 * l + 1));
        for oc in 0..o {
            for ic in 0..c {
                for ky in 0..k {
                    for kx in 0..k {
                        let torch = ((oc * c + ic) * k + ky) * k + kx;
                        let ours = oc * conv.patch_len() + (ky * k + kx) * c + ic;
                        params[weights.start + ours] = weight(l, torch, c * k * k);
                    }
                }
            }
            params[biases.start + oc] = bias(l, oc);
        }
    }
    let l = cnn.convs().len();
    let last = cnn.convs()[l - 1].output().unwrap();
    let (h, w, c, f) = (last.height, last.width, last.channels, cnn.features());
    let (weights, biases) = (cnn.layout().range(2 * l), cnn.layout().range(2 * l + 1));
    let flat = cnn.flat_size();
    for out in 0..f {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    let torch_in = (ch * h + y) * w + x;
                    let ours_in = (y * w + x) * c + ch;
                    params[weights.start + ours_in * f + out] =
                        weight(l, out * flat + torch_in, flat);
                }
            }
        }
        params[biases.start + out] = bias(l, out);
    }
    params
}

fn replay(arch: CnnArch) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/cnn")
        .join(format!("{}.json", arch.name()));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    let size = |key: &str| fixture[key].as_u64().unwrap() as usize;
    let shape = ImageShape {
        height: size("height"),
        width: size("width"),
        channels: size("channels"),
    };
    let images: Vec<u8> = fixture["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u8)
        .collect();
    let want: Vec<f64> = fixture["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let batch = images.len() / shape.len();
    let cnn = Cnn::new(arch, shape).unwrap();
    let params = params_from_torch_layout(&cnn);
    let mut cache = CnnCache::default();
    let got = cnn.forward(&params, Pixels::U8(&images), batch, &mut cache);
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-5 * scale + 1e-6,
            "{}: feature {i}: strata {g}, torch {w}",
            arch.name()
        );
    }
    assert!(want.iter().filter(|v| **v > 0.0).count() * 4 > want.len());
}

#[test]
fn nature_cnn_matches_pytorch() {
    replay(CnnArch::NatureCnn);
}

#[test]
fn minatar_cnn_matches_pytorch() {
    replay(CnnArch::MinatarCnn);
}
