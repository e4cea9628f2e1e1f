//! A training run on disk: the run directory with its config, metrics file, evaluations,
//! TensorBoard scalars and checkpoints, around the [`Trainer`] loop.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::checkpoint::{save_checkpoint, BEST_DIR, BEST_EVAL};
use crate::eval::EvalResult;
use crate::records::{Summary, UpdateRecord};
use crate::tensorboard::EventWriter;
use crate::trainer::Trainer;
use crate::RuntimeError;

/// Files of a run directory.
pub struct RunDir {
    root: PathBuf,
    metrics: BufWriter<fs::File>,
    evals: BufWriter<fs::File>,
    tensorboard: Option<EventWriter>,
}

fn open_append(path: &Path) -> Result<BufWriter<fs::File>, RuntimeError> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| RuntimeError::io(path, e))?;
    Ok(BufWriter::new(file))
}

fn write_line<T: serde::Serialize>(
    out: &mut BufWriter<fs::File>,
    path: &Path,
    value: &T,
) -> Result<(), RuntimeError> {
    serde_json::to_writer(&mut *out, value).map_err(|e| RuntimeError::io(path, e.into()))?;
    out.write_all(b"\n").map_err(|e| RuntimeError::io(path, e))
}

impl RunDir {
    /// Creates (or reuses) `root`, writes `config.toml`, opens `metrics.jsonl` and
    /// `eval.jsonl` (appending, so a resumed run continues the same files) and, with
    /// `report.tensorboard`, a new TensorBoard event file in `tb/`.
    ///
    /// # Errors
    /// [`RuntimeError::Io`] naming the path.
    pub fn create(root: &Path, trainer: &Trainer) -> Result<Self, RuntimeError> {
        fs::create_dir_all(root).map_err(|e| RuntimeError::io(root, e))?;
        let config_path = root.join("config.toml");
        let text = format!(
            "# config hash {}\n{}",
            trainer.config_hash(),
            trainer.config().to_toml()
        );
        fs::write(&config_path, text).map_err(|e| RuntimeError::io(&config_path, e))?;
        let tensorboard = if trainer.config().report.tensorboard {
            let dir = root.join("tb");
            Some(EventWriter::create(&dir).map_err(|e| RuntimeError::io(&dir, e))?)
        } else {
            None
        };
        Ok(RunDir {
            root: root.to_path_buf(),
            metrics: open_append(&root.join("metrics.jsonl"))?,
            evals: open_append(&root.join("eval.jsonl"))?,
            tensorboard,
        })
    }

    /// Where a run of `config` goes when no directory is named:
    /// `runs/<env>-seed<seed>-<unix time>`.
    pub fn default_path(config: &crate::RunConfig) -> PathBuf {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from("runs").join(format!(
            "{}-seed{}-{now}",
            config.env.name.replace(['/', ':'], "_"),
            config.train.seed
        ))
    }

    /// The run directory a checkpoint path belongs to (the nearest directory at or above
    /// it holding a `config.toml`: `runs/x/checkpoints/step-N` is in `runs/x`), where a
    /// resumed run continues.
    pub fn of_checkpoint(path: &Path) -> Option<PathBuf> {
        path.ancestors()
            .find(|p| p.join("config.toml").is_file())
            .map(Path::to_path_buf)
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The final (latest) checkpoint's directory.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.root.join("checkpoint")
    }

    fn write_record(&mut self, record: &UpdateRecord) -> Result<(), RuntimeError> {
        write_line(&mut self.metrics, &self.root.join("metrics.jsonl"), record)?;
        let Some(tb) = self.tensorboard.as_mut() else {
            return Ok(());
        };
        let step = record.global_step;
        let ppo = &record.ppo;
        let a = &record.admission;
        let mut scalars = vec![
            ("train/policy_version", record.policy_version as f64),
            ("train/env_steps_per_sec", record.env_steps_per_sec),
            ("train/episodes", record.episodes as f64),
            ("train/policy_lag_avg", record.policy_lag_avg),
            ("train/policy_lag_max", record.policy_lag_max as f64),
            ("ppo/policy_loss", f64::from(ppo.policy_loss)),
            ("ppo/value_loss", f64::from(ppo.value_loss)),
            ("ppo/entropy", f64::from(ppo.entropy)),
            ("ppo/approx_kl", f64::from(ppo.approx_kl)),
            ("ppo/clip_fraction", f64::from(ppo.clip_fraction)),
            ("ppo/explained_variance", f64::from(ppo.explained_variance)),
            ("ppo/learning_rate", f64::from(ppo.learning_rate)),
            ("admission/trained", a.trained as f64),
            ("admission/down_weighted", a.down_weighted as f64),
            ("admission/dropped", a.dropped as f64),
        ];
        if let Some(m) = record.mean_return {
            scalars.push(("train/mean_return", m));
        }
        if let Some(l) = record.mean_episode_length {
            scalars.push(("train/mean_episode_length", l));
        }
        for (tag, value) in scalars {
            tb.scalar(tag, step, value)
                .map_err(|e| RuntimeError::io(tb.path(), e))?;
        }
        Ok(())
    }

