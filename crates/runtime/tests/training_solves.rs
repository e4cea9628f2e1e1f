//! Every built-in env's preset solves its task within the budget, in deterministic
//! mode, for the listed seeds. Budgets are env steps, never wall-clock time.
//!
//! A seed's run differs between kernel paths (sums round otherwise), so each claim holds
//! with a margin across the paths measured: on an AVX2 CPU the CartPole seeds solve at 23-29k steps
//! (AVX2) and 31-44k (portable) of their 100k, Pendulum's at 61-66k and 61-94k of 200k,
//! Acrobot's at 57k and 61k of 300k. Where one seed's margin was thin (CartPole without
//! velocities), the test asks for a rate over seeds.

use strata_runtime::{preset, run, RunDir, Trainer};

/// Trains `env`'s preset with `seed` for up to `budget` steps in deterministic mode.
fn train(env: &str, seed: u64, budget: u64, stop_when_solved: bool) -> Trainer {
    let mut config = preset(env).unwrap();
    config.train.seed = seed;
    config.train.total_steps = budget;
    config.train.deterministic = true;
    config.train.stop_when_solved = stop_when_solved;
    let mut trainer = Trainer::new(config).unwrap();
    while !trainer.finished() {
        trainer.iterate().unwrap();
    }
    trainer
}

fn solves(env: &str, seed: u64, budget: u64) {
    let s = train(env, seed, budget, true).summary();
    assert!(
        s.solved,
        "{env} seed {seed} not solved within {budget} steps: mean return of the last 20 episodes {:?}",
        s.final_mean_return
    );
    let threshold = strata_env::spec_for(env).unwrap().reward_threshold;
    assert!(s.final_mean_return.unwrap() >= threshold);
    assert!(s.steps_to_solve.unwrap() <= budget);
}

#[test]
fn cartpole_seed_1_solves_within_100k_steps() {
    solves("cartpole", 1, 100_000);
}

#[test]
fn cartpole_seed_2_solves_within_100k_steps() {
    solves("cartpole", 2, 100_000);
}

#[test]
fn cartpole_seed_3_solves_within_100k_steps() {
    solves("cartpole", 3, 100_000);
}

#[test]
fn pendulum_seed_1_solves_within_200k_steps() {
    solves("pendulum", 1, 200_000);
}

#[test]
fn pendulum_seed_2_solves_within_200k_steps() {
    solves("pendulum", 2, 200_000);
}

#[test]
fn pendulum_seed_3_solves_within_200k_steps() {
    solves("pendulum", 3, 200_000);
}

#[test]
fn acrobot_solves_within_300k_steps() {
    solves("acrobot", 1, 300_000);
}

/// MountainCarContinuous with gSDE: training's own episodes solve it, and the best
/// evaluated version within the preset's 100k steps (`best/`) scores >= 90 on fresh greedy
/// episodes it was not chosen on.
fn mountaincar_best_version_solves(seed: u64) {
    let mut config = preset("mountaincar-continuous").unwrap();
    config.train.seed = seed;
    config.train.deterministic = true;
    let mut trainer = Trainer::new(config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut run_dir = RunDir::create(dir.path(), &trainer).unwrap();
    let summary = run::train(&mut trainer, &mut run_dir, &mut |_| {}).unwrap();
    assert!(
        summary.solved,
        "seed {seed}: training episodes never reached 90"
    );
    let mut best = strata_runtime::load_policy(&dir.path().join("best")).unwrap();
    let fresh = strata_runtime::evaluate(&mut best, 20, 777, true).unwrap();
    assert!(
        fresh.mean_return >= 90.0,
        "seed {seed}: best version {} scores {} on fresh episodes",
        best.policy_version,
        fresh.mean_return
    );
}

#[test]
fn mountaincar_continuous_best_version_solves_seed_1() {
    mountaincar_best_version_solves(1);
}

#[test]
fn mountaincar_continuous_best_version_solves_seed_4() {
    mountaincar_best_version_solves(4);
}

/// Trains `env`'s preset for `budget` steps (deterministic) and returns the greedy success
/// rate over 200 fresh episodes.
fn success_rate_after(env: &str, seed: u64, budget: u64) -> f64 {
    let trainer = train(env, seed, budget, false);
    let dir = tempfile::tempdir().unwrap();
    strata_runtime::save_checkpoint(&trainer.state().unwrap(), dir.path()).unwrap();
    drop(trainer);
    let mut policy = strata_runtime::load_policy(dir.path()).unwrap();
    let result = strata_runtime::evaluate(&mut policy, 200, 99, true).unwrap();
    result.success_rate.unwrap()
}

#[test]
fn arm_reach_succeeds_90_percent_within_300k_steps() {
    let rate = success_rate_after("arm-reach", 1, 300_000);
    assert!(rate >= 0.9, "success rate {rate}");
}

#[test]
fn arm_reach_with_a_moving_target_succeeds_90_percent_within_300k_steps() {
    let rate = success_rate_after("arm-reach-moving", 1, 300_000);
    assert!(rate >= 0.9, "success rate {rate}");
}

#[test]
fn ui_form_completes_90_percent_within_700k_steps() {
    let rate = success_rate_after("ui-form", 1, 700_000);
    assert!(rate >= 0.9, "completion rate {rate}");
}

/// CartPole without velocities: the LSTM preset solves it on most seeds (two of seeds
/// 1-3 within 100k steps, every one of them holding the pole past 300: seed 1 solves at
/// 79.9k on an AVX-512 CPU and ends at 452 on an AVX2 one, where sums round otherwise);
/// with central inference (each group's states travel with its requests; two workers, so
/// other seeds) it holds the pole far longer than the same preset without the core, which
/// cannot (the control).
#[test]
fn cartpole_without_velocities_needs_the_memory_it_gets() {
    let runs: Vec<_> = (1..=3)
        .map(|seed| (seed, train("cartpole-novel", seed, 100_000, true).summary()))
        .collect();
    let solved = runs.iter().filter(|(_, s)| s.solved).count();
    let report: Vec<_> = runs
        .iter()
        .map(|(seed, s)| {
            format!(
                "seed {seed}: {:?} at {:?}",
                s.final_mean_return, s.steps_to_solve
            )
        })
        .collect();
    assert!(
        solved >= 2,
        "cartpole-novel solved on {solved} of 3 seeds: {report:?}"
    );
    assert!(
        runs.iter()
            .all(|(_, s)| s.final_mean_return.unwrap() >= 300.0),
        "{report:?}"
    );
    let mut central = preset("cartpole-novel").unwrap();
    central.train.seed = 1;
    central.train.total_steps = 100_000;
    central.train.deterministic = true;
    central.train.stop_when_solved = true;
    central.runtime.workers = 2;
    central.runtime.inference = strata_runtime::Inference::Central;
    let mut trainer = Trainer::new(central).unwrap();
    while !trainer.finished() {
        trainer.iterate().unwrap();
    }
    let with_central = trainer.summary().final_mean_return.unwrap();
    assert!(with_central >= 250.0, "central inference: {with_central}");
    let mut control = preset("cartpole-novel").unwrap();
    control.network.core = strata_nn::Core::None;
    control.train.total_steps = 100_000;
    let mut trainer = Trainer::new(control).unwrap();
    while !trainer.finished() {
        trainer.iterate().unwrap();
    }
    let without = trainer.summary().final_mean_return.unwrap();
    assert!(without < 150.0, "an MLP without velocities: {without}");
}
