//! A training run on disk: the run directory with its config, metrics file and
//! checkpoints, around the [`Trainer`] loop.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::checkpoint::save_checkpoint;
use crate::records::{Summary, UpdateRecord};
use crate::trainer::Trainer;
use crate::RuntimeError;

/// Files of a run directory.
pub struct RunDir {
    root: PathBuf,
    metrics: BufWriter<fs::File>,
}

impl RunDir {
    /// Creates (or reuses) `root`, writes `config.toml` and opens `metrics.jsonl`
    /// (appending, so a resumed run continues the same file).
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
        let metrics_path = root.join("metrics.jsonl");
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&metrics_path)
            .map_err(|e| RuntimeError::io(&metrics_path, e))?;
        Ok(RunDir {
            root: root.to_path_buf(),
            metrics: BufWriter::new(file),
        })
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
        let path = self.root.join("metrics.jsonl");
        serde_json::to_writer(&mut self.metrics, record)
            .map_err(|e| RuntimeError::io(&path, e.into()))?;
        self.metrics
            .write_all(b"\n")
            .map_err(|e| RuntimeError::io(&path, e))
    }
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
        })
        .map_err(|e| RuntimeError::Ledger(e.to_string()))?;
        trainer.attach_ledger(ledger)?;
    }
    let every = trainer.config().train.checkpoint_every;
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
        if every > 0 && before / every != record.global_step / every {
            let dir = run_dir
                .root
                .join("checkpoints")
                .join(format!("step-{}", record.global_step));
            // Everything up to the checkpoint is durable in the ledger before it is written.
            trainer.flush_ledger()?;
            save_checkpoint(trainer, &dir)?;
        }
    }
    run_dir
        .metrics
        .flush()
        .map_err(|e| RuntimeError::io(run_dir.root.join("metrics.jsonl"), e))?;
    trainer.flush_ledger()?;
    save_checkpoint(trainer, &run_dir.checkpoint_dir())?;
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
