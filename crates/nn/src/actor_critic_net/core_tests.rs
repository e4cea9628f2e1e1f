//! Checks of the actor-critic with a recurrent core: acting step by step agrees with
//! training on the sequence, gradients through time match finite differences, and the
//! core's tensors round-trip.

use super::*;
use crate::network::Core;
use rand::{Rng, SeedableRng};

const STEPS: usize = 5;
const ENVS: usize = 3;
const OBS: usize = 3;

fn config(core: Core, shared: bool, layers: usize) -> NetworkConfig {
    NetworkConfig {
        policy_hidden: vec![6],
        value_hidden: vec![5],
        log_std_init: -0.4,
        core,
        core_size: 4,
        core_layers: layers,
        core_shared: shared,
        ..NetworkConfig::default()
    }
}

/// A rollout of `STEPS x ENVS` rows acted on step by step from random states, env 1's
/// episode restarting at step 2 and env 2's at step 0.
struct Rollout {
    obs: Vec<f32>,
    starts: Vec<bool>,
    state0: Vec<f32>,
    actions: Vec<f32>,
    log_probs: Vec<f32>,
    values: Vec<f32>,
}

fn act_through(model: &mut ActorCriticNet, rng: &mut SampleRng) -> Rollout {
    let (s, ad) = (model.state_len(), model.head().action_dim());
    let obs: Vec<f32> = (0..STEPS * ENVS * OBS)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let mut starts = vec![false; STEPS * ENVS];
    starts[2 * ENVS + 1] = true;
    starts[2] = true;
    let state0: Vec<f32> = (0..ENVS * s).map(|_| rng.random_range(-0.8..0.8)).collect();
    let mut state = state0.clone();
    let mut out = Rollout {
        actions: vec![0.0; STEPS * ENVS * ad],
        log_probs: vec![0.0; STEPS * ENVS],
        values: vec![0.0; STEPS * ENVS],
        obs,
        starts,
        state0,
    };
    for t in 0..STEPS {
        let rows = t * ENVS..(t + 1) * ENVS;
        model.act(
            &out.obs[rows.start * OBS..rows.end * OBS],
            Memory {
                state: &mut state,
                starts: &out.starts[rows.clone()],
            },
            rng,
            &[],
            &mut out.actions[rows.start * ad..rows.end * ad],
            &mut out.log_probs[rows.clone()],
            &mut out.values[rows],
        );
    }
    out
}

impl Rollout {
    fn sequences(&self) -> Sequences<'_> {
        Sequences {
            steps: STEPS,
            starts: &self.starts,
            state0: &self.state0,
        }
    }
}

#[test]
fn acting_step_by_step_agrees_with_evaluating_the_sequence() {
    for (core, shared, layers, head) in [
        (Core::Lstm, false, 1, Head::Categorical { n: 3 }),
        (Core::Gru, true, 2, Head::Gaussian { dim: 2 }),
        (Core::Lstm, true, 2, Head::Gaussian { dim: 2 }),
    ] {
        let mut rng = SampleRng::seed_from_u64(7);
        let mut model = ActorCriticNet::new(OBS, head, &config(core, shared, layers), &mut rng);
        assert_eq!(model.state_len(), config(core, shared, layers).state_len());
        let per_stack = layers * if core == Core::Lstm { 8 } else { 4 };
        assert_eq!(model.state_len(), per_stack * if shared { 1 } else { 2 });
        let r = act_through(&mut model, &mut rng);
        let mut e = Evaluation::default();
        model.evaluate_sequences((&r.obs).into(), &r.actions, r.sequences(), &mut e);
        for i in 0..STEPS * ENVS {
            assert!(
                (e.log_probs[i] - r.log_probs[i]).abs() < 1e-4,
                "{core:?} row {i}"
            );
            assert!((e.values[i] - r.values[i]).abs() < 1e-5, "{core:?} row {i}");
        }
        // The memory matters: from zero states the same rows give other values.
        let zeros = vec![0.0; r.state0.len()];
        let fresh = Sequences {
            state0: &zeros,
            ..r.sequences()
        };
        model.evaluate_sequences((&r.obs).into(), &r.actions, fresh, &mut e);
        let moved = (0..STEPS * ENVS).filter(|&i| (e.values[i] - r.values[i]).abs() > 1e-4);
        // Env 2 restarts at step 0: its rows cannot tell; the others' early rows can.
        assert!(
            moved.count() >= 4,
            "{core:?}: the initial state changes nothing"
        );
    }
}

