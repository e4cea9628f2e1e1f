//! A run directory on disk: its config, metrics file, evaluations, TensorBoard scalars and
//! checkpoints, held by one process at a time.
//!
//! Two rules keep a user's records whole:
//! - **Runs never mix.** A new run goes into a directory that holds no run (or does not
//!   exist yet); a directory holding one is refused with what it holds and the choices
//!   (`--resume`, another directory, or moving the old run aside with `--overwrite`, which
//!   renames it and deletes nothing). A resumed run continues only the run it came from.
//! - **A command that fails changes nothing.** What the directory held when it was
//!   claimed is noted (every file and its length, `config.toml`'s bytes); a command that
//!   ends before completing a single update puts it back byte for byte
//!   ([`RunDir::roll_back`]). Once an update has completed, what was written stays: it
//!   describes real training, and the newest checkpoint resumes it.

mod claim;
mod rollback;
mod writers;

use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use strata_dirlock::DirLock;

use crate::records::UpdateRecord;
use crate::tensorboard::EventWriter;
use crate::trainer::Trainer;
use crate::RuntimeError;
use strata_learner::RunLayout;

use claim::last_line;
pub use claim::{ClaimedDir, Existing};
use rollback::Pristine;

/// Files of a run directory, open for writing.
pub struct RunDir {
    root: PathBuf,
    /// `metrics.jsonl` and `eval.jsonl`, appended to (open once the run has started).
    metrics: Option<BufWriter<fs::File>>,
    evals: Option<BufWriter<fs::File>>,
    tensorboard: Option<EventWriter>,
    pristine: Option<Pristine>,
    _lock: DirLock,
}

impl RunDir {
    /// Claims `root` for `trainer`'s run (continuing it if the trainer was resumed, else
    /// refusing a directory that holds a run) and opens its files.
    ///
    /// # Errors
    /// As [`RunDir::claim`] and [`ClaimedDir::open`].
    pub fn create(root: &Path, trainer: &Trainer) -> Result<Self, RuntimeError> {
        let existing = if trainer.progress().updates > 0 {
            Existing::Continue
        } else {
            Existing::Refuse
        };
        RunDir::claim(root, existing)?.open(trainer)
    }

    /// Where a run of `config` goes when no directory is named:
    /// `runs/<env>-seed<seed>-<YYYYMMDD-HHMMSS>` (UTC), numbered on if that exists.
    pub fn default_path(config: &crate::RunConfig) -> PathBuf {
        let base = format!(
            "{}-seed{}-{}",
            config.env.name.replace(['/', ':'], "_"),
            config.train.seed,
            utc_stamp(std::time::SystemTime::now())
        );
        let runs = PathBuf::from("runs");
        (1..)
            .map(|k| match k {
                1 => runs.join(&base),
                k => runs.join(format!("{base}-{k}")),
            })
            .find(|p| !p.exists())
            .expect("some numbered name is free")
    }

    /// The run directory a checkpoint path belongs to (the nearest directory at or above
    /// it holding a `config.toml`: `runs/x/checkpoints/step-N` is in `runs/x`), where a
    /// resumed run continues.
    pub fn of_checkpoint(path: &Path) -> Option<PathBuf> {
        path.ancestors()
            .find(|p| RunLayout::new(*p).config().is_file())
            .map(Path::to_path_buf)
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The last metrics line of the run in `root` (its latest update), read from the
    /// file's end.
    pub fn last_record(root: &Path) -> Option<UpdateRecord> {
        serde_json::from_value(last_line(&RunLayout::new(root).metrics())?).ok()
    }

    /// The final (latest) checkpoint's directory.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.layout().final_checkpoint()
    }

    /// Where this run keeps each thing.
    pub fn layout(&self) -> RunLayout {
        RunLayout::new(&self.root)
    }

    /// From now on the directory keeps what is written (an update has completed): a
    /// later failure no longer rolls it back.
    pub fn commit(&mut self) {
        self.pristine = None;
    }

    /// Whether [`RunDir::commit`] was called.
    pub fn committed(&self) -> bool {
        self.pristine.is_none()
    }

    /// Puts the directory back as it was when claimed (a command that failed before its
    /// first update): added files and directories removed, appended files cut back,
    /// `config.toml` restored; a directory the command created is removed. Nothing
    /// happens once [`RunDir::commit`] was called. Close the ledger first: its writer
    /// adds files until it stops.
    ///
    /// # Errors
    /// [`RuntimeError::Io`] naming the path that could not be restored.
    pub fn roll_back(&mut self) -> Result<(), RuntimeError> {
        let Some(pristine) = self.pristine.take() else {
            return Ok(());
        };
        // Buffered lines are dropped with the files' handles, not written after the cut.
        self.tensorboard = None;
        if let Some(m) = self.metrics.take() {
            let _unwritten = m.into_parts();
        }
        if let Some(e) = self.evals.take() {
            let _unwritten = e.into_parts();
        }
        pristine.restore(&self.root)
    }
}

/// `YYYYMMDD-HHMMSS` in UTC (for directory names people read).
pub fn utc_stamp(time: std::time::SystemTime) -> String {
    let secs = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps_match_known_dates() {
        let at = |secs| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        assert_eq!(utc_stamp(at(0)), "19700101-000000");
        // 2026-12-01T14:30:00Z and a leap day.
        assert_eq!(utc_stamp(at(1_796_135_400)), "20261201-143000");
        assert_eq!(utc_stamp(at(951_782_400)), "20000229-000000");
    }
}
