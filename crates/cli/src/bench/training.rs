//! The training suite (`strata bench training`): raw env stepping, the 4-64-64-2
//! minibatch pass on one and two threads, single-observation inference, training
//! throughput at rl-zoo3's CartPole hyperparameters and with 4 epochs, seconds to solve
//! CartPole and Pendulum, and the runtime's modes compared.

use std::time::Instant;

use anyhow::Result;
use rand::SeedableRng;
use serde::Serialize;
use strata_algo::PpoConfig;
use strata_env::{make_vec_env, StepBatch};
use strata_nn::{ActorCritic, ActorCriticNet, Evaluation, Head, Memory, NetworkConfig, SampleRng};
use strata_runtime::{preset, Inference, Mode, RunConfig, Summary, Trainer};

use super::Report;

/// Reference figures measured on this machine class (2 cores), for the ratios.
const ENVPOOL_CARTPOLE_64: f64 = 440_000.0;
const SB3_CARTPOLE_STEPS_PER_SEC: f64 = 3_300.0;
const SB3_CARTPOLE_SECONDS_TO_SOLVE: f64 = 10.0;
const SB3_PENDULUM_SECONDS_TO_SOLVE: f64 = 25.0;

/// Measures and prints the suite's figures into `r`; the runtime's modes unless
/// `skip_runtime`.
///
/// # Errors
/// A training that fails.
pub(super) fn run(quick: bool, skip_runtime: bool, r: &mut Report) -> Result<()> {
    let scale = if quick { 1 } else { 4 };
    r.env_step_cartpole64_steps_per_sec = env_stepping(50_000 * scale)?;
    r.env_step_vs_envpool = r.env_step_cartpole64_steps_per_sec / ENVPOOL_CARTPOLE_64;
    println!(
        "env stepping, 64 cartpoles:        {:>12.0} steps/s  ({:.1}x EnvPool's {ENVPOOL_CARTPOLE_64})",
        r.env_step_cartpole64_steps_per_sec, r.env_step_vs_envpool
    );
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        let (f, b, o, s) = pool.install(|| network_passes(200 * scale));
        if threads == 1 {
            r.minibatch512_forward_ms = f;
            r.minibatch512_backward_ms = b;
            r.minibatch512_adam_ms = o;
            r.single_obs_inference_us = s;
            println!("single-observation inference:      {s:>12.2} us");
        } else {
            r.minibatch512_two_threads_ms = f + b + o;
        }
        println!(
            "4-64-64-2 minibatch 512, {threads} thread(s): forward {f:.3} ms, loss+backward {b:.3} ms, Adam {o:.3} ms (total {:.3} ms)",
            f + b + o
        );
    }

    // rl-zoo3's own CartPole hyperparameters: our preset with its 20 epochs.
    let mut zoo = preset("cartpole").expect("preset");
    zoo.ppo.n_epochs = 20;
    zoo.train.total_steps = 25_000 * scale as u64;
    zoo.train.learner_threads = 1;
    let s = train_throughput(zoo.clone())?;
    r.zoo_cartpole_one_learner_thread_steps_per_sec = s.env_steps_per_sec;
    println!(
        "cartpole, rl-zoo3, 1 learner thread: {:>11.0} steps/s  ({:.1}x SB3's {SB3_CARTPOLE_STEPS_PER_SEC})",
        s.env_steps_per_sec,
        s.env_steps_per_sec / SB3_CARTPOLE_STEPS_PER_SEC
    );
    zoo.train.learner_threads = 2;
    let s = train_throughput(zoo)?;
    r.zoo_cartpole_20_epochs_steps_per_sec = s.env_steps_per_sec;
    r.zoo_cartpole_vs_sb3 = s.env_steps_per_sec / SB3_CARTPOLE_STEPS_PER_SEC;
    println!(
        "cartpole, rl-zoo3, 2 learner threads: {:>10.0} steps/s  ({:.1}x SB3's {SB3_CARTPOLE_STEPS_PER_SEC})",
        s.env_steps_per_sec, r.zoo_cartpole_vs_sb3
    );

    let mut fast = preset("cartpole").expect("preset");
    fast.ppo = PpoConfig {
        n_epochs: 4,
        ..fast.ppo
    };
    fast.train.total_steps = 50_000 * scale as u64;
    let s = train_throughput(fast)?;
    r.cartpole_4_epochs_steps_per_sec = s.env_steps_per_sec;
    let t = s.time;
    println!(
        "cartpole, 4 epochs, 64-64:          {:>12.0} steps/s  (env {:.2}s, inference {:.2}s, forward {:.2}s, backward {:.2}s, adam {:.2}s, other {:.2}s)",
        s.env_steps_per_sec, t.env_step, t.inference, t.forward, t.backward, t.optimizer, t.other
    );
    r.time_breakdown_cartpole_4_epochs = Some(s);

    let seeds: &[u64] = if quick { &[1] } else { &[1, 2, 3] };
    r.cartpole_seconds_to_solve = seconds_to_solve("cartpole", seeds, 100_000)?;
    r.cartpole_median_seconds_to_solve = median(&r.cartpole_seconds_to_solve);
    println!(
        "cartpole seconds to solve (preset): {:?}, median {:?}  (SB3 ~{SB3_CARTPOLE_SECONDS_TO_SOLVE}s)",
        r.cartpole_seconds_to_solve, r.cartpole_median_seconds_to_solve
    );
    r.pendulum_seconds_to_solve = seconds_to_solve("pendulum", seeds, 200_000)?;
    r.pendulum_median_seconds_to_solve = median(&r.pendulum_seconds_to_solve);
    println!(
        "pendulum seconds to solve (preset): {:?}, median {:?}  (SB3 ~{SB3_PENDULUM_SECONDS_TO_SOLVE}s)",
        r.pendulum_seconds_to_solve, r.pendulum_median_seconds_to_solve
    );
    if !skip_runtime {
        r.runtime = runtime_section(quick)?;
    }
    Ok(())
}

