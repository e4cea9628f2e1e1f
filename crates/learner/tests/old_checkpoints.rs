//! A checkpoint written by an earlier Strata loads and means the same policy: the fixture
//! (`fixtures/lstm-cartpole`, an LSTM policy trained 4,096 steps on CartPole by the code
//! before the model was restructured into encoder, core and heads) is loaded with
//! [`load_policy`] and acts, step by step with its memory, as it did then: the same greedy
//! actions, and values equal to float32's precision. The fixture was recorded on one
//! kernel path (AVX-512); another path sums in another order, so values compare within
//! what float32 sums of the network's widths can differ by, not to the bit.
//!
//! `STRATA_WRITE_FIXTURES=1 cargo test -p strata-learner --test old_checkpoints` rewrites
//! the expected actions (only when a change of numbers is meant).

use std::path::Path;

use strata_learner::load_policy;
use strata_nn::Memory;

const CHECKPOINT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/lstm-cartpole");
const EXPECTED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/lstm-cartpole.actions.json"
);
const ENVS: usize = 3;
const STEPS: usize = 25;

#[test]
fn a_checkpoint_of_an_earlier_strata_loads_and_acts_as_it_did() {
    let mut policy = load_policy(Path::new(CHECKPOINT)).unwrap();
    assert_eq!(policy.config.network.core_size, 8);
    let model = policy.model.as_mut();
    let obs_dim = model.obs_dim();
    assert!(model.state_len() > 0, "the fixture's policy has memory");
    let mut state = vec![0.0; ENVS * model.state_len()];
    let (mut actions, mut values) = (Vec::new(), Vec::new());
    for t in 0..STEPS {
        // A fixed walk through observation space; each env starts an episode at step 0
        // and env 1 starts another at step 12.
        let obs: Vec<f32> = (0..ENVS * obs_dim)
            .map(|i| (((t * 7 + i * 3) % 11) as f32 - 5.0) * 0.4)
            .collect();
        let starts: Vec<bool> = (0..ENVS).map(|e| t == 0 || (e == 1 && t == 12)).collect();
        let mut greedy = vec![0.0; ENVS];
        model.act_greedy(
            &obs,
            Memory {
                state: &mut state.clone(),
                starts: &starts,
            },
            &mut greedy,
        );
        let mut v = vec![0.0; ENVS];
        model.values(
            &obs,
            Memory {
                state: &mut state,
                starts: &starts,
            },
            &mut v,
        );
        actions.extend(greedy);
        values.extend(v);
    }
    let now = serde_json::json!({ "actions": actions, "values": values });
    if std::env::var_os("STRATA_WRITE_FIXTURES").is_some() {
        std::fs::write(EXPECTED, serde_json::to_string_pretty(&now).unwrap() + "\n").unwrap();
        return;
    }
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(EXPECTED).unwrap()).unwrap();
    let floats = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    assert_eq!(
        floats(&now["actions"]),
        floats(&saved["actions"]),
        "the old checkpoint no longer acts as it did"
    );
    // The longest sum in the network (its 64-wide hidden layers) in units of float32's
    // rounding, of each value's size: a path's other order of summation stays inside it,
    // a changed model does not.
    let tolerance = 64.0 * f64::from(f32::EPSILON);
    assert_eq!(floats(&now["values"]).len(), floats(&saved["values"]).len());
    for (t, (now, then)) in floats(&now["values"])
        .iter()
        .zip(floats(&saved["values"]))
        .enumerate()
    {
        assert!(
            (now - then).abs() <= tolerance * then.abs().max(1.0),
            "value {t}: {now} where the old checkpoint gave {then}"
        );
    }
}
