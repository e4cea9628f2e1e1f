//! `strata train` (and the training loop `strata learner` shares): the config or the
//! checkpoint, the run directory, progress, Ctrl-C, the closing lines.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use strata_runtime::{run, Existing, RunDir, Trainer};

use crate::cmd::config_args::{apply_overrides, build_config, ConfigArgs};

/// Arguments of `strata train` (also flattened into `strata learner`).
#[derive(Args, Debug)]
pub(crate) struct TrainArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// Run directory (default: runs/<env>-seed<seed>-<unix time>).
    #[arg(long)]
    pub(crate) run_dir: Option<PathBuf>,
    /// Write the run summary as JSON here.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Continue from a checkpoint, or a run directory's newest one, exactly where it
    /// stopped (in that run directory, unless `--run-dir` says otherwise). A solved run
    /// trains on to its budget; a new `--max-steps` re-anchors the learning-rate schedule.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// When the run directory already holds a run, move that run aside (renamed to
    /// `DIR.replaced-<time>`, nothing deleted) and start afresh. Without it such a
    /// directory is refused.
    #[arg(long)]
    pub(crate) overwrite: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Serve Prometheus metrics (`/metrics`) and the live status (`/status`, what
    /// `strata top` shows) at this address while training, e.g. `127.0.0.1:9100` (port 0:
    /// any free port; the address is printed).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// Show the live terminal monitor instead of the progress bar; log lines go to
    /// `train.log` in the run directory. `q` stops the training (checkpointed).
    #[arg(long)]
    pub(crate) monitor: bool,
}
/// `strata train`: a run in this process.
pub(crate) fn train(args: TrainArgs) -> Result<()> {
    run_training(args, "strata train", &|config, resume| {
        Ok(match resume {
            Some(state) => Trainer::from_state(state)?,
            None => Trainer::new(config)?,
        })
    })
}

/// Builds the trainer of a run: from a config, or from a resumed checkpoint's state.
pub(crate) type MakeTrainer<'a> =
    dyn Fn(strata_runtime::RunConfig, Option<strata_runtime::TrainerState>) -> Result<Trainer> + 'a;

/// `strata train` (and `strata learner`, whose trainer has remote workers): the config or
/// the checkpoint, the trainer `make` builds, the run directory, progress, Ctrl-C.
/// `command` is how the user runs it again (`strata train`), for the line that says how
/// to resume.
pub(crate) fn run_training(args: TrainArgs, command: &str, make: &MakeTrainer<'_>) -> Result<()> {
    if args.monitor && !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        bail!("--monitor draws on a terminal and stdout is not one; drop --monitor, or serve --metrics-addr and watch with `strata top`");
    }
    let existing = Existing::for_command(
        args.overwrite,
        args.resume.is_some(),
        args.run_dir.is_some(),
    )?;
    // The run directory is claimed first: a directory another process holds, or one that
    // holds another run, is refused before anything is read, started or written.
    let fresh_config = match &args.resume {
        Some(_) => {
            // The checkpoint's config is the base; only run-control keys may change.
            if args.config.env.is_some() || args.config.config.is_some() {
                bail!("--resume takes the env and config from the checkpoint; drop --env/--config");
            }
            None
        }
        None => Some(build_config(&args.config)?),
    };
    let mut resumed = None;
    let run_dir = match (&args.run_dir, &args.resume, &fresh_config) {
        (Some(dir), _, _) => dir.clone(),
        // A resumed run continues in its own directory unless told otherwise.
        (None, Some(path), _) => match RunDir::of_checkpoint(path) {
            Some(dir) => dir,
            None => {
                let state = read_resume_state(path, &args)?;
                let dir = RunDir::default_path(&state.0.config);
                resumed = Some(state);
                dir
            }
        },
        (None, None, Some(config)) => RunDir::default_path(config),
        (None, None, None) => unreachable!("a fresh run has its config"),
    };
    let claimed = RunDir::claim(&run_dir, existing)?;
    if let Some(aside) = claimed.moved_aside() {
        eprintln!(
            "--overwrite: the run that was in {} is now in {}",
            run_dir.display(),
            aside.display()
        );
    }
    let mut trainer = match (&args.resume, fresh_config) {
        (Some(path), _) => {
            let (state, notes) = match resumed.take() {
                Some(state) => state,
                None => read_resume_state(path, &args)?,
            };
            for note in notes {
                eprintln!("resume: {note}");
            }
            let config = state.config.clone();
            make(config, Some(state))?
        }
        (None, Some(config)) => make(config, None)?,
        (None, None) => unreachable!("a fresh run has its config"),
    };
    // A bad address fails here, and the claimed directory is put back as it was.
    let _server = match &args.metrics_addr {
        Some(addr) => {
            let server = crate::live::server::LiveServer::start(addr, trainer.live_handle())?;
            eprintln!(
                "metrics: http://{0}/metrics  status: http://{0}/status  (strata top --addr {0})",
                server.addr()
            );
            Some(server)
        }
        None => None,
    };
    let c = trainer.config().clone();
    // Training runs whole updates: a budget between two is rounded up, and said so.
    let (start, per_update) = (trainer.progress().global_step, c.steps_per_update());
    let last =
        start + (c.train.total_steps.saturating_sub(start)).div_ceil(per_update) * per_update;
    if last != c.train.total_steps {
        eprintln!(
            "budget: {} steps, rounded up to {} (whole updates of {} steps)",
            strata_runtime::group_digits(c.train.total_steps),
            strata_runtime::group_digits(last),
            per_update
        );
    }
    // Ctrl-C / SIGTERM: the learner stops at its next wait, checkpoints, joins every thread.
    // A second one leaves at once: the last periodic checkpoint and the ledger (whose files
    // are whole or absent) stay; env processes die with the trainer.
    let stop = trainer.stop_flag();
    let on_signal = Arc::clone(&stop);
    ctrlc::set_handler(move || {
        if on_signal.swap(true, Ordering::Relaxed) {
            eprintln!("second stop signal: leaving now, without a final checkpoint");
            std::process::exit(130);
        }
        eprintln!("stopping: finishing the update and writing a checkpoint (Ctrl-C again to leave at once)");
    })
    .context("cannot install the Ctrl-C / SIGTERM handler")?;
    let monitor = if args.monitor {
        let log = run_dir.join("train.log");
        crate::logging::redirect_to(&log)
            .with_context(|| format!("cannot write {}", log.display()))?;
        Some(MonitorThread::start(
            trainer.live_handle(),
            Arc::clone(&stop),
        )?)
    } else {
        None
    };
    let mut dir = claimed.open(&trainer)?;
    let mut next_breakdown = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let bar = if args.quiet || args.monitor {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(c.train.total_steps)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}").expect("valid template"),
    );
    bar.set_position(trainer.progress().global_step);
    let summary = run::train(&mut trainer, &mut dir, &mut |r| {
        if std::time::Instant::now() >= next_breakdown {
            let line = format!(
                "step {}: {} (policy lag {}..{})",
                r.global_step,
                r.time.describe(r.wall_seconds, c.runtime.workers),
                r.policy_lag_min,
                r.policy_lag_max
            );
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
            next_breakdown += std::time::Duration::from_secs(10);
        }
        bar.set_position(r.global_step);
        let ret = r.mean_return.map_or("-".to_string(), |m| format!("{m:.1}"));
        bar.set_message(format!(
            "{:.0} steps/s  mean return {ret}  v{}",
            r.env_steps_per_sec, r.policy_version
        ));
    });
    if let Some(m) = monitor {
        m.finish();
    }
    let summary = summary?;
    bar.finish_and_clear();
    let ret = summary
        .final_mean_return
        .map_or("-".to_string(), |m| format!("{m:.1}"));
    // Training throughput apart from the time evaluations took.
    let evaluating = match summary.time.eval {
        e if e > 0.0 => format!(" training, {e:.2}s evaluating"),
        _ => String::new(),
    };
    println!(
        "{} seed {}: {} steps in {:.2}s ({:.0} steps/s{evaluating}), mean return {ret}, solved: {}{}",
        summary.env,
        summary.seed,
        summary.total_steps,
        summary.wall_seconds,
        summary.train_steps_per_sec,
        summary.solved,
        summary.steps_to_solve.map_or(String::new(), |s| format!(
            " at step {s} ({:.2}s)",
            summary.seconds_to_solve.unwrap_or(0.0)
        ))
    );
    println!(
        "{}",
        stop_line(&summary, command, dir.root(), dir.committed())
    );
    if dir.committed() {
        println!(
            "run directory: {0} (HTML report: strata report {0})",
            dir.root().display()
        );
    }
    if let Some(path) = &args.summary_json {
        write_json(path, &summary)?;
    }
    Ok(())
}

