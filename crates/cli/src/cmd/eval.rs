//! `strata eval`: a run's final, best or pinned version on fresh episodes.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use strata_runtime::{
    best_version, evaluate, evaluate_recorded, load_policy, pick_checkpoint, PolicyPick,
};

/// Arguments of `strata eval`.
#[derive(Args, Debug)]
pub(crate) struct EvalArgs {
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
    /// Also write a video (an animated GIF) of the first env's episodes into this
    /// directory, named after the version and seed: any env that draws itself (the
    /// built-in classic-control envs, a `gym:` env that renders `rgb_array`).
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
}
/// `strata eval`.
pub(crate) fn eval(args: EvalArgs) -> Result<()> {
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
    let greedy = !args.stochastic;
    let result = match &args.record {
        None => evaluate(&mut policy, args.episodes, args.seed, greedy)?,
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let gif = dir.join(format!(
                "v{}-seed{}{}.gif",
                policy.policy_version,
                args.seed,
                if greedy { "" } else { "-sampled" }
            ));
            let (result, video) =
                evaluate_recorded(&mut policy, args.episodes, args.seed, greedy, &gif)?;
            eprintln!(
                "video: {} ({} episode{}, {} frames)",
                video.path.display(),
                video.episodes,
                if video.episodes == 1 { "" } else { "s" },
                video.frames
            );
            result
        }
    };
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
