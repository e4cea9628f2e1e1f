//! `strata bench gym`: what Gymnasium envs in Strata's worker processes cost, and
//! how they compare with Gymnasium's own `SyncVectorEnv` and
//! `AsyncVectorEnv(shared_memory=True)` on the same envs, in the same run.
//!
//! - **IPC overhead**: a batch-step of `strata/Null-v0` (an env that does nothing) per
//!   process size: the cost of the doorbell, the shared region and the worker's loop.
//! - **Throughput**: env steps per second and per CPU-second (every process counted: this
//!   thread and the env processes for Strata; Python and its workers for Gymnasium), with
//!   the same envs, env counts and process counts, a fixed cycle of random actions, and
//!   same-step autoreset on both sides.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use strata_env::gym::{default_python, describe, GymOptions, GymTarget, GymVecEnv};
use strata_env::{Space, StepBatch, VecEnv};

/// Gymnasium's side of the comparison, fed to `python -`.
const GYMNASIUM_PROGRAM: &str = include_str!("../../python/gym_vector_bench.py");

/// The section's figures.
#[derive(Serialize, Default, Debug)]
pub struct GymReport {
    /// Null-env batch-steps, per process size.
    pub ipc: Vec<IpcRow>,
    /// Strata vs Gymnasium, per env and layout.
    pub throughput: Vec<ThroughputRow>,
}

/// One process of `envs` null envs.
#[derive(Serialize, Debug)]
pub struct IpcRow {
    /// Envs in the process.
    pub envs: usize,
    /// Median batch-step with the default spin budget, microseconds.
    pub p50_us: f64,
    /// 90th and 99th percentiles.
    pub p90_us: f64,
    pub p99_us: f64,
    /// Median batch-step with both sides sleeping on the socket (never spinning), as when
    /// processes outnumber the cores.
    pub sleeping_p50_us: f64,
    /// Gymnasium's AsyncVectorEnv with as many null envs (one process each), per step.
    pub async_vector_env_us: f64,
}

/// One runner on one layout.
#[derive(Serialize, Debug)]
pub struct ThroughputRow {
    pub env: String,
    /// `strata`, `gymnasium sync` or `gymnasium async`.
    pub runner: String,
    pub envs: usize,
    /// Env processes besides the main one.
    pub processes: usize,
    pub env_steps_per_sec: f64,
    /// Env steps per CPU-second of every process involved.
    pub env_steps_per_cpu_second: f64,
}

/// What the Gymnasium program prints.
#[derive(Deserialize)]
struct Measured {
    env_steps: u64,
    wall_seconds: f64,
    cpu_seconds: f64,
}

