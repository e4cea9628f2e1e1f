//! Replays one PPO update of Stable-Baselines3 recorded on HalfCheetah-v4
//! (`scripts/record_ppo_fixtures.py`): SB3's untrained parameters, mapped to Strata's
//! layout, must give the log-probabilities and values SB3 recorded while collecting; GAE on
//! the rollout as the env gave it (two time-limit truncations) must give SB3's advantages
//! and returns; and six epochs of Strata's update on SB3's settings (the clipped surrogate
//! with 29% of the ratios outside the clip range, the global gradient clip, Adam with ε
//! 1e-5) must land on SB3's parameters, to float rounding.

use std::path::PathBuf;

use rand::SeedableRng;
use serde_json::Value;
use strata_algo::{Ppo, PpoConfig, RolloutBuffer};
use strata_nn::{ActorCritic, ActorCriticNet, Evaluation, Head, NetworkConfig, SampleRng};

fn fixture() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/ppo/halfcheetah_sb3_update.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn flags(v: &Value) -> Vec<bool> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_bool().unwrap())
        .collect()
}

/// SB3's name for each of Strata's parameter tensors (`MlpPolicy`, `net_arch` [64, 64]).
fn sb3_name(strata: &str) -> &'static str {
    match strata {
        "policy.0.weight" => "mlp_extractor.policy_net.0.weight",
        "policy.0.bias" => "mlp_extractor.policy_net.0.bias",
        "policy.1.weight" => "mlp_extractor.policy_net.2.weight",
        "policy.1.bias" => "mlp_extractor.policy_net.2.bias",
        "policy.2.weight" => "action_net.weight",
        "policy.2.bias" => "action_net.bias",
        "value.0.weight" => "mlp_extractor.value_net.0.weight",
        "value.0.bias" => "mlp_extractor.value_net.0.bias",
        "value.1.weight" => "mlp_extractor.value_net.2.weight",
        "value.1.bias" => "mlp_extractor.value_net.2.bias",
        "value.2.weight" => "value_net.weight",
        "value.2.bias" => "value_net.bias",
        "policy.log_std" => "log_std",
        other => panic!("no SB3 tensor for {other}"),
    }
}

/// SB3's parameters (`params_before` or `params_after`) in Strata's flat layout: PyTorch's
/// `out x in` weights transposed into Strata's `in x out`.
fn sb3_params(f: &Value, which: &str, model: &ActorCriticNet) -> Vec<f32> {
    let mut flat = Vec::new();
    for t in model.tensors() {
        if t.name.starts_with("adam.") {
            continue;
        }
        let name = sb3_name(&t.name);
        let torch = floats(&f[which][name]);
        assert_eq!(torch.len(), t.data.len(), "{name}");
        if t.shape.len() == 2 {
            let (fan_in, fan_out) = (t.shape[0], t.shape[1]);
            for i in 0..fan_in {
                flat.extend((0..fan_out).map(|o| torch[o * fan_in + i]));
            }
        } else {
            flat.extend(torch);
        }
    }
    flat
}

/// Every element of `got` within `tol` of `want`, scaled by the larger magnitude above 1.
fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0.0_f32, 0);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs() / w.abs().max(1.0);
        if err > worst.0 {
            worst = (err, i);
        }
    }
    let i = worst.1;
    assert!(
        worst.0 <= tol,
        "{what}: element {i} is {} against SB3's {} (error {:e} > {tol:e})",
        got[i],
        want[i],
        worst.0
    );
}

#[test]
fn one_update_lands_on_sb3s_parameters() {
    let f = fixture();
    let n = |k: &str| f[k].as_u64().unwrap() as usize;
    let x = |k: &str| f[k].as_f64().unwrap();
    let (obs_dim, action_dim, steps) = (n("obs_dim"), n("action_dim"), n("n_steps"));
    let network = NetworkConfig::default();
    let mut rng = SampleRng::seed_from_u64(0);
    let mut model = ActorCriticNet::new(
        obs_dim,
        Head::Gaussian { dim: action_dim },
        &network,
        &mut rng,
    );
    model
        .set_flat_params(&sb3_params(&f, "params_before", &model))
        .unwrap();

    // The rollout as SB3 collected it.
    let mut rollout = RolloutBuffer::new(1, steps, obs_dim, action_dim);
    let obs = floats(&f["observations"]);
    rollout.obs.write(0, &obs);
    rollout.actions = floats(&f["actions"]);
    rollout.log_probs = floats(&f["log_probs"]);
    rollout.values = floats(&f["values"]);
    rollout.rewards = floats(&f["rewards"]);
    rollout.terminated = flags(&f["terminated"]);
    rollout.truncated = flags(&f["truncated"]);
    rollout.final_values = floats(&f["final_values"]);
    rollout.last_values = vec![x("last_value") as f32];
    assert_eq!(rollout.truncated.iter().filter(|t| **t).count(), 2);

    // The untrained model gives the log-probabilities and values SB3 acted with.
    let mut evaluation = Evaluation::default();
    model.evaluate(
        rollout.obs.batch(0..steps),
        &rollout.actions,
        &mut evaluation,
    );
    assert_close(&evaluation.log_probs, &rollout.log_probs, 1e-5, "log-probs");
    assert_close(&evaluation.values, &rollout.values, 1e-5, "values");

    rollout.compute_advantages(x("gamma") as f32, x("gae_lambda") as f32);
    assert_close(
        &rollout.advantages,
        &floats(&f["advantages"]),
        1e-5,
        "advantages",
    );
    assert_close(&rollout.returns, &floats(&f["returns"]), 1e-5, "returns");

    let config = PpoConfig {
        n_steps: steps,
        batch_size: n("batch_size"),
        n_epochs: n("n_epochs"),
        learning_rate: x("learning_rate"),
        clip_range: x("clip_range"),
        gamma: x("gamma"),
        gae_lambda: x("gae_lambda"),
        vf_coef: x("vf_coef"),
        ent_coef: x("ent_coef"),
        max_grad_norm: Some(x("max_grad_norm")),
        clip_grad_per_network: false,
        ..PpoConfig::default()
    };
    let stats = Ppo::new(config, 1).update(&mut model, &rollout, 1.0);
    // What SB3 logged: the clip fraction, losses and entropy over every epoch, the KL over
    // the last.
    let sb3 = &f["stats"];
    let stat = |k: &str| sb3[k].as_f64().unwrap() as f32;
    assert!(
        stat("clip_fraction") > 0.1,
        "the fixture exercises clipping"
    );
    // No ratio of SB3's came within float rounding of the clip range's edge (the nearest
    // is recorded), so which samples are clipped does not hang on how a CPU rounds.
    assert!(
        x("clip_margin") > 1e-4,
        "re-record the fixture: a ratio sits on the clip range's edge"
    );
    let figures = [
        ("clip fraction", stats.clip_fraction, stat("clip_fraction")),
        ("approx KL", stats.approx_kl_last_epoch, stat("approx_kl")),
        (
            "policy loss",
            stats.policy_loss,
            stat("policy_gradient_loss"),
        ),
        ("value loss", stats.value_loss, stat("value_loss")),
        ("entropy", stats.entropy, -stat("entropy_loss")),
    ];
    for (what, got, want) in figures {
        assert!(
            (got - want).abs() <= 1e-3 * want.abs().max(1e-2),
            "{what}: {got} against SB3's {want}"
        );
    }
    assert_close(
        model.flat_params(),
        &sb3_params(&f, "params_after", &model),
        2e-5,
        "parameters after the update",
    );
}
