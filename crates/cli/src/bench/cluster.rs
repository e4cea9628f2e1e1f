//! `strata bench cluster`: a run's learner and rollout workers as processes over
//! NATS JetStream against the same run in one process, in the same bench run: env steps,
//! fragments and megabytes per second, with one and two worker processes.
//!
//! The bench starts a nats-server of its own (`STRATA_NATS_SERVER`, else `nats-server` on
//! the `PATH`) on a free loopback port with its store synced at every write, and the worker
//! processes (this binary's `strata worker`). The learner runs here, with its defaults for
//! distributed runs (a checkpoint every update, before its fragments are acknowledged).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use strata_runtime::{preset, run, RunConfig, RunDir, Trainer};

use super::procs::NatsServer as Server;

/// The section's figures, one row per workload and layout.
#[derive(Serialize, Default, Debug)]
pub struct ClusterReport {
    pub rows: Vec<ClusterRow>,
}

#[derive(Serialize, Debug)]
pub struct ClusterRow {
    pub workload: String,
    /// `one process` or `N worker processes`.
    pub layout: String,
    pub env_steps_per_sec: f64,
    /// Fragments the learner took from the stream per second (0 in one process).
    pub fragments_per_sec: f64,
    /// Their megabytes per second.
    pub megabytes_per_sec: f64,
    /// Env steps per second relative to one process.
    pub vs_one_process: f64,
}

/// Worker processes, stopped (SIGINT, then SIGKILL) when dropped.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &self.0 {
            // SAFETY: signalling a child this bench started.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for c in &mut self.0 {
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn train_in(trainer: &mut Trainer, dir: &Path) -> Result<f64> {
    let mut run_dir = RunDir::create(dir, trainer)?;
    let started = Instant::now();
    run::train(trainer, &mut run_dir, &mut |_| {})?;
    Ok(started.elapsed().as_secs_f64())
}

/// The workloads: plain CartPole (tiny fragments, many updates), the balanced one (12 us
/// of simulated physics per step, so stepping costs about what learning does), and the
/// balanced one collected asynchronously.
fn workloads(quick: bool) -> Vec<(&'static str, RunConfig)> {
    let steps = if quick { 30_000 } else { 100_000 };
    let mut plain = preset("cartpole").expect("built-in preset");
    plain.runtime.workers = 2;
    plain.train.total_steps = steps;
    plain.report.eval_episodes = 0;
    let mut balanced = plain.clone();
    balanced.env.step_cost_us = 12;
    // Asynchronous collection hides the round trip: workers collect the next fragment
    // with the version they have while the learner trains.
    let mut overlapped = balanced.clone();
    overlapped.runtime.mode = strata_runtime::Mode::Async;
    vec![
        ("cartpole", plain),
        ("balanced (cartpole + 12us/step)", balanced),
        ("balanced, async (lag 1)", overlapped),
    ]
}

/// Runs the section.
pub fn run(quick: bool) -> Result<ClusterReport> {
    let server = Server::start()?;
    let strata = std::env::current_exe().context("this binary's path")?;
    let mut report = ClusterReport::default();
    println!("cluster over NATS JetStream ({}): env steps/s, fragments/s and MB/s the learner takes, vs one process", server.url());
    for (k, (name, config)) in workloads(quick).into_iter().enumerate() {
        let dir = tempfile::tempdir()?;
        let mut local = Trainer::new(config.clone())?;
        let seconds = train_in(&mut local, &dir.path().join("local"))?;
        let base = local.progress().global_step as f64 / seconds;
        drop(local);
        let mut rows = vec![ClusterRow {
            workload: name.into(),
            layout: "one process".into(),
            env_steps_per_sec: base,
            fragments_per_sec: 0.0,
            megabytes_per_sec: 0.0,
            vs_one_process: 1.0,
        }];
        for processes in [1usize, 2] {
            let run_name = format!("bench-{k}-{processes}");
            let meeting = strata_cluster::Meeting {
                url: server.url(),
                run: run_name.clone(),
                timeout: Duration::from_secs(10),
                access: Default::default(),
            };
            let threads = (config.runtime.workers / processes).max(1).to_string();
            let _workers = Workers(
                (0..processes)
                    .map(|_| {
                        Command::new(&strata)
                            .args([
                                "worker",
                                "--nats",
                                &meeting.url,
                                "--run",
                                &run_name,
                                "--threads",
                                &threads,
                            ])
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .spawn()
                    })
                    .collect::<std::io::Result<_>>()?,
            );
            let (mut trainer, traffic) =
                strata_cluster::prepare_learner_counted(&meeting, config.clone(), None)?;
            let run_dir: PathBuf = dir.path().join(&run_name);
            let seconds = train_in(&mut trainer, &run_dir)?;
            let steps = trainer.progress().global_step as f64;
            let (fragments, bytes) = (
                traffic.fragments.load(Ordering::Relaxed),
                traffic.bytes.load(Ordering::Relaxed),
            );
            rows.push(ClusterRow {
                workload: name.into(),
                layout: format!(
                    "{processes} worker process{}",
                    if processes == 1 { "" } else { "es" }
                ),
                env_steps_per_sec: steps / seconds,
                fragments_per_sec: fragments as f64 / seconds,
                megabytes_per_sec: bytes as f64 / seconds / 1e6,
                vs_one_process: steps / seconds / base,
            });
        }
        for r in &rows {
            println!(
                "  {:32} {:20} {:>9.0} env steps/s ({:.2}x)  {:>7.1} fragments/s  {:>6.2} MB/s",
                r.workload,
                r.layout,
                r.env_steps_per_sec,
                r.vs_one_process,
                r.fragments_per_sec,
                r.megabytes_per_sec
            );
        }
        report.rows.extend(rows);
    }
    Ok(report)
}
