//! `strata bench soak --minutes MINUTES`: the parts of Strata that run for days, run together for a
//! while, each in its own process, with their resources sampled.
//!
//! Three processes of this binary: a gateway (`strata serve`: its ledger, learner, journal,
//! ledger compaction and version retention), a simulated 16-agent fleet driving it over HTTP
//! (`strata fleet --server`), and a training run with its ledger (`strata train`). Every
//! few seconds each one's resident memory, open files and threads, and the disk its
//! directory takes, go to `soak.csv`; at the end the gateway is stopped (SIGTERM: timed,
//! its exit checked) and restarted on its directory (time to answer `/healthz`, its memory
//! then), and `soak.svg` plots memory and disk over time. What should level off after the
//! warm-up (memory, files, threads) is compared between the end of the warm-up and the end.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::procs::{spawn_strata, status_mb, this_binary, wait_for_address};

/// What `strata bench soak` was asked.
pub struct SoakOptions {
    /// How long the three processes run together.
    pub minutes: f64,
    /// Where their directories, `soak.csv` and `soak.svg` go.
    pub dir: PathBuf,
    /// Simulated agents.
    pub agents: usize,
}

/// One process's resources at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub seconds: f64,
    pub process: String,
    pub rss_mb: f64,
    pub open_files: usize,
    pub threads: usize,
    pub disk_mb: f64,
}

/// One process's figures: after the warm-up (a fifth of the run) and at the end.
#[derive(Debug, Serialize)]
pub struct SoakRow {
    pub process: String,
    pub warm: Sample,
    pub end: Sample,
    pub peak_rss_mb: f64,
}

/// The soak's figures.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub minutes: f64,
    pub rows: Vec<SoakRow>,
    /// The fleet's last line (steps, reports stored).
    pub fleet: String,
    /// SIGTERM to exit of the gateway after the soak.
    pub gateway_stop_seconds: f64,
    /// Start to answering `/healthz` of the gateway restarted on the soak's directory.
    pub restart_healthy_seconds: f64,
    /// The restarted gateway's resident memory then.
    pub restart_rss_mb: f64,
    /// Processes this bench started that were still alive at its end (0).
    pub processes_left: usize,
}

