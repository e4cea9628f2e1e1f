//! The config flags every command that builds a run config shares, and the one way they
//! are applied: the env's preset, then the file, then `--set` ([`RunConfig::layered`]),
//! then the flag shortcuts.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use strata_runtime::RunConfig;

/// How a config is assembled: preset of the env, then the file, then `--set`, then flags.
#[derive(Args, Debug, Clone)]
pub(crate) struct ConfigArgs {
    /// Built-in env; selects its tuned preset (default: the config file's env, else cartpole).
    #[arg(long)]
    pub(crate) env: Option<String>,
    /// TOML file with any subset of the config keys, laid over the env's preset.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Override one key, e.g. `--set ppo.learning_rate=3e-4` (repeatable; `none` clears).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Run seed (train.seed).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Env-step budget (train.total_steps, also the annealing horizon).
    #[arg(long)]
    max_steps: Option<u64>,
    /// Bit-identical results for a seed (train.deterministic).
    #[arg(long)]
    deterministic: bool,
    /// Stop as soon as the env's solve threshold is reached (train.stop_when_solved).
    #[arg(long)]
    stop_when_solved: bool,
    /// Checkpoint every N env steps (train.checkpoint_every).
    #[arg(long)]
    checkpoint_every: Option<u64>,
    /// Rollout worker threads (runtime.workers).
    #[arg(long)]
    workers: Option<usize>,
    /// `sync` or `async` collection (runtime.mode).
    #[arg(long)]
    mode: Option<String>,
    /// Pin workers and learner threads to these CPUs, e.g. `0,1` (runtime.pin_cpus).
    #[arg(long, value_delimiter = ',')]
    pin_cpus: Option<Vec<usize>>,
}

/// The config a command line asks for: the env's preset, then the config file, then
/// `--set` (one function, [`RunConfig::layered`]), then the flag shortcuts.
pub(crate) fn build_config(args: &ConfigArgs) -> Result<RunConfig> {
    let file = args
        .config
        .as_deref()
        .map(strata_runtime::ConfigFile::read)
        .transpose()?;
    let config = RunConfig::layered(args.env.as_deref(), file.as_ref(), &args.sets)?;
    apply_flags(config, args)
}

/// Applies `--set` to a checkpoint's config, then the flag shortcuts.
pub(crate) fn apply_overrides(mut config: RunConfig, args: &ConfigArgs) -> Result<RunConfig> {
    for set in &args.sets {
        let Some((key, value)) = set.split_once('=') else {
            bail!("--set expects KEY=VALUE, got `{set}`");
        };
        config.set(key.trim(), value.trim())?;
    }
    apply_flags(config, args)
}

/// Applies the flag shortcuts (`--seed`, `--max-steps`, ...) to `config`, then validates it.
fn apply_flags(mut config: RunConfig, args: &ConfigArgs) -> Result<RunConfig> {
    if let Some(seed) = args.seed {
        config.train.seed = seed;
    }
    if let Some(steps) = args.max_steps {
        config.train.total_steps = steps;
    }
    if let Some(every) = args.checkpoint_every {
        config.train.checkpoint_every = every;
    }
    if let Some(w) = args.workers {
        config.runtime.workers = w;
    }
    if let Some(mode) = &args.mode {
        config.set("runtime.mode", &format!("\"{mode}\""))?;
    }
    if let Some(cpus) = &args.pin_cpus {
        config.runtime.pin_cpus.clone_from(cpus);
    }
    config.train.deterministic |= args.deterministic;
    config.train.stop_when_solved |= args.stop_when_solved;
    config.validate()?;
    Ok(config)
}
