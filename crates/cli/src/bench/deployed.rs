//! `strata bench deployed --minutes M`: the deployed loop spanning machines, on this one,
//! against one gateway alone in the same run.
//!
//! First half: one `strata serve` (its own learner) under a simulated fleet. Second half:
//! a nats-server, `strata learner --from-gateways` and three `strata serve --nats
//! --gateway-id N` under a fleet spread over them. For each: every process's resident
//! memory, sampled every two seconds, at the start and the end of the last third (level,
//! or growing); reports per second per gateway and in all; the learner's lag from the
//! newest segment's last step to the version trained on it (p50, p99). The cost of
//! spanning machines is the ratio of the two.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::procs::{spawn_strata, status_mb, wait_for_address, NatsServer};

/// Gateways of the spanning layout.
const GATEWAYS: usize = 3;

/// One process's memory in the last third of its half.
#[derive(Debug, Serialize)]
pub struct MemoryRow {
    pub process: String,
    pub rss_mb_two_thirds: f64,
    pub rss_mb_end: f64,
    pub rss_mb_peak: f64,
}

/// One layout's figures.
#[derive(Debug, Serialize)]
pub struct LayoutFigures {
    pub layout: String,
    pub seconds: f64,
    pub reports_per_sec: f64,
    pub reports_per_sec_per_gateway: Vec<f64>,
    pub learner_updates: usize,
    pub lag_p50_seconds: Option<f64>,
    pub lag_p99_seconds: Option<f64>,
    pub memory: Vec<MemoryRow>,
}

/// Both layouts and their ratio.
#[derive(Debug, Serialize)]
pub struct DeployedReport {
    pub alone: LayoutFigures,
    pub spanning: LayoutFigures,
    /// Reports per second in all, spanning / alone.
    pub reports_ratio: f64,
}

/// A process of the bench, killed if it ends without stopping it.
struct Named {
    name: String,
    child: Child,
}