/// Whether `python` has gymnasium; the reason when not.
fn check_python(python: &Path) -> Result<()> {
    let out = Command::new(python)
        .args(["-c", "import gymnasium"])
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "`{}` cannot import gymnasium (install python/requirements-gym.txt, set STRATA_PYTHON): {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Gymnasium's vector env `mode` on `envs` of `id` for `steps` batch-steps.
fn gymnasium(python: &Path, id: &str, mode: &str, envs: usize, steps: usize) -> Result<Measured> {
    let args = [
        id.to_string(),
        mode.into(),
        envs.to_string(),
        steps.to_string(),
    ];
    let out = crate::bench::python_program::run_python_program(
        python,
        GYMNASIUM_PROGRAM,
        &args,
        Stdio::inherit(),
    )?;
    if !out.status.success() {
        bail!(
            "Gymnasium's {mode} vector env on {id} failed ({})",
            out.status
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).with_context(|| format!("unreadable result: {line}"))
}

/// CPU seconds of a live process (user + system), from `/proc`.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// CPU seconds of the calling thread.
fn thread_cpu() -> f64 {
    // SAFETY: getrusage writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Strata's env processes: `envs` envs of `target` in processes of `per` envs, spinning
/// as `spin` says (`None`: the default for this machine).
fn strata_envs(
    target: &GymTarget,
    envs: usize,
    per: usize,
    spin: Option<Duration>,
) -> Result<GymVecEnv> {
    let layout = describe(target, Duration::from_secs(120))?;
    let options = GymOptions {
        envs_per_process: per,
        spin,
        ..GymOptions::default()
    };
    Ok(GymVecEnv::start(
        &format!("gym:{}", target.id),
        target,
        &layout,
        envs,
        &options,
    )?)
}

/// A fixed cycle of 16 random action batches for `envs` envs of `space`.
fn action_cycle(space: &Space, envs: usize) -> Vec<Vec<f32>> {
    let mut rng = strata_nn::SampleRng::seed_from_u64(0);
    (0..16)
        .map(|_| match space {
            Space::Discrete { n } => (0..envs).map(|_| rng.random_range(0..*n) as f32).collect(),
            Space::Box { low, high } => (0..envs)
                .flat_map(|_| {
                    low.iter()
                        .zip(high)
                        .map(|(l, h)| l + (h - l) * rng.random::<f32>())
                        .collect::<Vec<_>>()
                })
                .collect(),
        })
        .collect()
}

/// Steps Strata's processes `steps` times; wall and CPU seconds.
fn strata_measure(target: &GymTarget, envs: usize, per: usize, steps: usize) -> Result<Measured> {
    let mut vec_env = strata_envs(target, envs, per, None)?;
    let actions = action_cycle(&vec_env.spec().action_space, envs);
    let mut batch = StepBatch::new(vec_env.spec(), envs);
    for k in 0..20 {
        vec_env.step(&actions[k % 16], &mut batch)?;
    }
    let pids = vec_env.pids();
    let cpu = || thread_cpu() + pids.iter().map(|&p| process_cpu(p)).sum::<f64>();
    let (cpu0, t0) = (cpu(), Instant::now());
    for k in 0..steps {
        vec_env.step(&actions[k % 16], &mut batch)?;
    }
    let wall = t0.elapsed().as_secs_f64();
    Ok(Measured {
        env_steps: (steps * envs) as u64,
        wall_seconds: wall,
        cpu_seconds: cpu() - cpu0,
    })
}

/// Percentiles of `steps` null batch-steps in one process of `envs` envs.
fn null_latency(
    python: &Path,
    envs: usize,
    steps: usize,
    spin: Option<Duration>,
) -> Result<(f64, f64, f64)> {
    let target = GymTarget::new("strata/Null-v0", python);
    let mut vec_env = strata_envs(&target, envs, envs, spin)?;
    let actions = vec![0.0; envs];
    let mut batch = StepBatch::new(vec_env.spec(), envs);
    let mut times = Vec::with_capacity(steps);
    for k in 0..steps + 100 {
        let t0 = Instant::now();
        vec_env.step(&actions, &mut batch)?;
        if k >= 100 {
            times.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    Ok((at(0.5), at(0.9), at(0.99)))
}

/// Runs the section; `quick` takes a quarter of the steps.
pub fn run(quick: bool) -> Result<GymReport> {
    let python = default_python();
    check_python(&python)?;
    let scale = if quick { 1 } else { 4 };
    let mut report = GymReport::default();
    println!(
        "gym env processes ({}): null env batch-step (IPC overhead), one process",
        python.display()
    );
    for envs in [1, 8] {
        let (p50, p90, p99) = null_latency(&python, envs, 5_000 * scale, None)?;
        let (sleeping, _, _) = null_latency(&python, envs, 5_000 * scale, Some(Duration::ZERO))?;
        let g = gymnasium(&python, "strata/Null-v0", "async", envs, 1_000 * scale)?;
        let async_us = g.wall_seconds / (g.env_steps as f64 / envs as f64) * 1e6;
        println!(
            "  {envs} env(s): p50 {p50:.2} us, p90 {p90:.2} us, p99 {p99:.2} us per batch-step (target p50 <= 10 us; spin budget {:?}), never spinning p50 {sleeping:.2} us; AsyncVectorEnv with {envs} process(es): {async_us:.1} us",
            strata_env::gym::spin_budget(2)
        );
        report.ipc.push(IpcRow {
            envs,
            p50_us: p50,
            p90_us: p90,
            p99_us: p99,
            sleeping_p50_us: sleeping,
            async_vector_env_us: async_us,
        });
    }
    println!("gym env throughput: env steps/s and per CPU-second, Strata's processes vs Gymnasium's vector envs");
    for (id, total) in [
        ("CartPole-v1", 50_000 * scale),
        ("HalfCheetah-v5", 10_000 * scale),
    ] {
        let target = GymTarget::new(id, &python);
        let mut rows: Vec<ThroughputRow> = Vec::new();
        let mut add = |runner: &str, envs: usize, processes: usize, m: Measured| {
            let row = ThroughputRow {
                env: id.to_string(),
                runner: runner.to_string(),
                envs,
                processes,
                env_steps_per_sec: m.env_steps as f64 / m.wall_seconds,
                env_steps_per_cpu_second: m.env_steps as f64 / m.cpu_seconds.max(1e-9),
            };
            println!(
                "  {id:15} {:16} {envs} envs, {processes} processes: {:>9.0} steps/s, {:>9.0} per CPU-second",
                row.runner, row.env_steps_per_sec, row.env_steps_per_cpu_second
            );
            rows.push(row);
        };
        for envs in [1, 8] {
            add(
                "gymnasium sync",
                envs,
                0,
                gymnasium(&python, id, "sync", envs, total / envs)?,
            );
        }
        for (envs, processes) in [(1, 1), (2, 2), (8, 2), (8, 8)] {
            let m = strata_measure(&target, envs, envs / processes, total / envs)?;
            add("strata", envs, processes, m);
            if envs == processes {
                add(
                    "gymnasium async",
                    envs,
                    processes,
                    gymnasium(&python, id, "async", envs, total / envs)?,
                );
            }
        }
        report.throughput.extend(rows);
    }
    for (envs, processes) in [(1, 1), (2, 2), (8, 8)] {
        for id in ["CartPole-v1", "HalfCheetah-v5"] {
            let find = |runner: &str| {
                report.throughput.iter().find(|r| {
                    r.env == id && r.runner == runner && r.envs == envs && r.processes == processes
                })
            };
            if let (Some(s), Some(a)) = (find("strata"), find("gymnasium async")) {
                println!(
                    "  {id:15} {processes} processes: Strata / AsyncVectorEnv = {:.2}x steps/s, {:.2}x per CPU-second (target >= 1.5x)",
                    s.env_steps_per_sec / a.env_steps_per_sec,
                    s.env_steps_per_cpu_second / a.env_steps_per_cpu_second
                );
            }
        }
    }
    Ok(report)
}
