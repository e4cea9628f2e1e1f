//! Replays the recurrent cores' reference outputs recorded from PyTorch
//! (`scripts/record_rnn_fixtures.py`): PyTorch's parameters, mapped to Strata's layout
//! (the weight matrices transposed), must give the same outputs and last state from the
//! same first state.

use std::path::PathBuf;

use strata_nn::{CellKind, Recurrent, RecurrentCache};

fn fixture(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/rnn")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn replay(kind: CellKind, name: &str) {
    let f = fixture(name);
    let n = |k: &str| f[k].as_u64().unwrap() as usize;
    let (steps, batch, input, hidden) = (n("steps"), n("batch"), n("input"), n("hidden"));
    let layer = Recurrent::new(kind, input, hidden);
    let g = layer.gates();
    let p = &f["params"];
    // PyTorch's `gates x in` matrices, transposed into Strata's `in x gates`.
    let mut params = Vec::with_capacity(layer.num_params());
    for (key, fan_in) in [("weight_ih_l0", input), ("weight_hh_l0", hidden)] {
        let torch = floats(&p[key]);
        for i in 0..fan_in {
            params.extend((0..g).map(|o| torch[o * fan_in + i]));
        }
    }
    params.extend(floats(&p["bias_ih_l0"]));
    params.extend(floats(&p["bias_hh_l0"]));
    assert_eq!(params.len(), layer.num_params());
    let h0 = floats(&f["h0"]);
    let mut state0 = Vec::new();
    for b in 0..batch {
        state0.extend_from_slice(&h0[b * hidden..(b + 1) * hidden]);
        if kind == CellKind::Lstm {
            state0.extend_from_slice(&floats(&f["c0"])[b * hidden..(b + 1) * hidden]);
        }
    }
    let mut cache = RecurrentCache::default();
    let xs = floats(&f["xs"]);
    let starts = vec![false; steps * batch];
    let outputs = layer
        .forward(&params, &xs, &starts, &state0, (steps, batch), &mut cache)
        .to_vec();
    let close = |a: &[f32], b: &[f32], what: &str| {
        assert_eq!(a.len(), b.len(), "{name} {what}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() < 1e-5,
                "{name} {what}[{i}]: {x} vs PyTorch's {y}"
            );
        }
    };
    close(&outputs, &floats(&f["outputs"]), "outputs");
    let last = cache.last_state();
    let s = layer.state_size();
    let h_n: Vec<f32> = (0..batch)
        .flat_map(|b| last[b * s..b * s + hidden].to_vec())
        .collect();
    close(&h_n, &floats(&f["h_n"]), "h_n");
    if kind == CellKind::Lstm {
        let c_n: Vec<f32> = (0..batch)
            .flat_map(|b| last[b * s + hidden..(b + 1) * s].to_vec())
            .collect();
        close(&c_n, &floats(&f["c_n"]), "c_n");
    }
}

#[test]
fn lstm_matches_pytorch_on_fixed_weights() {
    replay(CellKind::Lstm, "lstm");
}

#[test]
fn gru_matches_pytorch_on_fixed_weights() {
    replay(CellKind::Gru, "gru");
}
