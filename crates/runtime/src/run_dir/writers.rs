//! A run directory's writers: `config.toml` under its hash header, `metrics.jsonl` and
//! `eval.jsonl` appended to, TensorBoard scalars in `tb/`.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::RunDir;
use crate::eval::EvalResult;
use crate::records::UpdateRecord;
use crate::tensorboard::EventWriter;
use crate::trainer::Trainer;
use crate::RuntimeError;
use strata_learner::RunLayout;

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
    pub(super) fn write_start(&mut self, trainer: &Trainer) -> Result<(), RuntimeError> {
        let layout = self.layout();
        self.metrics = Some(open_append(&layout.metrics())?);
        self.evals = Some(open_append(&layout.evals())?);
        let config_path = layout.config();
        let text = RunLayout::config_text(trainer.config_hash(), &trainer.config().to_toml());
        fs::write(&config_path, text).map_err(|e| RuntimeError::io(&config_path, e))?;
        if trainer.config().report.tensorboard {
            let dir = layout.tensorboard();
            self.tensorboard =
                Some(EventWriter::create(&dir).map_err(|e| RuntimeError::io(&dir, e))?);
        }
        Ok(())
    }

    pub(crate) fn write_record(&mut self, record: &UpdateRecord) -> Result<(), RuntimeError> {
        let path = self.layout().metrics();
        let metrics = self.metrics.as_mut().ok_or_else(|| closed(&path))?;
        write_line(metrics, &path, record)?;
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
            ("train/worker_faults", record.worker_faults as f64),
            ("ppo/policy_loss", f64::from(ppo.policy_loss)),
            ("ppo/value_loss", f64::from(ppo.value_loss)),
            ("ppo/entropy", f64::from(ppo.entropy)),
            ("ppo/approx_kl", f64::from(ppo.approx_kl)),
            (
                "ppo/approx_kl_last_epoch",
                f64::from(ppo.approx_kl_last_epoch),
            ),
            ("ppo/clip_fraction", f64::from(ppo.clip_fraction)),
            ("ppo/explained_variance", f64::from(ppo.explained_variance)),
            ("ppo/learning_rate", f64::from(ppo.learning_rate)),
            ("ppo/grad_norm", f64::from(ppo.grad_norm)),
            ("ppo/policy_grad_norm", f64::from(ppo.policy_grad_norm)),
            ("ppo/value_grad_norm", f64::from(ppo.value_grad_norm)),
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
        let path = self.layout().evals();
        let evals = self.evals.as_mut().ok_or_else(|| closed(&path))?;
        write_line(evals, &path, result)?;
        evals.flush().map_err(|e| RuntimeError::io(&path, e))?;
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
    pub(crate) fn flush(&mut self) -> Result<(), RuntimeError> {
        if let Some(m) = self.metrics.as_mut() {
            m.flush()
                .map_err(|e| RuntimeError::io(self.layout().metrics(), e))?;
        }
        if let Some(tb) = self.tensorboard.as_mut() {
            tb.flush().map_err(|e| RuntimeError::io(tb.path(), e))?;
        }
        Ok(())
    }
}

/// The error for a write after [`RunDir::roll_back`] closed the files.
fn closed(path: &Path) -> RuntimeError {
    RuntimeError::io(
        path,
        std::io::Error::other("the run directory was rolled back; nothing more is written"),
    )
}
