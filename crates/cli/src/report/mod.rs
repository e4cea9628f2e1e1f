//! `strata report RUN_DIR`: one self-contained HTML file with the run's figures (return per
//! generation with version switches and evaluation points, evaluation per pinned version,
//! policy-lag histogram, time breakdown) and the ledger per generation; each figure also
//! as SVG and PNG beside it, and a video of one greedy episode of the best version when the
//! env draws itself. A damaged or partial run is reported as far as it can be read, with
//! what was missing listed first.

mod compare;
pub(crate) mod figures;
mod html;
mod load;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use figures::{render, Draw, Figures};
use load::RunData;

/// Arguments of `strata report`.
#[derive(Args, Debug)]
pub(crate) struct ReportArgs {
    /// The run directory (`strata train --run-dir`); several compare their runs on one
    /// page, seeds of one config grouped.
    #[arg(required = true, num_args = 1..)]
    run_dirs: Vec<PathBuf>,
    /// Where to write `report.html` and the figures (default: RUN_DIR/report; for several
    /// runs, compare-<time> beside the first).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Leave out the video of the best version (recording runs one episode of the env).
    #[arg(long)]
    no_video: bool,
}

/// One greedy episode of a run's version, recorded for the page.
pub(crate) struct Video {
    /// Which checkpoint (`best evaluated`, `final checkpoint`).
    pub(crate) which: String,
    pub(crate) version: u64,
    pub(crate) episode_return: f64,
    pub(crate) frames: usize,
    /// The GIF's bytes.
    pub(crate) gif: Vec<u8>,
}

/// Records one greedy episode of the run's best version (else its final one) into
/// `out/best-episode.gif`, on the run's evaluation seed; why not, for the page, otherwise.
fn record_best(run_dir: &Path, out: &Path) -> Result<Video, String> {
    use strata_runtime::{evaluate_recorded, load_policy, pick_checkpoint, PolicyPick};
    let (path, which) = pick_checkpoint(run_dir, PolicyPick::Best)
        .or_else(|_| pick_checkpoint(run_dir, PolicyPick::Final))
        .map_err(|e| format!("no checkpoint to record ({e})"))?;
    let mut policy = load_policy(&path).map_err(|e| e.to_string())?;
    let seed = policy.config.report.eval_seed(policy.config.train.seed);
    let gif = out.join("best-episode.gif");
    let (result, video) = evaluate_recorded(&mut policy, 1, seed, true, &gif)
        // A Python traceback's last line says what went wrong.
        .map_err(|e| {
            e.to_string()
                .trim_end()
                .lines()
                .last()
                .unwrap_or("")
                .to_string()
        })?;
    Ok(Video {
        which,
        version: policy.policy_version,
        episode_return: result.returns[0],
        frames: video.frames,
        gif: std::fs::read(&gif).map_err(|e| format!("{}: {e}", gif.display()))?,
    })
}

/// Writes the report and prints where; problems go to stderr as warnings.
///
/// # Errors
/// When the directory is not a run at all, or the output cannot be written.
pub(crate) fn run(args: ReportArgs) -> Result<()> {
    if args.run_dirs.len() > 1 {
        return compare::run(&args.run_dirs, args.out);
    }
    let run_dir = &args.run_dirs[0];
    let run = RunData::load(run_dir)?;
    let out = args.out.unwrap_or_else(|| run_dir.join("report"));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let figures = Figures::from_run(&run);
    let planned: [(&str, &str, Option<&dyn Draw>, &str); 4] = [
        (
            "returns",
            "Return per generation",
            figures.returns.as_ref().map(|f| f as &dyn Draw),
            "needs the sample ledger",
        ),
        (
            "evaluation",
            "Evaluation per pinned version",
            figures.evaluation.as_ref().map(|f| f as &dyn Draw),
            "needs eval.jsonl",
        ),
        (
            "policy_lag",
            "Policy lag",
            figures.lag.as_ref().map(|f| f as &dyn Draw),
            "needs the sample ledger's decisions",
        ),
        (
            "time",
            "Time breakdown",
            figures.time.as_ref().map(|f| f as &dyn Draw),
            "needs metrics.jsonl",
        ),
    ];
    let mut drawn = Vec::new();
    for (name, title, figure, needs) in planned {
        let svg = match figure {
            Some(f) => Ok(render(f, name, &out)?),
            None => Err(needs.to_string()),
        };
        drawn.push((title.to_string(), svg));
    }
    let (summary, metrics) = match &run.ledger {
        Some(data) => (
            strata_ledger::summary(data),
            Some(strata_ledger::metrics(data)),
        ),
        None => (Vec::new(), None),
    };
    let video = (!args.no_video && !run.gateway).then(|| record_best(run_dir, &out));
    let page = html::Page {
        run: &run,
        figures: &figures,
        drawn,
        summary,
        metrics,
        video,
    };
    let path = out.join("report.html");
    std::fs::write(&path, page.render())
        .with_context(|| format!("cannot write {}", path.display()))?;
    for p in &run.problems {
        eprintln!("warning: {p}");
    }
    println!("report: {}", path.display());
    Ok(())
}
