//! Gradient and sampling checks of the CPU actor-critic.

use super::*;
use rand::{Rng, SeedableRng};

/// Loss = sum_i wl_i logp_i + we_i H_i + wv_i V_i, checked against finite differences
/// of every parameter, through the whole model.
/// With gSDE the latent features are constants of the log-prob's variance (as SB3
/// has it), so the policy's hidden layers are not compared: their finite differences
/// include the path through the features, which the analytic gradient leaves out.
fn check_model_gradients(head: Head, sde: bool) {
    let mut rng = SampleRng::seed_from_u64(4);
    let config = NetworkConfig {
        policy_hidden: vec![6],
        value_hidden: vec![5],
        log_std_init: -0.4,
        sde,
        ..NetworkConfig::default()
    };
    let mut model = MlpActorCritic::new(3, head, &config, &mut rng);
    // Larger head gains than PPO's init, so every gradient is well above f32 noise.
    for p in model.params.iter_mut() {
        *p += rng.random_range(-0.3..0.3);
    }
    let batch = 5;
    let obs: Vec<f32> = (0..batch * 3)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let (mut actions, mut lp, mut v) = (
        vec![0.0; batch * head.action_dim()],
        vec![0.0; batch],
        vec![0.0; batch],
    );
    model.act(&obs, &mut rng, &[], &mut actions, &mut lp, &mut v);
    let wl: Vec<f32> = (0..batch).map(|_| rng.random_range(-1.0..1.0)).collect();
    let we: Vec<f32> = (0..batch).map(|_| rng.random_range(-1.0..1.0)).collect();
    let wv: Vec<f32> = (0..batch).map(|_| rng.random_range(-1.0..1.0)).collect();
    let loss = |m: &mut MlpActorCritic| {
        let mut e = Evaluation::default();
        m.evaluate(&obs, &actions, &mut e);
        (0..batch)
            .map(|i| f64::from(wl[i] * e.log_probs[i] + we[i] * e.entropy[i] + wv[i] * e.values[i]))
            .sum::<f64>()
    };
    let mut e = Evaluation::default();
    model.evaluate(&obs, &actions, &mut e);
    // The log-probs from evaluate equal those recorded when acting.
    for i in 0..batch {
        assert!((e.log_probs[i] - lp[i]).abs() < 1e-4);
        assert!((e.values[i] - v[i]).abs() < 1e-6);
    }
    model.zero_grad();
    model.backward(&wl, &we, &wv, &[]);
    let analytic = model.grads.clone();
    let policy_hidden = if sde { 3 * 6 + 6 } else { 0 };
    for (i, expected) in analytic.iter().enumerate().skip(policy_hidden) {
        let orig = model.params[i];
        model.params[i] = orig + 1e-2;
        let up = loss(&mut model);
        model.params[i] = orig - 1e-2;
        let down = loss(&mut model);
        model.params[i] = orig;
        let numeric = (up - down) / 2e-2;
        assert!(
            (numeric - f64::from(*expected)).abs() <= 3e-3 + 3e-2 * numeric.abs(),
            "param {i}: numeric {numeric} analytic {expected}"
        );
    }
}

#[test]
fn categorical_model_gradients_match_finite_differences() {
    check_model_gradients(Head::Categorical { n: 3 }, false);
}

#[test]
fn gaussian_model_gradients_match_finite_differences() {
    check_model_gradients(Head::Gaussian { dim: 2 }, false);
}

#[test]
fn sde_model_gradients_match_finite_differences() {
    check_model_gradients(Head::Gaussian { dim: 2 }, true);
}

#[test]
fn sde_noise_held_fixed_gives_actions_linear_in_the_features() {
    let mut rng = SampleRng::seed_from_u64(9);
    let config = NetworkConfig {
        policy_hidden: vec![4],
        sde: true,
        log_std_init: -1.0,
        ..NetworkConfig::default()
    };
    let head = Head::Gaussian { dim: 1 };
    let mut model = MlpActorCritic::new(2, head, &config, &mut rng);
    assert_eq!(config.sde_noise_len(2, head), 4);
    assert_eq!(model.log_std().len(), 4);
    // The same observation and exploration matrix give the same action; a fresh
    // matrix per call (empty noise) does not.
    let obs = [0.3_f32, -0.7];
    let noise = [0.5_f32, -1.0, 2.0, 0.1];
    let act = |m: &mut MlpActorCritic, noise: &[f32], rng: &mut SampleRng| {
        let (mut a, mut lp, mut v) = ([0.0], [0.0], [0.0]);
        m.act(&obs, rng, noise, &mut a, &mut lp, &mut v);
        a[0]
    };
    let first = act(&mut model, &noise, &mut rng);
    assert_eq!(first, act(&mut model, &noise, &mut rng));
    assert_ne!(
        act(&mut model, &[], &mut rng),
        act(&mut model, &[], &mut rng)
    );
    let mut greedy = [0.0];
    model.act_greedy(&obs, &mut greedy);
    assert!(
        (first - greedy[0]).abs() > 1e-6,
        "the noise moved the action"
    );
}

