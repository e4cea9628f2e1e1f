//! Command-line definitions and their thin implementations.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use strata_runtime::{
    best_version, evaluate, load_policy, pick_checkpoint, run, Existing, PolicyPick, RunDir,
    Trainer,
};

use crate::config_args::{apply_overrides, build_config, ConfigArgs};

/// Strata: asynchronous reinforcement learning with provenance for every sample.
#[derive(Parser, Debug)]
#[command(name = "strata", version, about)]
pub struct Cli {
    /// Log level for Strata's events on stderr (`RUST_LOG` overrides).
    #[arg(long, global = true, default_value = "warn")]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The requested log level.
    pub fn log_level(&self) -> &str {
        &self.log_level
    }

    /// Whether the command takes over the terminal (a live monitor), so log lines must
    /// go elsewhere.
    pub fn full_screen(&self) -> bool {
        match &self.command {
            Command::Train(args) => args.monitor,
            Command::Learner(args) => args.train.monitor,
            Command::Top(_) => true,
            _ => false,
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train a policy with PPO.
    Train(TrainArgs),
    /// Train as the learner of a run whose rollout workers are `strata worker` processes,
    /// over NATS JetStream.
    Learner(crate::cluster_cmd::LearnerArgs),
    /// Run rollout workers for a learner over NATS JetStream (any number, on any machine).
    Worker(crate::cluster_cmd::WorkerArgs),
    /// Evaluate a checkpoint on fresh episodes.
    Eval(EvalArgs),
    /// Inspect configurations.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Inspect and replay environments.
    #[command(subcommand)]
    Env(EnvCommand),
    /// Query a run's sample ledger: summary, metrics, recompute, manifest, invalidate.
    #[command(subcommand)]
    Ledger(crate::ledger_cmd::LedgerCommand),
    /// Measure env stepping, network passes and training throughput.
    Bench(crate::bench::BenchArgs),
    /// Serve the gateway deployed agents call (act / report), training on their samples.
    Serve(crate::gateway_cmd::ServeArgs),
    /// Run simulated deployed agents against a gateway (by default one started here).
    Fleet(crate::gateway_cmd::FleetArgs),
    /// Write a run's HTML report: curves per generation, evaluations, lag, time, ledger.
    Report(crate::report::ReportArgs),
    /// Live terminal monitor of a training started with `--metrics-addr`.
    Top(crate::monitor::TopArgs),
}

#[derive(Args, Debug)]
pub(crate) struct TrainArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Run directory (default: runs/<env>-seed<seed>-<unix time>).
    #[arg(long)]
    run_dir: Option<PathBuf>,
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
    overwrite: bool,
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
    monitor: bool,
}

#[derive(Args, Debug)]
struct EvalArgs {
    /// Checkpoint directory, or a run directory: its final checkpoint (the last version
    /// trained) unless --best or --version says otherwise.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Evaluate this policy version: the run directory's checkpoint that holds it.
    #[arg(long, conflicts_with = "best")]
    version: Option<u64>,
    /// Evaluate the run's best/: the version with the best evaluation, the one to deploy.
    #[arg(long)]
    best: bool,
    /// Episodes to run.
    #[arg(long, default_value_t = 10)]
    episodes: usize,
    /// Seed of the evaluation episodes.
    #[arg(long, default_value_t = 12345)]
    seed: u64,
    /// Sample actions instead of taking the most likely one.
    #[arg(long)]
    stochastic: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the effective config as TOML.
    Show(ConfigArgs),
}

#[derive(Subcommand, Debug)]
enum EnvCommand {
    /// List built-in environments (and how to name a Gymnasium one).
    List,
    /// Start from a given state, apply given actions, print each step as a JSON line.
    Rollout(RolloutArgs),
}

#[derive(Args, Debug)]
struct RolloutArgs {
    /// Built-in env name.
    #[arg(long)]
    env: String,
    /// Start state as a JSON array (the env's internal state, e.g. CartPole's
    /// [x, x_dot, theta, theta_dot]).
    #[arg(long)]
    state: String,
    /// File of actions: a JSON array (numbers, or arrays for multi-dimensional actions) or
    /// whitespace-separated numbers.
    #[arg(long)]
    actions: PathBuf,
}

/// Runs a parsed command line.
///
/// # Errors
/// Anything that went wrong, with context.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(args) => train(args),
        Command::Learner(args) => crate::cluster_cmd::learner(args),
        Command::Worker(args) => crate::cluster_cmd::worker(args),
        Command::Eval(args) => eval(args),
        Command::Config(ConfigCommand::Show(args)) => {
            print!("{}", build_config(&args)?.to_toml());
            Ok(())
        }
        Command::Env(EnvCommand::List) => {
            let mut rows = vec![[
                "name".to_string(),
                "Gymnasium twin".into(),
                "observation".into(),
                "action".into(),
                "time limit".into(),
                "solved at".into(),
            ]];
            for name in strata_env::env_names() {
                let spec = strata_env::spec_for(name)?;
                rows.push([
                    name.to_string(),
                    spec.gymnasium_id.clone(),
                    spec.observation_space.to_string(),
                    spec.action_space.to_string(),
                    spec.max_episode_steps.to_string(),
                    spec.reward_threshold.to_string(),
                ]);
            }
            let width = |c: usize| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
            let widths: Vec<usize> = (0..6).map(width).collect();
            for r in &rows {
                println!(
                    "{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:>w4$}  {:>w5$}",
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    r[4],
                    r[5],
                    w0 = widths[0],
                    w1 = widths[1],
                    w2 = widths[2],
                    w3 = widths[3],
                    w4 = widths[4],
                    w5 = widths[5],
                );
            }
            println!(
                "\nGymnasium envs run in Python worker processes: --env gym:ID (any registered id, \
                 gym:module:Env-vN, or a factory gym:module:make_env). Tuned presets: {} and the \
                 classic-control twins of the envs above (gym:CartPole-v1, ...). Python: \
                 runtime.python, else $STRATA_PYTHON, else python3.",
                strata_runtime::GYM_PRESETS
                    .iter()
                    .map(|id| format!("gym:{id}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Ok(())
        }
        Command::Env(EnvCommand::Rollout(args)) => rollout(args),
        Command::Ledger(command) => crate::ledger_cmd::run(command),
        Command::Bench(args) => crate::bench::run(args),
        Command::Serve(args) => crate::gateway_cmd::serve(args),
        Command::Fleet(args) => crate::gateway_cmd::fleet(args),
        Command::Report(args) => crate::report::run(args),
        Command::Top(args) => crate::monitor::top(args),
    }
}

fn train(args: TrainArgs) -> Result<()> {
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
            let server = crate::live_server::LiveServer::start(addr, trainer.live_handle())?;
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
    let stop = trainer.stop_flag();
    let on_signal = Arc::clone(&stop);
    ctrlc::set_handler(move || on_signal.store(true, Ordering::Relaxed))
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
                r.time.describe(),
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
    let state = strata_runtime::read_checkpoint(&strata_runtime::resume_point(path))?.into_state();
    let wanted = apply_overrides(state.config.clone(), &args.config)?;
    Ok(strata_runtime::continue_run(state, wanted)?)
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
                crate::monitor::run_monitor(
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

fn eval(args: EvalArgs) -> Result<()> {
    let pick = match (args.version, args.best) {
        (Some(v), _) => PolicyPick::Version(v),
        (None, true) => PolicyPick::Best,
        (None, false) => PolicyPick::Final,
    };
    let (path, which) = pick_checkpoint(&args.checkpoint, pick)?;
    let mut policy = load_policy(&path)?;
    // Which version this is, and where the one to deploy is when it is another.
    let best = best_version(&args.checkpoint).filter(|&v| v != policy.policy_version);
    eprintln!(
        "evaluating the {which}: policy v{} ({}){}",
        policy.policy_version,
        path.display(),
        match best {
            Some(v) if pick == PolicyPick::Final =>
                format!("; the best evaluated is v{v} (--best)"),
            _ => String::new(),
        }
    );
    let result = evaluate(&mut policy, args.episodes, args.seed, !args.stochastic)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        println!(
            "{} policy v{} ({}): {} episodes, mean return {:.2} +- {:.2}, mean length {:.1}{}",
            result.env,
            result.policy_version,
            result.config_hash,
            result.episodes,
            result.mean_return,
            result.std_return,
            result.mean_length,
            result
                .success_rate
                .map_or(String::new(), |s| format!(", success {:.1}%", s * 100.0))
        );
    }
    Ok(())
}

/// Parses an actions file: a JSON array of numbers or arrays, or whitespace-separated numbers.
fn parse_actions(text: &str, action_dim: usize) -> Result<Vec<Vec<f32>>> {
    let rows: Vec<Vec<f32>> = if text.trim_start().starts_with('[') {
        let value: serde_json::Value =
            serde_json::from_str(text).context("actions file is not valid JSON")?;
        let items = value.as_array().context("actions JSON must be an array")?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                serde_json::Value::Number(n) => Ok(vec![n.as_f64().unwrap_or(f64::NAN) as f32]),
                serde_json::Value::Array(a) => a
                    .iter()
                    .map(|x| {
                        x.as_f64()
                            .map(|v| v as f32)
                            .with_context(|| format!("action {i}: `{x}` is not a number"))
                    })
                    .collect(),
                other => bail!("action {i}: `{other}` is neither a number nor an array"),
            })
            .collect::<Result<_>>()?
    } else {
        text.split_whitespace()
            .enumerate()
            .map(|(i, w)| {
                w.parse::<f32>()
                    .map(|v| vec![v])
                    .with_context(|| format!("action {i}: `{w}` is not a number"))
            })
            .collect::<Result<_>>()?
    };
    if let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| r.len() != action_dim) {
        bail!(
            "action {i} has {} values, the env takes {action_dim}",
            row.len()
        );
    }
    Ok(rows)
}