/// A process of the soak, killed if the bench ends without stopping it.
struct Proc {
    name: &'static str,
    child: Child,
    dir: Option<PathBuf>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `strata serve` on `dir` and waits for its address.
fn serve(dir: &Path, log: &Path) -> Result<(Child, String, Instant)> {
    let started = Instant::now();
    let address = dir.join("address");
    let _ = std::fs::remove_file(&address);
    let d = dir.to_str().context("a UTF-8 directory")?;
    let child = spawn_strata(
        &[
            "serve",
            "--env",
            "cartpole",
            "--addr",
            "127.0.0.1:0",
            "--dir",
            d,
        ],
        log,
    )?;
    let (child, url) = wait_for_address(child, dir)?;
    Ok((child, url, started))
}

/// Waits until `url` answers `/healthz`.
fn healthy(url: &str) -> Result<()> {
    let client = strata_gateway::Client::new(url, "");
    let deadline = Instant::now() + Duration::from_secs(300);
    while client.get_text("/healthz").is_err() {
        if Instant::now() > deadline {
            bail!("{url}/healthz did not answer within 300 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn entries(path: &str) -> usize {
    std::fs::read_dir(path).map_or(0, Iterator::count)
}

/// Bytes under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(read) = std::fs::read_dir(dir) else {
        return 0;
    };
    read.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => disk_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

fn sample(p: &Proc, seconds: f64) -> Sample {
    let pid = p.child.id();
    Sample {
        seconds,
        process: p.name.to_string(),
        rss_mb: status_mb(pid, "VmRSS:"),
        open_files: entries(&format!("/proc/{pid}/fd")),
        threads: entries(&format!("/proc/{pid}/task")),
        disk_mb: p.dir.as_deref().map_or(0.0, |d| disk_bytes(d) as f64 / 1e6),
    }
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for our purposes (its parent reaps it below).
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// Runs the soak.
///
/// # Errors
/// A process that cannot start or exits early, a gateway that stops uncleanly.
pub fn run(options: &SoakOptions) -> Result<SoakReport> {
    let dir = &options.dir;
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        bail!(
            "{} is not empty: the soak writes its processes' directories there; give --dir a new one",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir)?;
    this_binary();
    let seconds = (options.minutes * 60.0).max(10.0);
    let every = Duration::from_secs_f64((seconds / 120.0).clamp(1.0, 30.0));
    let (gateway_dir, train_dir) = (dir.join("gateway"), dir.join("train"));
    let (child, url, _) = serve(&gateway_dir, &dir.join("serve.log"))?;
    let gateway = Proc {
        name: "gateway",
        child,
        dir: Some(gateway_dir.clone()),
    };
    let tokens = gateway_dir.join("tokens.json");
    let fleet = Proc {
        name: "fleet",
        child: spawn_strata(
            &[
                "fleet",
                "--server",
                &url,
                "--tokens",
                tokens.to_str().context("a UTF-8 directory")?,
                "--agents",
                &options.agents.to_string(),
                "--steps",
                "1000000000000",
                "--seconds",
                &format!("{seconds}"),
            ],
            &dir.join("fleet.log"),
        )?,
        dir: None,
    };
    let mut trainer = Proc {
        name: "train",
        child: spawn_strata(
            &[
                "train",
                "--env",
                "cartpole",
                "--max-steps",
                "1000000000000",
                "--set",
                "report.eval_episodes=0",
                "--run-dir",
                train_dir.to_str().context("a UTF-8 directory")?,
            ],
            &dir.join("train.log"),
        )?,
        dir: Some(train_dir),
    };
    let started = Instant::now();
    let mut csv = String::from("seconds,process,rss_mb,open_files,threads,disk_mb\n");
    let mut samples: Vec<Sample> = Vec::new();
    let procs = [&gateway, &fleet];
    loop {
        let t = started.elapsed().as_secs_f64();
        for p in procs.iter().copied().chain([&trainer]) {
            let s = sample(p, t);
            csv.push_str(&format!(
                "{:.1},{},{:.1},{},{},{:.1}\n",
                s.seconds, s.process, s.rss_mb, s.open_files, s.threads, s.disk_mb
            ));
            samples.push(s);
        }
        std::fs::write(dir.join("soak.csv"), &csv)?;
        if t >= seconds {
            break;
        }
        std::thread::sleep(every.min(Duration::from_secs_f64(seconds - t + 0.05)));
    }
    // The fleet ends on its own at `seconds`.
    let mut fleet = fleet;
    let deadline = Instant::now() + Duration::from_secs(60);
    while fleet.child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            bail!("the fleet did not end within 60 s of its time");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let fleet_line = std::fs::read_to_string(dir.join("fleet.out"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("fleet:"))
        .unwrap_or("")
        .to_string();
    let stop = |p: &mut Proc, signal: i32| -> Result<f64> {
        let t0 = Instant::now();
        // SAFETY: signalling a child this bench started and has not reaped.
        unsafe { libc::kill(p.child.id() as i32, signal) };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = p.child.try_wait()? {
                if !status.success() {
                    bail!("{} exited with {status} when stopped", p.name);
                }
                return Ok(t0.elapsed().as_secs_f64());
            }
            if Instant::now() > deadline {
                bail!("{} did not stop within 120 s of its signal", p.name);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    stop(&mut trainer, libc::SIGINT)?;
    let mut gateway = gateway;
    let gateway_stop_seconds = stop(&mut gateway, libc::SIGTERM)?;
    let (child, url, restart_started) = serve(&gateway_dir, &dir.join("serve-restart.log"))?;
    let mut restarted = Proc {
        name: "gateway (restarted)",
        child,
        dir: None,
    };
    healthy(&url)?;
    let restart_healthy_seconds = restart_started.elapsed().as_secs_f64();
    let restart_rss_mb = status_mb(restarted.child.id(), "VmRSS:");
    stop(&mut restarted, libc::SIGTERM)?;
    let pids = [
        gateway.child.id(),
        fleet.child.id(),
        trainer.child.id(),
        restarted.child.id(),
    ];
    let processes_left = pids.iter().filter(|&&p| alive(p)).count();
    let warm_at = seconds / 5.0;
    let rows = ["gateway", "fleet", "train"]
        .iter()
        .filter_map(|name| {
            // While it ran (the fleet ends on its own at the last sample).
            let mine: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.process == *name && s.rss_mb > 0.0)
                .collect();
            let warm = mine.iter().find(|s| s.seconds >= warm_at)?;
            Some(SoakRow {
                process: name.to_string(),
                warm: (*warm).clone(),
                end: (*mine.last()?).clone(),
                peak_rss_mb: mine.iter().map(|s| s.rss_mb).fold(0.0, f64::max),
            })
        })
        .collect();
    plot(&samples, &dir.join("soak.svg"))?;
    Ok(SoakReport {
        minutes: options.minutes,
        rows,
        fleet: fleet_line,
        gateway_stop_seconds,
        restart_healthy_seconds,
        restart_rss_mb,
        processes_left,
    })
}

/// Resident memory and disk of each process over time.
fn plot(samples: &[Sample], path: &Path) -> Result<()> {
    use plotters::prelude::*;
    crate::report::figures::register_font();
    let root = SVGBackend::new(path, (900, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    let end = samples.iter().map(|s| s.seconds).fold(1.0, f64::max) / 60.0;
    let names = ["gateway", "fleet", "train"];
    let colours = [RED, BLUE, GREEN];
    for (panel, (title, value)) in panels.iter().zip([
        (
            "resident memory (MB)",
            (|s: &Sample| s.rss_mb) as fn(&Sample) -> f64,
        ),
        ("disk (MB)", |s: &Sample| s.disk_mb),
    ]) {
        let top = samples.iter().map(value).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..end, 0.0..top)?;
        chart.configure_mesh().x_desc("minutes").draw()?;
        for (name, colour) in names.iter().zip(colours) {
            let points: Vec<(f64, f64)> = samples
                .iter()
                .filter(|s| s.process == *name)
                .map(|s| (s.seconds / 60.0, value(s)))
                .collect();
            if points.iter().all(|p| p.1 == 0.0) {
                continue;
            }
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
                .label(*name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour));
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Prints the report as a table.
pub fn print(r: &SoakReport) {
    println!(
        "soak: {:.1} min; gateway, fleet and training together ({})",
        r.minutes, r.fleet
    );
    println!(
        "  {:10} {:>22} {:>16} {:>14} {:>20} {:>10}",
        "process", "rss MB warm -> end", "files", "threads", "disk MB warm -> end", "peak MB"
    );
    for row in &r.rows {
        println!(
            "  {:10} {:>10.0} -> {:>7.0} {:>7} -> {:>5} {:>6} -> {:>4} {:>9.0} -> {:>7.0} {:>10.0}",
            row.process,
            row.warm.rss_mb,
            row.end.rss_mb,
            row.warm.open_files,
            row.end.open_files,
            row.warm.threads,
            row.end.threads,
            row.warm.disk_mb,
            row.end.disk_mb,
            row.peak_rss_mb
        );
    }
    println!(
        "  gateway stop (SIGTERM to exit) {:.2} s; restart on its directory healthy in {:.2} s at {:.0} MB resident; processes left {}",
        r.gateway_stop_seconds, r.restart_healthy_seconds, r.restart_rss_mb, r.processes_left
    );
}
