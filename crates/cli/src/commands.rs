//! The command line's grammar and dispatch: each command is a file of its own under
//! `cmd/` (the benchmarks under `bench/`, the live view under `live/`, the run report under
//! `report/`), and none of them imports this one.

use anyhow::Result;
use clap::{Parser, Subcommand};

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
    Train(crate::cmd::train::TrainArgs),
    /// Train as the learner of a run whose rollout workers are `strata worker` processes,
    /// over NATS JetStream.
    Learner(crate::cmd::cluster::LearnerArgs),
    /// Run rollout workers for a learner over NATS JetStream (any number, on any machine).
    Worker(crate::cmd::cluster::WorkerArgs),
    /// Evaluate a checkpoint on fresh episodes.
    Eval(crate::cmd::eval::EvalArgs),
    /// Inspect configurations.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Inspect and replay environments.
    #[command(subcommand)]
    Env(crate::cmd::env::EnvCommand),
    /// Query a run's sample ledger: summary, metrics, recompute, manifest, invalidate.
    #[command(subcommand)]
    Ledger(crate::cmd::ledger::LedgerCommand),
    /// Measure throughput: one suite (`strata bench gateway`), or the default set.
    Bench(crate::bench::BenchArgs),
    /// Serve the gateway deployed agents call (act / report), training on their samples.
    Serve(crate::cmd::serve::ServeArgs),
    /// Run simulated deployed agents against a gateway (by default one started here).
    Fleet(crate::cmd::fleet::FleetArgs),
    /// Write a run's HTML report: curves per generation, evaluations, lag, time, ledger.
    Report(crate::report::ReportArgs),
    /// Live terminal monitor of a training started with `--metrics-addr`.
    Top(crate::live::monitor::TopArgs),
}
#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the effective config as TOML.
    Show(crate::cmd::config_args::ConfigArgs),
}

/// Runs a parsed command line.
///
/// # Errors
/// Anything that went wrong, with context.
pub fn run(cli: Cli) -> Result<()> {
    // A forced kernel path the CPU lacks is refused before any work, not mid-run; listing
    // the paths the CPU has is what such a user needs, so it runs whatever the variable.
    let lists_paths = matches!(&cli.command, Command::Bench(args) if args.lists_kernel_paths());
    if !lists_paths {
        strata_nn::select_kernel_path()?;
    }
    match cli.command {
        Command::Train(args) => crate::cmd::train::train(args),
        Command::Learner(args) => crate::cmd::cluster::learner(args),
        Command::Worker(args) => crate::cmd::cluster::worker(args),
        Command::Eval(args) => crate::cmd::eval::eval(args),
        Command::Config(ConfigCommand::Show(args)) => crate::cmd::config::show(&args),
        Command::Env(command) => crate::cmd::env::run(command),
        Command::Ledger(command) => crate::cmd::ledger::run(command),
        Command::Bench(args) => crate::bench::run(args),
        Command::Serve(args) => crate::cmd::serve::serve(args),
        Command::Fleet(args) => crate::cmd::fleet::fleet(args),
        Command::Report(args) => crate::report::run(args),
        Command::Top(args) => crate::live::monitor::top(args),
    }
}