fn rollout(args: RolloutArgs) -> Result<()> {
    let mut env = strata_env::make_env(&args.env)?;
    let spec = env.spec();
    let state: Vec<f64> =
        serde_json::from_str(&args.state).context("--state must be a JSON array of numbers")?;
    env.set_state(&state)?;
    let text = fs::read_to_string(&args.actions)
        .with_context(|| format!("cannot read actions file {}", args.actions.display()))?;
    let actions = parse_actions(&text, spec.action_dim())?;
    // Validate every action through the same checks the vectorised env applies.
    for (i, a) in actions.iter().enumerate() {
        if let Some(v) = a.iter().find(|v| !v.is_finite()) {
            bail!("action {i} is not a finite number ({v})");
        }
        if let strata_env::Space::Discrete { n } = spec.action_space {
            if a[0].fract() != 0.0 || a[0] < 0.0 || a[0] >= n as f32 {
                bail!("action {i} = {} is not an integer in 0..{n}", a[0]);
            }
        }
    }
    let mut obs = vec![0.0_f32; spec.obs_dim()];
    for (t, a) in actions.iter().enumerate() {
        let tr = env.step(a, &mut obs);
        if let Some(v) = obs
            .iter()
            .map(|v| f64::from(*v))
            .chain([tr.reward])
            .find(|v| !v.is_finite())
        {
            bail!("step {}: the env produced a non-finite value ({v}); the state is outside the env's valid range", t + 1);
        }
        let truncated = t as u32 + 1 >= spec.max_episode_steps;
        let line = serde_json::json!({
            "step": t + 1,
            "obs": obs,
            "reward": tr.reward,
            "terminated": tr.terminated,
            "truncated": truncated,
        });
        println!("{line}");
        if tr.terminated || truncated {
            if t + 1 < actions.len() {
                eprintln!(
                    "episode ended after {} steps; {} actions left unused",
                    t + 1,
                    actions.len() - t - 1
                );
            }
            break;
        }
    }
    Ok(())
}
