//! The training loop around a [`Trainer`] in its [`RunDir`]: evaluations, checkpoints, the
//! ledger, and what a stop leaves behind.

use std::fs;
use std::path::PathBuf;

use crate::eval::EvalResult;
use crate::records::{Summary, UpdateRecord};
use crate::run_dir::RunDir;
use crate::trainer::Trainer;
use crate::RuntimeError;
use strata_learner::save_checkpoint;
use strata_learner::{RunLayout, BEST_DIR, BEST_EVAL};

/// When the loop evaluates: before the first update, whenever training crosses a multiple
/// of the interval while evaluations have taken at most `report.eval_max_share` of the
/// training time (outside deterministic runs: a 5,000-step HalfCheetah run spent three
/// quarters of its time evaluating), and at the end. The version with the best evaluation so far is
/// checkpointed in `best/` (with its evaluation in `best/eval.json`), as the one to deploy:
/// PPO's last version is not always its best.
struct EvalSchedule {
    interval: u64,
    /// `report.eval_max_share`, or `None` in deterministic runs.
    max_share: Option<f64>,
    last_version: Option<u64>,
    best: Option<f64>,
}

impl EvalSchedule {
    fn new(trainer: &Trainer, run_dir: &RunDir) -> Option<Self> {
        let report = &trainer.config().report;
        // A resumed run keeps the best it had.
        let best = fs::read(run_dir.layout().best_checkpoint().join(BEST_EVAL))
            .ok()
            .and_then(|text| serde_json::from_slice::<EvalResult>(&text).ok())
            .map(|e| e.mean_return);
        let deterministic = trainer.config().train.deterministic;
        (report.eval_episodes > 0).then(|| EvalSchedule {
            interval: report.eval_interval(trainer.config().train.total_steps),
            max_share: (!deterministic && report.eval_max_share < 1.0)
                .then_some(report.eval_max_share),
            last_version: None,
            best,
        })
    }

    fn due(&self, before: u64, after: u64, trainer: &Trainer) -> bool {
        let crossed = before / self.interval != after / self.interval;
        crossed
            && self.max_share.is_none_or(|share| {
                let p = trainer.progress();
                p.time.eval <= share * (p.wall_seconds - p.time.eval)
            })
    }