#[test]
fn tensors_round_trip_and_bad_shapes_are_named() {
    let mut rng = SampleRng::seed_from_u64(1);
    let config = NetworkConfig::default();
    let mut a = MlpActorCritic::new(3, Head::Gaussian { dim: 1 }, &config, &mut rng);
    a.grads.fill(0.1);
    a.optimizer_step(1e-3, Some(0.5));
    let mut b = MlpActorCritic::new(3, Head::Gaussian { dim: 1 }, &config, &mut rng);
    assert_ne!(a.flat_params(), b.flat_params());
    b.load_tensors(&a.tensors()).unwrap();
    assert_eq!(a.flat_params(), b.flat_params());
    assert_eq!(a.adam, b.adam);
    let mut bad = a.tensors();
    bad[0].shape = vec![4, 64];
    let err = b.load_tensors(&bad).unwrap_err();
    assert!(err.to_string().contains("policy.0.weight"), "{err}");
    let missing: Vec<_> = a
        .tensors()
        .into_iter()
        .filter(|t| t.name != "adam.v")
        .collect();
    assert_eq!(
        b.load_tensors(&missing).unwrap_err(),
        NnError::MissingTensor("adam.v".into())
    );
}

#[test]
fn split_acting_equals_acting_on_each_part_with_its_rng() {
    for sde in [false, true] {
        let mut rng = SampleRng::seed_from_u64(9);
        let head = Head::Gaussian { dim: 2 };
        let config = NetworkConfig {
            sde,
            ..NetworkConfig::default()
        };
        let mut m = MlpActorCritic::new(3, head, &config, &mut rng);
        let obs: Vec<f32> = (0..15).map(|i| (i as f32 * 0.37).sin()).collect();
        let per_row = config.sde_noise_len(3, head);
        let noise: Vec<f32> = (0..5 * per_row).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut rngs = [SampleRng::seed_from_u64(1), SampleRng::seed_from_u64(2)];
        let (mut a, mut lp, mut v) = (vec![0.0; 10], vec![0.0; 5], vec![0.0; 5]);
        m.act_split(&obs, &[2, 3], &mut rngs, &noise, &mut a, &mut lp, &mut v);
        let (mut r1, mut r2) = (SampleRng::seed_from_u64(1), SampleRng::seed_from_u64(2));
        let (mut a1, mut lp1, mut v1) = (vec![0.0; 4], vec![0.0; 2], vec![0.0; 2]);
        let (n1, n2) = noise.split_at(2 * per_row);
        m.act(&obs[..6], &mut r1, n1, &mut a1, &mut lp1, &mut v1);
        let (mut a2, mut lp2, mut v2) = (vec![0.0; 6], vec![0.0; 3], vec![0.0; 3]);
        m.act(&obs[6..], &mut r2, n2, &mut a2, &mut lp2, &mut v2);
        assert_eq!(&a[..4], &a1[..], "sde {sde}");
        assert_eq!(&a[4..], &a2[..], "sde {sde}");
        assert_eq!(&lp[..2], &lp1[..], "sde {sde}");
        assert_eq!(&v[2..], &v2[..], "sde {sde}");
        assert_eq!(rngs[0], r1, "each RNG advanced by its own part only");
    }
}

#[test]
fn ppo_initialisation_gives_near_uniform_policy() {
    let mut rng = SampleRng::seed_from_u64(2);
    let mut m = MlpActorCritic::new(
        4,
        Head::Categorical { n: 2 },
        &NetworkConfig::default(),
        &mut rng,
    );
    let obs = [0.5_f32, -0.2, 0.1, 0.3];
    let mut e = Evaluation::default();
    m.evaluate(&obs, &[1.0], &mut e);
    // A 0.01-gain head makes the logits tiny: entropy close to ln 2.
    assert!((e.entropy[0] - 2f32.ln()).abs() < 1e-3);
}