/// One runtime configuration's figures.
#[derive(Serialize)]
pub(super) struct RuntimeRow {
    workload: String,
    mode: String,
    inference: String,
    workers: usize,
    env_steps_per_sec: f64,
    final_mean_return: Option<f64>,
    seconds_to_solve: Option<f64>,
    policy_lag_max: u64,
}

/// Trains `config` to its budget; returns the summary and the largest lag seen.
fn run_with_lag(config: RunConfig) -> Result<(Summary, u64)> {
    let mut trainer = Trainer::new(config)?;
    let mut lag = 0;
    while !trainer.finished() {
        lag = lag.max(trainer.iterate()?.policy_lag_max);
    }
    Ok((trainer.summary(), lag))
}

/// Sync vs async and in-worker vs central inference, on plain CartPole and Pendulum and on
/// a balanced workload (CartPole with 12 us of simulated physics per env step, so stepping
/// costs about what learning does).
pub(super) fn runtime_section(quick: bool) -> Result<Vec<RuntimeRow>> {
    let mut rows = Vec::new();
    let workloads: [(&str, &str, u64, u64); 3] = [
        (
            "cartpole",
            "cartpole",
            0,
            if quick { 40_000 } else { 100_000 },
        ),
        (
            "balanced (cartpole + 12us/step)",
            "cartpole",
            12,
            if quick { 40_000 } else { 100_000 },
        ),
        (
            "pendulum",
            "pendulum",
            0,
            if quick { 60_000 } else { 200_000 },
        ),
    ];
    let setups: [(Mode, Inference, usize); 4] = [
        (Mode::Sync, Inference::Worker, 1),
        (Mode::Async, Inference::Worker, 1),
        (Mode::Sync, Inference::Central, 2),
        (Mode::Async, Inference::Central, 2),
    ];
    println!("runtime: workload / mode / inference / workers -> env steps/s, final mean return, seconds to solve, max lag");
    for (name, env, cost, budget) in workloads {
        let mut base_rate = None;
        for (mode, inference, workers) in setups {
            let mut c = preset(env).expect("built-in preset");
            c.env.step_cost_us = cost;
            c.train.total_steps = budget;
            c.runtime.mode = mode;
            c.runtime.inference = inference;
            c.runtime.workers = workers;
            let (s, lag) = run_with_lag(c)?;
            let rate = s.env_steps_per_sec;
            let base = *base_rate.get_or_insert(rate);
            println!(
                "  {name:32} {:5} {:7} {workers}  {:>9.0} steps/s ({:.2}x sync/worker)  return {:>7.1}  solved {:>6}  lag {lag}",
                format!("{mode:?}").to_lowercase(),
                format!("{inference:?}").to_lowercase(),
                rate,
                rate / base,
                s.final_mean_return.unwrap_or(f64::NAN),
                s.seconds_to_solve.map_or("-".into(), |t| format!("{t:.2}s")),
            );
            rows.push(RuntimeRow {
                workload: name.to_string(),
                mode: format!("{mode:?}").to_lowercase(),
                inference: format!("{inference:?}").to_lowercase(),
                workers,
                env_steps_per_sec: rate,
                final_mean_return: s.final_mean_return,
                seconds_to_solve: s.seconds_to_solve,
                policy_lag_max: lag,
            });
        }
    }
    Ok(rows)
}