    fn run(&mut self, trainer: &mut Trainer, run_dir: &mut RunDir) -> Result<(), RuntimeError> {
        let version = trainer.progress().policy_version;
        if self.last_version == Some(version) {
            return Ok(());
        }
        let result = match trainer.evaluate_current() {
            Ok(result) => result,
            // A simulator that fails now and then must not end a long run through its
            // evaluations: this one is skipped (its envs are made afresh for the next),
            // and training goes on. A run whose env fails for good meets it in training.
            Err(RuntimeError::Env(error)) => {
                tracing::warn!(component = "eval", version, %error, "evaluation failed in its env; skipped");
                self.last_version = Some(version);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        tracing::info!(
            component = "eval",
            version,
            step = trainer.progress().global_step,
            mean_return = result.mean_return,
            "evaluated"
        );
        run_dir.write_eval(&result)?;
        trainer.publish_eval(version, result.mean_return);
        self.last_version = Some(version);
        // Version 0, evaluated before the first update, has no training state to checkpoint.
        let trained = trainer.progress().global_step > 0;
        if trained && self.best.is_none_or(|b| result.mean_return > b) {
            self.best = Some(result.mean_return);
            save_best(trainer, run_dir, &result)?;
        }
        Ok(())
    }
}

/// Replaces `best/` with a checkpoint of the trainer's current version: written beside it
/// first and renamed into place, so a crash leaves the old or the new one whole.
fn save_best(trainer: &Trainer, run_dir: &RunDir, result: &EvalResult) -> Result<(), RuntimeError> {
    let best = run_dir.layout().best_checkpoint();
    let staged = run_dir.root().join(format!("{BEST_DIR}.new"));
    let old = run_dir.root().join(format!("{BEST_DIR}.old"));
    for stale in [&staged, &old] {
        if stale.exists() {
            fs::remove_dir_all(stale).map_err(|e| RuntimeError::io(stale, e))?;
        }
    }
    trainer.flush_ledger()?;
    save_checkpoint(&trainer.state()?, &staged)?;
    let eval_path = staged.join(BEST_EVAL);
    let text = serde_json::to_vec_pretty(result).expect("an evaluation serialises");
    fs::write(&eval_path, text).map_err(|e| RuntimeError::io(&eval_path, e))?;
    if best.exists() {
        fs::rename(&best, &old).map_err(|e| RuntimeError::io(&best, e))?;
    }
    fs::rename(&staged, &best).map_err(|e| RuntimeError::io(&staged, e))?;
    if old.exists() {
        fs::remove_dir_all(&old).map_err(|e| RuntimeError::io(&old, e))?;
    }
    Ok(())
}

/// Removes all but the newest `keep` periodic checkpoints (`keep = 0`: keeps all).
fn prune_checkpoints(run_dir: &RunDir, keep: usize) -> Result<(), RuntimeError> {
    if keep == 0 {
        return Ok(());
    }
    let dir = run_dir.layout().periodic_checkpoints();
    let mut steps: Vec<(u64, PathBuf)> = fs::read_dir(&dir)
        .map_err(|e| RuntimeError::io(&dir, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let step = RunLayout::periodic_step(&e.file_name().to_string_lossy())?;
            Some((step, e.path()))
        })
        .collect();
    steps.sort_unstable_by_key(|(step, _)| std::cmp::Reverse(*step));
    for (_, old) in steps.into_iter().skip(keep) {
        fs::remove_dir_all(&old).map_err(|e| RuntimeError::io(&old, e))?;
    }
    Ok(())
}

/// Trains until the budget is spent, the task is solved (if asked) or the trainer's stop
/// flag is raised (Ctrl-C): keeps the sample ledger (in `ledger/` unless configured
/// elsewhere; `ledger.enabled = false` turns it off), appends a metrics line per update,
/// calls `on_update` (progress display), checkpoints every `train.checkpoint_every` steps
/// into `checkpoints/step-N/`, and at the end stops and joins every worker, writes
/// `checkpoint/` and closes the ledger. The summary says why it stopped.
///
/// A run that ends before completing an update of its own (an error, or a stop asked for
/// before the first update) leaves the directory as it was claimed ([`RunDir::roll_back`]):
/// nothing was trained, so nothing is recorded.
///
/// # Errors
/// Env errors stop the run; I/O errors name the file.
pub fn train(
    trainer: &mut Trainer,
    run_dir: &mut RunDir,
    on_update: &mut dyn FnMut(&UpdateRecord),
) -> Result<Summary, RuntimeError> {
    let outcome = train_inner(trainer, run_dir, on_update);
    if !run_dir.committed() {
        // The ledger's writer adds files until it stops: close it before the rollback.
        trainer.shutdown();
        let closed = trainer.close_ledger();
        run_dir.roll_back()?;
        closed?;
    }
    outcome
}

fn train_inner(
    trainer: &mut Trainer,
    run_dir: &mut RunDir,
    on_update: &mut dyn FnMut(&UpdateRecord),
) -> Result<Summary, RuntimeError> {
    let settings = &trainer.config().ledger;
    if settings.enabled && trainer.ledger_location().is_none() {
        let location = settings
            .location
            .clone()
            .unwrap_or_else(|| run_dir.layout().ledger().to_string_lossy().into_owned());
        let ledger = strata_ledger::Ledger::open(&strata_ledger::LedgerConfig {
            flush_rows: settings.flush_rows,
            flush_interval: std::time::Duration::from_secs_f64(settings.flush_interval_secs),
            ..strata_ledger::LedgerConfig::new(location)
        })?;
        trainer.attach_ledger(ledger)?;
    }
    let every = trainer.config().train.checkpoint_every;
    let mut evals = EvalSchedule::new(trainer, run_dir);
    if let Some(e) = evals.as_mut() {
        let step = trainer.progress().global_step;
        if step == 0 {
            e.run(trainer, run_dir)?;
        }
    }
    while !trainer.finished() {
        let before = trainer.progress().global_step;
        let record = match trainer.iterate() {
            Ok(record) => record,
            Err(RuntimeError::Interrupted) => {
                // Orderly stop: the last completed update is checkpointed below.
                tracing::info!(component = "learner", step = before, "stopping on request");
                break;
            }
            Err(e) => return Err(e),
        };
        run_dir.commit();
        run_dir.write_record(&record)?;
        on_update(&record);
        if let Some(e) = evals.as_mut() {
            if e.due(before, record.global_step, trainer) {
                e.run(trainer, run_dir)?;
            }
        }
        if every > 0 && before / every != record.global_step / every {
            let dir = run_dir.layout().periodic_checkpoint(record.global_step);
            // Everything up to the checkpoint is durable in the ledger before it is written.
            trainer.flush_ledger()?;
            save_checkpoint(&trainer.state()?, &dir)?;
            trainer.mark_durable();
            prune_checkpoints(run_dir, trainer.config().train.keep_checkpoints)?;
        }
    }
    if !run_dir.committed() {
        // Stopped before an update of its own: nothing to checkpoint or record.
        return Ok(trainer.summary());
    }
    // The workers are not needed for what is left (their states were taken with their
    // last fragments): stopped now, they do not wait for a version that never comes.
    trainer.shutdown();
    if let Some(e) = evals.as_mut() {
        e.run(trainer, run_dir)?;
    }
    run_dir.flush()?;
    trainer.flush_ledger()?;
    save_checkpoint(&trainer.state()?, &run_dir.checkpoint_dir())?;
    trainer.mark_durable();
    trainer.publish_live(true);
    if let Some(stats) = trainer.close_ledger()? {
        tracing::info!(
            component = "ledger",
            rows = stats.rows_written,
            files = stats.files_written,
            bytes = stats.bytes_written,
            "ledger closed"
        );
    }
    Ok(trainer.summary())
}
