//! Replays trajectories recorded from Gymnasium (`scripts/record_gymnasium_fixtures.py`) and
//! checks every step: internal state (f64), observation (f32), reward and both end flags.
//!
//! Tolerances: the state and reward must agree within 1e-6 absolute (they agree to ~1e-12
//! in practice: same operations in the same order, only libm's last bit may differ). The f32
//! observation must agree within 1e-6 absolute or 2 f32 ulps, since a last-bit difference in
//! the f64 state can round to a neighbouring f32.

use std::path::PathBuf;

use serde_json::Value;
use strata_env::{make_env, CartPole, StepBatch, VecEnv, Vectorized};

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/gymnasium")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close_f32(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-6 || (a - b).abs() <= 2.0 * f32::EPSILON * a.abs().max(b.abs())
}

/// Replays every case of one env; returns the largest state difference seen.
fn replay(name: &str) -> f64 {
    let doc = fixture(name);
    let mut env = make_env(name).unwrap();
    let spec = env.spec();
    let mut obs = vec![0.0_f32; spec.obs_dim()];
    let mut worst = 0.0_f64;
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 4, "{name}: too few cases");
    for (c, case) in cases.iter().enumerate() {
        env.set_state(&floats(&case["start_state"])).unwrap();
        let actions = floats(&case["actions"]);
        let steps = case["steps"].as_array().unwrap();
        for (t, (step, action)) in steps.iter().zip(&actions).enumerate() {
            // Unclipped, as Gymnasium received it: the env handles out-of-range values itself.
            let a = *action as f32;
            let tr = env.step(&[a], &mut obs);
            let where_ = format!("{name} case {c} step {t}");
            for (ours, theirs) in env.state().iter().zip(floats(&step["state"])) {
                worst = worst.max((ours - theirs).abs());
                assert!(
                    (ours - theirs).abs() <= 1e-6,
                    "{where_}: state {ours} vs {theirs}"
                );
            }
            for (ours, theirs) in obs.iter().zip(floats(&step["obs"])) {
                assert!(
                    close_f32(*ours, theirs as f32),
                    "{where_}: obs {ours} vs {theirs}"
                );
            }
            let reward = step["reward"].as_f64().unwrap();
            assert!(
                (tr.reward - reward).abs() <= 1e-6,
                "{where_}: reward {} vs {reward}",
                tr.reward
            );
            assert_eq!(
                tr.terminated,
                step["terminated"].as_bool().unwrap(),
                "{where_}: terminated"
            );
            let truncated = !tr.terminated && t + 1 >= spec.max_episode_steps as usize;
            assert_eq!(
                truncated,
                step["truncated"].as_bool().unwrap(),
                "{where_}: truncated"
            );
        }
    }
    worst
}

#[test]
fn cartpole_matches_gymnasium() {
    let worst = replay("cartpole");
    assert!(worst < 1e-9, "worst state difference {worst}");
}

#[test]
fn pendulum_matches_gymnasium() {
    let worst = replay("pendulum");
    assert!(worst < 1e-9, "worst state difference {worst}");
}

#[test]
fn acrobot_matches_gymnasium() {
    replay("acrobot");
}

#[test]
fn mountaincar_continuous_matches_gymnasium() {
    let worst = replay("mountaincar-continuous");
    // The f32 roundings match bit for bit; only the f64 first step may differ in the last bit.
    assert!(worst < 1e-12, "worst state difference {worst}");
}

#[test]
fn fixtures_cover_termination_and_truncation() {
    for name in ["cartpole", "pendulum", "acrobot", "mountaincar-continuous"] {
        let doc = fixture(name);
        let last = |key: &str| {
            doc["cases"].as_array().unwrap().iter().any(|c| {
                c["steps"].as_array().unwrap().last().unwrap()[key]
                    .as_bool()
                    .unwrap()
            })
        };
        assert!(last("truncated"), "{name}: no case reaches the time limit");
        if name != "pendulum" {
            assert!(last("terminated"), "{name}: no case terminates");
        }
    }
}

#[test]
fn vectorised_time_limit_matches_gymnasium_truncation() {
    // The balancing case of cartpole runs to the 500-step limit through the vector too.
    let doc = fixture("cartpole");
    let case = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["steps"].as_array().unwrap().last().unwrap()["truncated"]
                .as_bool()
                .unwrap()
        })
        .unwrap();
    let mut envs = Vectorized::new(CartPole::default(), 1);
    let mut batch = StepBatch::new(envs.spec(), 1);
    envs.reset(0, &mut batch.obs).unwrap();
    let mut snap = envs.snapshot();
    snap.slots[0].state = floats(&case["start_state"]);
    envs.restore(&snap).unwrap();
    let actions = floats(&case["actions"]);
    for (t, a) in actions.iter().enumerate() {
        envs.step(&[*a as f32], &mut batch).unwrap();
        assert_eq!(batch.truncated[0], t == 499, "step {t}");
    }
    assert_eq!(batch.episodes.len(), 1);
    assert_eq!(batch.episodes[0].episode_return, 500.0);
}