    /// Appends an evaluation to `eval.jsonl` (and TensorBoard's `eval/` scalars).
    ///
    /// # Errors
    /// [`RuntimeError::Io`] naming the file.
    pub fn write_eval(&mut self, result: &EvalResult) -> Result<(), RuntimeError> {
        write_line(&mut self.evals, &self.root.join("eval.jsonl"), result)?;
        self.evals
            .flush()
            .map_err(|e| RuntimeError::io(self.root.join("eval.jsonl"), e))?;
        if let Some(tb) = self.tensorboard.as_mut() {
            let step = result.global_step.unwrap_or(0);
            let mut scalars = vec![
                ("eval/mean_return", result.mean_return),
                ("eval/policy_version", result.policy_version as f64),
            ];
            scalars.extend(result.success_rate.map(|s| ("eval/success_rate", s)));
            for (tag, value) in scalars {
                tb.scalar(tag, step, value)
                    .map_err(|e| RuntimeError::io(tb.path(), e))?;
            }
        }
        Ok(())
    }

    /// Writes buffered lines and scalars to their files.
    fn flush(&mut self) -> Result<(), RuntimeError> {
        self.metrics
            .flush()
            .map_err(|e| RuntimeError::io(self.root.join("metrics.jsonl"), e))?;
        if let Some(tb) = self.tensorboard.as_mut() {
            tb.flush().map_err(|e| RuntimeError::io(tb.path(), e))?;
        }
        Ok(())
    }
}

/// When the loop evaluates: before the first update, whenever training crosses a multiple
/// of the interval, and at the end. The version with the best evaluation so far is
/// checkpointed in `best/` (with its evaluation in `best/eval.json`), as the one to deploy:
/// PPO's last version is not always its best.
struct EvalSchedule {
    interval: u64,
    last_version: Option<u64>,
    best: Option<f64>,
}

impl EvalSchedule {
    fn new(trainer: &Trainer, run_dir: &RunDir) -> Option<Self> {
        let report = &trainer.config().report;
        // A resumed run keeps the best it had.
        let best = fs::read(run_dir.root.join(BEST_DIR).join(BEST_EVAL))
            .ok()
            .and_then(|text| serde_json::from_slice::<EvalResult>(&text).ok())
            .map(|e| e.mean_return);
        (report.eval_episodes > 0).then(|| EvalSchedule {
            interval: report.eval_interval(trainer.config().train.total_steps),
            last_version: None,
            best,
        })
    }

    fn due(&self, before: u64, after: u64) -> bool {
        before / self.interval != after / self.interval
    }

    fn run(&mut self, trainer: &mut Trainer, run_dir: &mut RunDir) -> Result<(), RuntimeError> {
        let version = trainer.progress().policy_version;
        if self.last_version == Some(version) {
            return Ok(());
        }
        let result = trainer.evaluate_current()?;
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
    let best = run_dir.root.join(BEST_DIR);
    let staged = run_dir.root.join(format!("{BEST_DIR}.new"));
    let old = run_dir.root.join(format!("{BEST_DIR}.old"));
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
    let dir = run_dir.root.join("checkpoints");
    let mut steps: Vec<(u64, PathBuf)> = fs::read_dir(&dir)
        .map_err(|e| RuntimeError::io(&dir, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("step-")?.parse().ok()?;
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
/// `checkpoint/` and closes the ledger.
///
/// # Errors
/// Env errors stop the run; I/O errors name the file.
pub fn train(
    trainer: &mut Trainer,
    run_dir: &mut RunDir,
    on_update: &mut dyn FnMut(&UpdateRecord),
) -> Result<Summary, RuntimeError> {
    let settings = &trainer.config().ledger;
    if settings.enabled && trainer.ledger_location().is_none() {
        let location = settings
            .location
            .clone()
            .unwrap_or_else(|| run_dir.root.join("ledger").to_string_lossy().into_owned());
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
        run_dir.write_record(&record)?;
        on_update(&record);
        if let Some(e) = evals.as_mut() {
            if e.due(before, record.global_step) {
                e.run(trainer, run_dir)?;
            }
        }
        if every > 0 && before / every != record.global_step / every {
            let dir = run_dir
                .root
                .join("checkpoints")
                .join(format!("step-{}", record.global_step));
            // Everything up to the checkpoint is durable in the ledger before it is written.
            trainer.flush_ledger()?;
            save_checkpoint(&trainer.state()?, &dir)?;
            trainer.mark_durable();
            prune_checkpoints(run_dir, trainer.config().train.keep_checkpoints)?;
        }
    }
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