impl Drop for Named {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Stops `p` with SIGTERM (SIGKILL after 30 s).
fn stop(p: &mut Named) {
    // SAFETY: signalling a process this bench started and has not reaped.
    unsafe { libc::kill(p.child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while p.child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = p.child.kill();
            let _ = p.child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the fleet (`args`) to its end while sampling `procs`' memory every two seconds.
fn fleet_sampling(
    fleet_args: &[String],
    log: &Path,
    pids: &[u32],
    seconds: f64,
) -> Result<Vec<Vec<(f64, f64)>>> {
    let args: Vec<&str> = fleet_args.iter().map(String::as_str).collect();
    let mut fleet = Named {
        name: "fleet".into(),
        child: spawn_strata(&args, log)?,
    };
    let started = Instant::now();
    let mut samples = vec![Vec::new(); pids.len()];
    let deadline = started + Duration::from_secs_f64(seconds + 120.0);
    loop {
        for (k, &pid) in pids.iter().enumerate() {
            samples[k].push((started.elapsed().as_secs_f64(), status_mb(pid, "VmRSS:")));
        }
        if let Some(status) = fleet.child.try_wait()? {
            if !status.success() {
                bail!("the fleet failed ({status}); see {}", log.display());
            }
            return Ok(samples);
        }
        if Instant::now() > deadline {
            stop(&mut fleet);
            bail!("the fleet outlived its time; see {}", log.display());
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Memory at two thirds and at the end, and the peak, from `(seconds, MB)` samples.
fn memory(name: &str, samples: &[(f64, f64)]) -> MemoryRow {
    let end = samples.last().map_or(0.0, |s| s.0);
    let at = |t: f64| {
        samples
            .iter()
            .find(|s| s.0 >= t)
            .or(samples.last())
            .map_or(0.0, |s| s.1)
    };
    MemoryRow {
        process: name.to_string(),
        rss_mb_two_thirds: at(end * 2.0 / 3.0),
        rss_mb_end: samples.last().map_or(0.0, |s| s.1),
        rss_mb_peak: samples.iter().map(|s| s.1).fold(0.0, f64::max),
    }
}

/// Lag p50 and p99 from a learner log's `lag_seconds`, and its updates.
fn lags(log: &Path) -> (usize, Option<f64>, Option<f64>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut lag: Vec<f64> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["lag_seconds"].as_f64())
        .collect();
    lag.sort_by(f64::total_cmp);
    let q = |p: f64| (!lag.is_empty()).then(|| lag[((lag.len() - 1) as f64 * p).round() as usize]);
    (text.lines().count(), q(0.5), q(0.99))
}

/// Reports stored per second per gateway, from `strata fleet --summary-json`.
fn reports_per_gateway(summary: &Path) -> Result<(f64, Vec<f64>)> {
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(summary).with_context(|| format!("reading {}", summary.display()))?,
    )?;
    let rate = |r: &serde_json::Value| {
        r["stored"].as_f64().unwrap_or(0.0) / r["seconds"].as_f64().unwrap_or(1.0).max(1e-9)
    };
    let per: Vec<f64> = match json["per_gateway"].as_array() {
        Some(list) => list.iter().map(rate).collect(),
        None => vec![rate(&json["fleet"])],
    };
    Ok((per.iter().sum(), per))
}

/// The fleet's arguments: `agents` over `gateways` (URL, directory) for `seconds`.
fn fleet_args(
    gateways: &[(String, PathBuf)],
    agents: usize,
    seconds: f64,
    summary: &Path,
) -> Vec<String> {
    let mut args = vec![
        "fleet".to_string(),
        "--env".into(),
        "cartpole".into(),
        "--agents".into(),
        agents.to_string(),
        "--steps".into(),
        u64::MAX.to_string(),
        "--seconds".into(),
        seconds.to_string(),
        "--summary-json".into(),
        summary.display().to_string(),
    ];
    for (url, dir) in gateways {
        args.extend(["--server".into(), url.clone(), "--tokens".into()]);
        args.push(dir.join("tokens.json").display().to_string());
    }
    args
}

/// Runs both halves of `minutes` with `agents` agents under `dir`.
///
/// # Errors
/// No nats-server, or a process that fails (its log named).
pub fn run(minutes: f64, dir: &Path, agents: usize) -> Result<DeployedReport> {
    std::fs::create_dir_all(dir)?;
    let half = minutes * 60.0 / 2.0;
    // One gateway alone, training on its own reports.
    let alone_dir = dir.join("alone");
    let url = wait_for_address(
        spawn_strata(
            &[
                "serve",
                "--env",
                "cartpole",
                "--addr",
                "127.0.0.1:0",
                "--cooldown-secs",
                "0",
                "--dir",
                &alone_dir.display().to_string(),
            ],
            &dir.join("alone.log"),
        )?,
        &alone_dir,
    )?;
    let mut alone_procs = [Named {
        name: "gateway (alone)".into(),
        child: url.0,
    }];
    let summary = dir.join("alone-fleet.json");
    let t0 = Instant::now();
    let samples = fleet_sampling(
        &fleet_args(&[(url.1, alone_dir.clone())], agents, half, &summary),
        &dir.join("alone-fleet.log"),
        &[alone_procs[0].child.id()],
        half,
    )?;
    let seconds = t0.elapsed().as_secs_f64();
    stop(&mut alone_procs[0]);
    let (total, per) = reports_per_gateway(&summary)?;
    let (updates, p50, p99) = lags(&alone_dir.join("learner.jsonl"));
    let alone = LayoutFigures {
        layout: "one gateway, its own learner".into(),
        seconds,
        reports_per_sec: total,
        reports_per_sec_per_gateway: per,
        learner_updates: updates,
        lag_p50_seconds: p50,
        lag_p99_seconds: p99,
        memory: vec![memory("gateway", &samples[0])],
    };

    // Three gateways feeding one learner over NATS.
    let nats = NatsServer::start()?;
    let learner_dir = dir.join("learner");
    let url = nats.url();
    let mut procs = vec![Named {
        name: "learner".into(),
        child: spawn_strata(
            &[
                "learner",
                "--nats",
                &url,
                "--run",
                "bench",
                "--from-gateways",
                "--env",
                "cartpole",
                "--run-dir",
                &learner_dir.display().to_string(),
            ],
            &dir.join("learner.log"),
        )?,
    }];
    // Gateways join once the learner has published its first version.
    let meeting = strata_cluster::Meeting {
        url: url.clone(),
        run: "bench".into(),
        timeout: Duration::from_secs(2),
        access: Default::default(),
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while strata_cluster::run_config(&meeting).is_err() {
        if Instant::now() > deadline {
            bail!(
                "the learner did not start; see {}",
                dir.join("learner.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // run_config answers once the config is stored; version 0 follows at once.
    std::thread::sleep(Duration::from_secs(1));
    let mut gateways = Vec::new();
    for g in 1..=GATEWAYS {
        let gdir = dir.join(format!("g{g}"));
        let id = g.to_string();
        let (child, url) = wait_for_address(
            spawn_strata(
                &[
                    "serve",
                    "--nats",
                    &url,
                    "--run",
                    "bench",
                    "--gateway-id",
                    &id,
                    "--release",
                    "auto",
                    "--cooldown-secs",
                    "0",
                    "--addr",
                    "127.0.0.1:0",
                    "--dir",
                    &gdir.display().to_string(),
                ],
                &dir.join(format!("g{g}.log")),
            )?,
            &gdir,
        )?;
        procs.push(Named {
            name: format!("gateway {g}"),
            child,
        });
        gateways.push((url, gdir));
    }
    let summary = dir.join("spanning-fleet.json");
    let t0 = Instant::now();
    let mut pids: Vec<u32> = procs.iter().map(|p| p.child.id()).collect();
    pids.push(nats.pid());
    let samples = fleet_sampling(
        &fleet_args(&gateways, agents, half, &summary),
        &dir.join("spanning-fleet.log"),
        &pids,
        half,
    )?;
    let seconds = t0.elapsed().as_secs_f64();
    let names = procs
        .iter()
        .map(|p| p.name.clone())
        .chain(["nats-server".to_string()]);
    let memory_rows: Vec<MemoryRow> = names
        .zip(&samples)
        .map(|(name, s)| memory(&name, s))
        .collect();
    for p in procs.iter_mut().rev() {
        stop(p);
    }
    let (total, per) = reports_per_gateway(&summary)?;
    let (updates, p50, p99) = lags(&learner_dir.join("learner.jsonl"));
    let spanning = LayoutFigures {
        layout: format!("{GATEWAYS} gateways, one learner over NATS"),
        seconds,
        reports_per_sec: total,
        reports_per_sec_per_gateway: per,
        learner_updates: updates,
        lag_p50_seconds: p50,
        lag_p99_seconds: p99,
        memory: memory_rows,
    };
    let reports_ratio = spanning.reports_per_sec / alone.reports_per_sec.max(1e-9);
    Ok(DeployedReport {
        alone,
        spanning,
        reports_ratio,
    })
}

/// Prints the figures.
pub fn print(r: &DeployedReport) {
    for f in [&r.alone, &r.spanning] {
        let per: Vec<String> = f
            .reports_per_sec_per_gateway
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect();
        let lag = |v: Option<f64>| v.map_or("-".into(), |s| format!("{s:.2} s"));
        println!(
            "{} ({:.0} s): {:.0} reports/s in all ({} per gateway); {} learner updates, lag p50 {}, p99 {}",
            f.layout,
            f.seconds,
            f.reports_per_sec,
            per.join(" / "),
            f.learner_updates,
            lag(f.lag_p50_seconds),
            lag(f.lag_p99_seconds)
        );
        for m in &f.memory {
            println!(
                "  {:<16} RSS {:>7.1} MB at two thirds, {:>7.1} MB at the end (peak {:.1})",
                m.process, m.rss_mb_two_thirds, m.rss_mb_end, m.rss_mb_peak
            );
        }
    }
    println!(
        "spanning / alone, reports per second in all: {:.2}x",
        r.reports_ratio
    );
}
