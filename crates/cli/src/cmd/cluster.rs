//! `strata learner` and `strata worker`: one run's learner and rollout workers as separate
//! processes over NATS JetStream (`strata-cluster`).

use anyhow::{Context, Result};
use clap::Args;
use strata_cluster::{prepare_learner, run_worker_process, WorkerOptions};
use strata_gateway::ReleaseMode;

use crate::cmd::config_args::build_config;
use crate::cmd::nats_args::NatsArgs;
use crate::cmd::train::{run_training, TrainArgs};

#[derive(Args, Debug)]
pub(crate) struct LearnerArgs {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    pub(crate) train: TrainArgs,
    /// Train on what deployed agents report through the run's gateways (`strata serve
    /// --nats URL --run NAME --gateway-id N`, any number) rather than on rollout workers.
    /// Its directory (`--run-dir`, default runs/deployed-<run>) keeps checkpoints, a
    /// ledger of decisions and learner.jsonl; started again on it, it resumes.
    #[arg(long)]
    from_gateways: bool,
    /// With --from-gateways: `auto` (each version becomes the run's stable version after
    /// the gateways' cooldown) or `canary` (each becomes the canary candidate; an
    /// operator promotes through any gateway).
    #[arg(long, default_value = "auto", requires = "from_gateways")]
    release: ReleaseMode,
    /// With --from-gateways: stop after this many updates in all (none: until Ctrl-C).
    #[arg(long, value_name = "N", requires = "from_gateways")]
    updates: Option<u64>,
}

#[derive(Args, Debug)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    nats: NatsArgs,
    /// Workers this process runs at once (each takes one of the run's `runtime.workers`).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// This machine's settings, e.g. `--set runtime.python=.venv/bin/python` (repeatable;
    /// runtime.python, python_path, envs_per_process, pin_cpus, debug_buffer,
    /// wait_timeout_secs); the rest of the config is the learner's.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Fault injection (tests): every N fragments, publish the fragment again under its
    /// message id and under another; the stream and the learner must drop the copies.
    #[arg(long, default_value_t = 0, value_name = "N")]
    inject_republish_every: u64,
}

/// `strata learner`: `strata train` with rollout workers in `strata worker` processes.
pub(crate) fn learner(args: LearnerArgs) -> Result<()> {
    let meeting = args.nats.required("strata learner")?;
    if args.from_gateways {
        return deployed_learner(args, &meeting);
    }
    let command = format!(
        "strata learner --nats {} --run {}",
        meeting.url, meeting.run
    );
    run_training(args.train, &command, &|config, resume| {
        prepare_learner(&meeting, config, resume).with_context(|| {
            format!(
                "cannot start the learner of run `{}` at {}",
                meeting.run, meeting.url
            )
        })
    })
}

/// `strata learner --from-gateways`: trains on the segments of every gateway of the run
/// until Ctrl-C / SIGTERM (or `--updates`).
fn deployed_learner(args: LearnerArgs, meeting: &strata_cluster::Meeting) -> Result<()> {
    let stop = strata_cluster::Stop::new();
    let on_signal = stop.clone();
    ctrlc::set_handler(move || on_signal.raise())
        .context("cannot install the Ctrl-C / SIGTERM handler")?;
    let dir = args
        .train
        .run_dir
        .clone()
        .unwrap_or_else(|| format!("runs/deployed-{}", meeting.run).into());
    let mut config = build_config(&args.train.config)?;
    // Reward normalisation shapes only training; gateways report raw rewards.
    config.env.normalize_reward = false;
    if dir.join("checkpoints").is_dir() {
        eprintln!(
            "resuming the learner of run `{}` from {} (its checkpoint's config)",
            meeting.run,
            dir.display()
        );
    }
    let options = strata_cluster::DeployedOptions {
        dir: dir.clone(),
        release: args.release,
        max_updates: args.updates,
        overwrite: args.train.overwrite,
    };
    eprintln!(
        "learner of run `{}` at {}: training on its gateways' segments (directory {})",
        meeting.run,
        meeting.url,
        dir.display()
    );
    let report = strata_cluster::run_deployed_learner(meeting, config, &options, &stop)
        .with_context(|| {
            format!(
                "learner of run `{}` at {} (from gateways)",
                meeting.run, meeting.url
            )
        })?;
    println!(
        "{}",
        serde_json::to_string(&report).expect("a report serialises")
    );
    Ok(())
}

/// `strata worker`: takes logical workers of the run and collects for its learner until
/// Ctrl-C / SIGTERM.
pub(crate) fn worker(args: WorkerArgs) -> Result<()> {
    let stop = strata_cluster::Stop::new();
    let on_signal = stop.clone();
    ctrlc::set_handler(move || on_signal.raise())
        .context("cannot install the Ctrl-C / SIGTERM handler")?;
    let meeting = args.nats.required("strata worker")?;
    let options = WorkerOptions {
        meeting: meeting.clone(),
        threads: args.threads,
        sets: args.sets,
        republish_every: args.inject_republish_every,
    };
    let report = run_worker_process(&options, &stop)
        .with_context(|| format!("worker of run `{}` at {}", meeting.run, meeting.url))?;
    eprintln!(
        "worker stopped: {} fragments published ({} duplicates), {} assignments",
        report.fragments, report.duplicates, report.assignments
    );
    Ok(())
}