fn median(values: &[Option<f64>]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().flatten().copied().collect();
    if v.len() < values.len() {
        return None; // an unsolved seed makes the median undefined
    }
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn env_stepping(steps: usize) -> Result<f64> {
    let n = 64;
    let mut envs = make_vec_env("cartpole", n)?;
    let mut batch = StepBatch::new(envs.spec(), n);
    envs.reset(0, &mut batch.obs)?;
    let actions: Vec<Vec<f32>> = (0..16)
        .map(|k| (0..n).map(|i| ((i * 7 + k * 3) % 2) as f32).collect())
        .collect();
    let start = Instant::now();
    for t in 0..steps {
        envs.step(&actions[t % 16], &mut batch)?;
    }
    Ok((steps * n) as f64 / start.elapsed().as_secs_f64())
}

fn network_passes(reps: usize) -> (f64, f64, f64, f64) {
    let mut rng = SampleRng::seed_from_u64(0);
    let mut model = ActorCriticNet::new(
        4,
        Head::Categorical { n: 2 },
        &NetworkConfig::default(),
        &mut rng,
    );
    let batch = 512;
    let obs: Vec<f32> = (0..batch * 4)
        .map(|i| ((i * 37) % 100) as f32 * 0.01 - 0.5)
        .collect();
    let actions: Vec<f32> = (0..batch).map(|i| (i % 2) as f32).collect();
    let (d_lp, d_ent, d_v) = (vec![0.01; batch], vec![-0.0; batch], vec![0.02; batch]);
    let mut eval = Evaluation::default();
    let (mut fwd, mut bwd, mut opt) = (0.0, 0.0, 0.0);
    for _ in 0..reps {
        let t0 = Instant::now();
        model.evaluate((&obs).into(), &actions, &mut eval);
        let t1 = Instant::now();
        model.backward(&d_lp, &d_ent, &d_v, &[]);
        let t2 = Instant::now();
        model.optimizer_step(1e-5, Some(strata_nn::GradClip::global(0.5)));
        let t3 = Instant::now();
        fwd += (t1 - t0).as_secs_f64();
        bwd += (t2 - t1).as_secs_f64();
        opt += (t3 - t2).as_secs_f64();
    }
    let one = &obs[..4];
    let (mut a, mut lp, mut v) = ([0.0], [0.0], [0.0]);
    let t0 = Instant::now();
    for _ in 0..reps * 20 {
        model.act(one, Memory::none(), &mut rng, &[], &mut a, &mut lp, &mut v);
    }
    let single = t0.elapsed().as_secs_f64() / (reps * 20) as f64;
    let ms = 1e3 / reps as f64;
    (fwd * ms, bwd * ms, opt * ms, single * 1e6)
}

fn train_throughput(config: RunConfig) -> Result<Summary> {
    let mut trainer = Trainer::new(config)?;
    while !trainer.finished() {
        trainer.iterate()?;
    }
    Ok(trainer.summary())
}

fn seconds_to_solve(env: &str, seeds: &[u64], budget: u64) -> Result<Vec<Option<f64>>> {
    seeds
        .iter()
        .map(|&seed| {
            let mut c = preset(env).expect("built-in preset");
            c.train.seed = seed;
            c.train.total_steps = budget;
            c.train.stop_when_solved = true;
            Ok(train_throughput(c)?.seconds_to_solve)
        })
        .collect()
}