/// Loss = sum_i wl_i logp_i + we_i H_i + wv_i V_i over a sequence minibatch, against
/// central finite differences of every parameter.
fn check_sequence_gradients(core: Core, shared: bool, head: Head) {
    let mut rng = SampleRng::seed_from_u64(11);
    let mut model = ActorCriticNet::new(OBS, head, &config(core, shared, 2), &mut rng);
    for p in model.params.iter_mut() {
        *p += rng.random_range(-0.3..0.3);
    }
    let r = act_through(&mut model, &mut rng);
    let n = STEPS * ENVS;
    let mut weights = || -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
    let (wl, we, wv) = (weights(), weights(), weights());
    let mut e = Evaluation::default();
    let mut loss = |model: &mut ActorCriticNet| -> f64 {
        model.evaluate_sequences((&r.obs).into(), &r.actions, r.sequences(), &mut e);
        (0..n)
            .map(|i| f64::from(wl[i] * e.log_probs[i] + we[i] * e.entropy[i] + wv[i] * e.values[i]))
            .sum()
    };
    loss(&mut model);
    model.zero_grad();
    model.backward(&wl, &we, &wv, &[]);
    let analytic = model.grads.clone();
    let core_start = model.spans.core.start;
    assert!(
        analytic[core_start..]
            .iter()
            .filter(|g| g.abs() > 1e-3)
            .count()
            > 50
    );
    for (i, expected) in analytic.iter().enumerate() {
        let orig = model.params[i];
        model.params[i] = orig + 1e-2;
        let up = loss(&mut model);
        model.params[i] = orig - 1e-2;
        let down = loss(&mut model);
        model.params[i] = orig;
        let numeric = (up - down) / 2e-2;
        assert!(
            (numeric - f64::from(*expected)).abs() <= 3e-3 + 3e-2 * numeric.abs(),
            "{core:?} param {i} (core from {core_start}): numeric {numeric} analytic {expected}"
        );
    }
}

#[test]
fn lstm_model_gradients_through_time_match_finite_differences() {
    check_sequence_gradients(Core::Lstm, false, Head::Categorical { n: 3 });
}

#[test]
fn shared_gru_model_gradients_through_time_match_finite_differences() {
    check_sequence_gradients(Core::Gru, true, Head::Gaussian { dim: 2 });
}

#[test]
fn core_tensors_round_trip_under_their_names() {
    let mut rng = SampleRng::seed_from_u64(2);
    let head = Head::Categorical { n: 2 };
    let model = ActorCriticNet::new(OBS, head, &config(Core::Lstm, false, 2), &mut rng);
    let tensors = model.tensors();
    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    for name in [
        "core.policy.0.weight_ih",
        "core.policy.1.bias_hh",
        "core.value.1.weight_hh",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let w = tensors
        .iter()
        .find(|t| t.name == "core.value.0.weight_ih")
        .unwrap();
    assert_eq!(w.shape, [OBS, 16], "input x 4 gates of 4 units");
    let mut other = ActorCriticNet::new(
        OBS,
        head,
        &config(Core::Lstm, false, 2),
        &mut SampleRng::seed_from_u64(9),
    );
    assert_ne!(other.flat_params(), model.flat_params());
    other.load_tensors(&tensors).unwrap();
    assert_eq!(other.flat_params(), model.flat_params());
    assert_eq!(
        model.core().as_deref(),
        Some("lstm 4x2 (policy), lstm 4x2 (value)")
    );
}

#[test]
fn images_go_through_their_cnn_then_the_core() {
    use super::tests::{mixed_images, mixed_rows};
    let (obs_dim, images) = mixed_images();
    let mut rng = SampleRng::seed_from_u64(4);
    let network = config(Core::Gru, false, 1);
    let head = Head::Categorical { n: 3 };
    let mut model =
        ActorCriticNet::with_images(obs_dim, &images, head, &network, &mut rng).unwrap();
    assert_eq!(model.encoders().len(), 2);
    let s = model.state_len();
    let obs = mixed_rows(&mut rng, &images, obs_dim, STEPS * ENVS);
    let starts: Vec<bool> = (0..STEPS * ENVS).map(|i| i == 4).collect();
    let state0: Vec<f32> = (0..ENVS * s).map(|_| rng.random_range(-0.5..0.5)).collect();
    let mut state = state0.clone();
    let (mut actions, mut lp, mut v) = (
        vec![0.0; STEPS * ENVS],
        vec![0.0; STEPS * ENVS],
        vec![0.0; STEPS * ENVS],
    );
    for t in 0..STEPS {
        let rows = t * ENVS..(t + 1) * ENVS;
        model.act(
            &obs[rows.start * obs_dim..rows.end * obs_dim],
            Memory {
                state: &mut state,
                starts: &starts[rows.clone()],
            },
            &mut rng,
            &[],
            &mut actions[rows.clone()],
            &mut lp[rows.clone()],
            &mut v[rows],
        );
    }
    let mut e = Evaluation::default();
    let seq = Sequences {
        steps: STEPS,
        starts: &starts,
        state0: &state0,
    };
    model.evaluate_sequences((&obs).into(), &actions, seq, &mut e);
    for i in 0..STEPS * ENVS {
        assert!(
            (e.log_probs[i] - lp[i]).abs() < 1e-4 && (e.values[i] - v[i]).abs() < 1e-5,
            "row {i}"
        );
    }
    // The gradient reaches the encoders through the core.
    model.zero_grad();
    let ones = vec![1.0; STEPS * ENVS];
    model.backward(&ones, &ones, &ones, &[]);
    let encoder_grads = &model.grads[model.spans.encoder.clone()];
    assert!(encoder_grads.iter().filter(|g| g.abs() > 1e-6).count() > 100);
}
