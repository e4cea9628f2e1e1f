//! Checks of the convolutional encoder: architectures by image size, gradients against
//! finite differences, and results independent of the thread count.

use super::*;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

fn shape(height: usize, width: usize, channels: usize) -> ImageShape {
    ImageShape {
        height,
        width,
        channels,
    }
}

#[test]
fn the_default_encoder_follows_the_image_size() {
    assert_eq!(CnnArch::for_image(shape(84, 84, 4)), CnnArch::NatureCnn);
    assert_eq!(CnnArch::for_image(shape(36, 40, 3)), CnnArch::NatureCnn);
    assert_eq!(CnnArch::for_image(shape(10, 10, 7)), CnnArch::MinatarCnn);
    assert_eq!(CnnArch::for_image(shape(84, 35, 1)), CnnArch::MinatarCnn);
    // NatureCNN on 84x84x4: 3136 flat values, 1.68M parameters as in SB3.
    let nature = Cnn::new(CnnArch::NatureCnn, shape(84, 84, 4)).unwrap();
    assert_eq!(nature.flat_size(), 3136);
    assert_eq!(nature.num_params(), 1_684_128);
    let err = Cnn::new(CnnArch::NatureCnn, shape(30, 84, 4)).unwrap_err();
    assert!(err.to_string().contains("30x84"), "{err}");
    assert_eq!(
        Cnn::new(CnnArch::MinatarCnn, shape(10, 10, 4))
            .unwrap()
            .num_params(),
        16 * 36 + 16 + 1024 * 128 + 128
    );
}

/// A small three-layer encoder built like NatureCNN, for gradient checks.
fn small_nature() -> Cnn {
    Cnn::new(CnnArch::NatureCnn, shape(36, 37, 2)).unwrap()
}

/// Random pixels for `batch` images and a random gradient for their features.
fn random_batch(cnn: &Cnn, batch: usize, rng: &mut Xoshiro256PlusPlus) -> (Vec<u8>, Vec<f32>) {
    let pixels = (0..batch * cnn.input().len())
        .map(|_| rng.random_range(0..=255))
        .collect();
    let dl = (0..batch * cnn.features())
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    (pixels, dl)
}

// Gradients are checked against float64 references on every kernel path in
// `tests/kernel_paths.rs`; a float32 finite-difference check here could not tell a
// wrong gradient from its own rounding (it failed a right one on an AVX2 CPU).

/// Features and parameter gradients of one forward and backward pass on `threads`.
fn pass(cnn: &Cnn, params: &[f32], pixels: &[u8], dl: &[f32], threads: usize) -> Vec<Vec<f32>> {
    let batch = pixels.len() / cnn.input().len();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let mut cache = CnnCache::default();
        let features = cnn
            .forward(params, Pixels::U8(pixels), batch, &mut cache)
            .to_vec();
        let mut grads = vec![0.0; cnn.num_params()];
        cnn.backward(params, &mut cache, dl, &mut grads);
        vec![features, grads]
    })
}

/// Tasks are fixed groups of images and their partials are summed in task order, so
/// the pool's size changes nothing, bit for bit, in either precision.
#[test]
fn gradients_do_not_depend_on_the_thread_count() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
    let cnn = small_nature();
    let params = cnn.init_orthogonal(2f32.sqrt(), &mut rng);
    let batch = 2 * BACKWARD_SAMPLES_PER_TASK + SAMPLES_PER_TASK + 1;
    let (pixels, dl) = random_batch(&cnn, batch, &mut rng);
    for precision in [ConvPrecision::F32, ConvPrecision::Bf16] {
        let cnn = cnn.clone().with_precision(precision);
        let results: Vec<Vec<Vec<f32>>> = [1, 2, 3]
            .into_iter()
            .map(|threads| pass(&cnn, &params, &pixels, &dl, threads))
            .collect();
        assert!(results[0][1].iter().all(|g| g.is_finite()));
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "{precision:?} depends on the thread count"
        );
    }
}

/// bfloat16 products keep 8 significant bits of each operand: the features stay within a
/// percent of float32's (as a whole). Every layer's weight gradient, a sum over the batch
/// of products of both signs that mostly cancel on random data, stays within 10% (3-4%
/// here). Both do differ, so the products ran in bfloat16. Learning with it is a matter
/// of curves, not of this test.
#[test]
fn bf16_products_stay_close_to_f32() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(6);
    let cnn = small_nature();
    let params = cnn.init_orthogonal(2f32.sqrt(), &mut rng);
    let batch = BACKWARD_SAMPLES_PER_TASK + SAMPLES_PER_TASK + 3;
    let (pixels, dl) = random_batch(&cnn, batch, &mut rng);
    let exact = pass(&cnn, &params, &pixels, &dl, 2);
    let bf16 = cnn.clone().with_precision(ConvPrecision::Bf16);
    let rounded = pass(&bf16, &params, &pixels, &dl, 2);
    let relative = |a: &[f32], b: &[f32]| {
        let diff: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
        let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
        (diff / norm).sqrt()
    };
    let features = relative(&rounded[0], &exact[0]);
    assert!(features > 0.0 && features < 0.01, "features: {features}");
    for (l, range) in (0..=cnn.convs().len()).map(|l| (l, cnn.layout().range(2 * l))) {
        let e = relative(&rounded[1][range.clone()], &exact[1][range]);
        assert!(e > 0.0 && e < 0.1, "layer {l}'s weight gradient: {e}");
    }
}

#[test]
fn u8_and_scaled_f32_pixels_give_the_same_features_and_gradients() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(9);
    let cnn = Cnn::new(CnnArch::MinatarCnn, shape(10, 10, 4)).unwrap();
    let params = cnn.init_orthogonal(2f32.sqrt(), &mut rng);
    let bytes: Vec<u8> = (0..2 * 400).map(|i| (i * 7 % 256) as u8).collect();
    let floats: Vec<f32> = bytes.iter().map(|b| f32::from(*b) / 255.0).collect();
    let (mut a, mut b) = (CnnCache::default(), CnnCache::default());
    let fa = cnn.forward(&params, Pixels::U8(&bytes), 2, &mut a).to_vec();
    let fb = cnn.forward(&params, Pixels::F32(&floats), 2, &mut b);
    // Equal up to rounding: bytes meet weights divided by 255, floats arrive divided.
    for (x, y) in fa.iter().zip(fb) {
        assert!((x - y).abs() <= 1e-6 + 1e-5 * y.abs(), "{x} vs {y}");
    }
    assert!(fa.iter().any(|v| *v > 0.0));
    // The first layer's weight gradient is divided by 255 after its product.
    let dl: Vec<f32> = (0..fa.len()).map(|i| (i as f32 * 0.37).sin()).collect();
    let (mut ga, mut gb) = (vec![0.0; cnn.num_params()], vec![0.0; cnn.num_params()]);
    cnn.backward(&params, &mut a, &dl, &mut ga);
    cnn.backward(&params, &mut b, &dl, &mut gb);
    let first = cnn.convs()[0].patch_len() * cnn.convs()[0].out_channels;
    assert!(ga[..first].iter().any(|g| g.abs() > 1e-3));
    for (x, y) in ga.iter().zip(&gb) {
        assert!((x - y).abs() <= 1e-6 + 1e-4 * y.abs(), "{x} vs {y}");
    }
}