/// The state `--resume PATH` continues, with the command's run-control overrides and
/// what they changed ([`strata_runtime::continue_run`]).
fn read_resume_state(
    path: &Path,
    args: &TrainArgs,
) -> Result<(strata_runtime::TrainerState, Vec<String>)> {
    strata_runtime::resume_run(path, |config| apply_overrides(config, &args.config))
}

/// What ended the run, in a sentence, with how to go on where it can.
fn stop_line(
    summary: &strata_runtime::Summary,
    command: &str,
    dir: &Path,
    trained: bool,
) -> String {
    use strata_runtime::{group_digits, StopReason};
    let faults = match summary.worker_faults {
        0 => String::new(),
        n => format!(
            " ({n} worker fault{} survived, each fragment recorded invalid)",
            if n == 1 { "" } else { "s" }
        ),
    };
    match summary.stop {
        StopReason::Budget => format!(
            "finished: trained its budget of {} steps{faults}",
            group_digits(summary.budget_steps)
        ),
        StopReason::Solved => format!(
            "finished: solved at step {} (train.stop_when_solved){faults}; `{command} --resume {}` trains on to the budget",
            group_digits(summary.steps_to_solve.unwrap_or(summary.total_steps)),
            dir.display()
        ),
        StopReason::Interrupted if !trained => format!(
            "stopped on request before the first update: nothing was trained, and {} is as it was",
            dir.display()
        ),
        StopReason::Interrupted => format!(
            "stopped on request at {} of {} steps{faults}; resume with `{command} --resume {}`",
            group_digits(summary.total_steps),
            group_digits(summary.budget_steps),
            dir.display()
        ),
    }
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// The monitor of `strata train --monitor`, drawing from its own thread.
struct MonitorThread {
    done: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Result<()>>,
}

impl MonitorThread {
    fn start(live: strata_runtime::LiveHandle, stop: Arc<AtomicBool>) -> Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let finished = Arc::clone(&done);
        let handle = std::thread::Builder::new()
            .name("strata-monitor".into())
            .spawn(move || {
                crate::live::monitor::run_monitor(
                    &|| Ok(live.snapshot()),
                    &finished,
                    &stop,
                    "q: stop training (checkpointed)",
                )
            })?;
        Ok(MonitorThread { done, handle })
    }

    /// Draws the final state and gives the terminal back (within a second).
    fn finish(self) {
        self.done.store(true, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while !self.handle.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if self.handle.is_finished() {
            if let Ok(Err(e)) = self.handle.join() {
                eprintln!("warning: monitor: {e:#}");
            }
        }
    }
}
