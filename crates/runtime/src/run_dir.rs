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

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use strata_dirlock::{DirLock, LockError};

use crate::eval::EvalResult;
use crate::records::UpdateRecord;
use crate::tensorboard::EventWriter;
use crate::trainer::Trainer;
use crate::RuntimeError;

/// The files whose presence marks a directory as a run's.
const RUN_MARKERS: [&str; 5] = [
    "config.toml",
    "metrics.jsonl",
    "checkpoint",
    "checkpoints",
    "ledger",
];

/// What the command means to do with an existing run in the directory it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Refuse: the directory must hold no run (a new run, the default).
    Refuse,
    /// Move a run found there aside (renamed to `<dir>.replaced-<time>`, never deleted).
    MoveAside,
    /// Continue it: the directory may hold only the run being resumed.
    Continue,
}

impl Existing {
    /// What a training command means for the run its directory may hold: `--overwrite`
    /// moves it aside, `--resume` continues it, a new run refuses it.
    ///
    /// # Errors
    /// [`RuntimeError::Config`] for `--overwrite` with `--resume` into the resumed run's own
    /// directory (`run_dir_named` false): that would move aside the run being continued.
    pub fn for_command(
        overwrite: bool,
        resuming: bool,
        run_dir_named: bool,
    ) -> Result<Existing, RuntimeError> {
        match (overwrite, resuming) {
            (true, true) if !run_dir_named => Err(RuntimeError::Config(
                "overwrite moves aside a run found in the run directory; resume continues its run in place: name the resumed run's new run directory, or drop overwrite".into(),
            )),
            (true, _) => Ok(Existing::MoveAside),
            (false, true) => Ok(Existing::Continue),
            (false, false) => Ok(Existing::Refuse),
        }
    }
}

/// A run directory held by this process, before anything is written to it. Dropped
/// without being opened (the command failed before training), it puts the directory back
/// as it was claimed: one it created is removed.
pub struct ClaimedDir {
    root: PathBuf,
    /// The lock and what the directory held; taken by [`ClaimedDir::open`].
    held: Option<(DirLock, Pristine)>,
    moved_aside: Option<PathBuf>,
}

impl Drop for ClaimedDir {
    fn drop(&mut self) {
        if let Some((_lock, pristine)) = self.held.take() {
            if let Err(e) = pristine.restore(&self.root) {
                tracing::error!(component = "run", error = %e, "could not put the run directory back as it was");
            }
        }
    }
}

/// What a directory held when it was claimed, to put back after a failed command.
struct Pristine {
    /// The directory did not exist: a rollback removes it.
    created: bool,
    /// Every file (relative path) and its length.
    files: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    /// `config.toml`'s bytes (the one file a command rewrites rather than appends to).
    config: Option<Vec<u8>>,
    /// Where `--overwrite` moved the run that was there: a rollback moves it back.
    moved_aside: Option<PathBuf>,
}

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

/// What a run directory holds, in one line, for a refusal.
fn describe_run(root: &Path) -> String {
    let config = fs::read_to_string(root.join("config.toml")).ok();
    let hash = config.as_deref().and_then(saved_hash);
    let parsed = config
        .as_deref()
        .and_then(|t| crate::RunConfig::from_saved_toml(t).ok());
    let steps = last_step(&root.join("metrics.jsonl"));
    let mut parts = Vec::new();
    if let Some(c) = &parsed {
        parts.push(format!("{} seed {}", c.env.name, c.train.seed));
    }
    if let Some(h) = hash {
        parts.push(format!("config hash {h}"));
    }
    parts.push(match steps {
        Some(s) => format!("trained to step {s}"),
        None => "no update recorded".to_string(),
    });
    parts.join(", ")
}

/// The `global_step` of a metrics file's last line.
fn last_step(metrics: &Path) -> Option<u64> {
    last_line(metrics)?.get("global_step")?.as_u64()
}

/// A JSON-lines file's last line, read from its end whatever the file's size.
fn last_line(path: &Path) -> Option<serde_json::Value> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(64 * 1024);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = String::new();
    file.read_to_string(&mut tail).ok()?;
    let line = tail.lines().rev().find(|l| !l.trim().is_empty())?;
    serde_json::from_str(line).ok()
}

/// The config hash a run directory's `config.toml` names.
fn run_hash(root: &Path) -> Option<String> {
    saved_hash(&fs::read_to_string(root.join("config.toml")).ok()?)
}

/// The config hash on a saved `config.toml`'s first line.
fn saved_hash(text: &str) -> Option<String> {
    Some(
        text.lines()
            .next()?
            .strip_prefix("# config hash ")?
            .to_string(),
    )
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

fn lock(root: &Path) -> Result<DirLock, RuntimeError> {
    DirLock::acquire(root, "run directory").map_err(|e| match e {
        LockError::Held { .. } => RuntimeError::RunDir(e.to_string()),
        LockError::Io { path, source, .. } => RuntimeError::io(path, source),
    })
}

impl Pristine {
    /// Notes every file and directory under `root` (which exists).
    fn note(root: &Path, created: bool) -> Result<Pristine, RuntimeError> {
        let mut files = BTreeMap::new();
        let mut dirs = BTreeSet::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).map_err(|e| RuntimeError::io(&dir, e))? {
                let entry = entry.map_err(|e| RuntimeError::io(&dir, e))?;
                let path = entry.path();
                let relative = path.strip_prefix(root).expect("under root").to_path_buf();
                let kind = entry.file_type().map_err(|e| RuntimeError::io(&path, e))?;
                if kind.is_dir() {
                    dirs.insert(relative);
                    stack.push(path);
                } else {
                    let len = entry
                        .metadata()
                        .map_err(|e| RuntimeError::io(&path, e))?
                        .len();
                    files.insert(relative, len);
                }
            }
        }
        Ok(Pristine {
            created,
            files,
            dirs,
            config: fs::read(root.join("config.toml")).ok(),
            moved_aside: None,
        })
    }

    /// Puts `root` back as noted: removes what was added, truncates what was appended to,
    /// restores `config.toml`; a directory the command made is removed, and a run it moved
    /// aside moved back.
    fn restore(&self, root: &Path) -> Result<(), RuntimeError> {
        if self.created {
            fs::remove_dir_all(root).map_err(|e| RuntimeError::io(root, e))?;
            if let Some(aside) = &self.moved_aside {
                fs::rename(aside, root).map_err(|e| RuntimeError::io(aside, e))?;
            }
            return Ok(());
        }
        let now = Pristine::note(root, false)?;
        // A file the command removed was moved, not lost: a ledger opened after a crash
        // sorts its log files into partitions (and stranded rows into the log). Rolling
        // that back would delete the only copy of those rows, so whatever the command added
        // in such a part of the directory stays (as recovered), and is said.
        let moved: BTreeSet<&std::ffi::OsStr> = self
            .files
            .keys()
            .filter(|f| !now.files.contains_key(*f))
            .filter_map(|f| f.components().next().map(|c| c.as_os_str()))
            .collect();
        for part in &moved {
            tracing::warn!(component = "run", part = %part.to_string_lossy(), "left as the failed command recovered it (files were moved there, not only added)");
        }
        let kept = |p: &Path| {
            p.components()
                .next()
                .is_some_and(|c| moved.contains(c.as_os_str()))
        };
        for (file, len) in &now.files {
            let path = root.join(file);
            match self.files.get(file) {
                None if kept(file) => {}
                None => fs::remove_file(&path).map_err(|e| RuntimeError::io(&path, e))?,
                Some(before) if before < len => {
                    let f = fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(|e| RuntimeError::io(&path, e))?;
                    f.set_len(*before).map_err(|e| RuntimeError::io(&path, e))?;
                }
                Some(_) => {}
            }
        }
        // Deepest first, so a new directory is empty when it is removed.
        for dir in now
            .dirs
            .iter()
            .rev()
            .filter(|d| !self.dirs.contains(*d) && !kept(d))
        {
            let path = root.join(dir);
            fs::remove_dir_all(&path).map_err(|e| RuntimeError::io(&path, e))?;
        }
        if let Some(bytes) = &self.config {
            let path = root.join("config.toml");
            fs::write(&path, bytes).map_err(|e| RuntimeError::io(&path, e))?;
        }
        Ok(())
    }
}

impl ClaimedDir {
    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where an earlier run found in the directory was moved ([`Existing::MoveAside`]).
    pub fn moved_aside(&self) -> Option<&Path> {
        self.moved_aside.as_deref()
    }

    /// Opens the files for `trainer`'s run: writes `config.toml`, opens `metrics.jsonl`
    /// and `eval.jsonl` (appending, so a resumed run continues the same files) and, with
    /// `report.tensorboard`, a new TensorBoard event file in `tb/`.
    ///
    /// # Errors
    /// [`RuntimeError::RunDir`] when the directory holds another run than the one
    /// `trainer` resumes; [`RuntimeError::Io`] naming the path.
    pub fn open(mut self, trainer: &Trainer) -> Result<RunDir, RuntimeError> {
        let root = self.root.clone();
        if let Some(held) = run_hash(&root) {
            if held != trainer.config_hash() && Some(held.as_str()) != trainer.continued_from() {
                return Err(RuntimeError::RunDir(format!(
                    "{} holds another run ({}) than the one being resumed (config hash {}); \
                     nothing was changed. Resume it into a new --run-dir, or into its own directory",
                    root.display(),
                    describe_run(&root),
                    trainer.config_hash()
                )));
            }
        }
        let (lock, pristine) = self.held.take().expect("a claimed directory is held");
        let mut dir = RunDir {
            metrics: None,
            evals: None,
            tensorboard: None,
            pristine: Some(pristine),
            _lock: lock,
            root,
        };
        // From here a failure puts the directory back before it is returned.
        if let Err(e) = dir.write_start(trainer) {
            dir.roll_back()?;
            return Err(e);
        }
        Ok(dir)
    }
}

impl RunDir {
    /// Takes `root` for this process (one writer per directory) before anything is
    /// written: creates it if it does not exist, and checks what it holds against
    /// `existing`. Nothing in an existing directory changes until [`ClaimedDir::open`].
    ///
    /// # Errors
    /// [`RuntimeError::RunDir`] when another process holds it, or when it holds a run (or
    /// other files) and `existing` is [`Existing::Refuse`], naming what it holds and the
    /// choices; [`RuntimeError::Io`] naming the path.
    pub fn claim(root: &Path, existing: Existing) -> Result<ClaimedDir, RuntimeError> {
        let created = !root.exists();
        if created {
            fs::create_dir_all(root).map_err(|e| RuntimeError::io(root, e))?;
        } else if !root.is_dir() {
            return Err(RuntimeError::RunDir(format!(
                "{} is a file, not a directory",
                root.display()
            )));
        }
        let held = lock(root)?;
        let is_run = RUN_MARKERS.iter().any(|m| root.join(m).exists());
        let entries = fs::read_dir(root)
            .map_err(|e| RuntimeError::io(root, e))?
            .count();
        let mut moved_aside = None;
        let lock = match existing {
            Existing::Refuse if is_run => {
                return Err(RuntimeError::RunDir(format!(
                    "{} already holds a run ({}); nothing was changed. Continue it with \
                     `--resume {0}`, choose another --run-dir, or pass --overwrite to move it \
                     aside (renamed, never deleted)",
                    root.display(),
                    describe_run(root)
                )))
            }
            Existing::Refuse | Existing::Continue if !is_run && entries > 0 => {
                return Err(RuntimeError::RunDir(format!(
                    "{} is not empty ({entries} entries) and holds no run; a run writes into \
                     a directory of its own: choose another --run-dir, or pass --overwrite to \
                     move it aside (renamed, never deleted)",
                    root.display()
                )))
            }
            Existing::MoveAside if entries > 0 => {
                let aside = aside_path(root);
                fs::rename(root, &aside).map_err(|e| RuntimeError::io(root, e))?;
                // The lock followed the old directory; the new one is taken afresh.
                drop(held);
                fs::create_dir(root).map_err(|e| RuntimeError::io(root, e))?;
                moved_aside = Some(aside);
                lock(root)?
            }
            _ => held,
        };
        let pristine = Pristine {
            moved_aside: moved_aside.clone(),
            ..Pristine::note(root, created || moved_aside.is_some())?
        };
        Ok(ClaimedDir {
            root: root.to_path_buf(),
            held: Some((lock, pristine)),
            moved_aside,
        })
    }

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

    fn write_start(&mut self, trainer: &Trainer) -> Result<(), RuntimeError> {
        self.metrics = Some(open_append(&self.root.join("metrics.jsonl"))?);
        self.evals = Some(open_append(&self.root.join("eval.jsonl"))?);
        let config_path = self.root.join("config.toml");
        let text = format!(
            "# config hash {}\n{}",
            trainer.config_hash(),
            trainer.config().to_toml()
        );
        fs::write(&config_path, text).map_err(|e| RuntimeError::io(&config_path, e))?;
        if trainer.config().report.tensorboard {
            let dir = self.root.join("tb");
            self.tensorboard =
                Some(EventWriter::create(&dir).map_err(|e| RuntimeError::io(&dir, e))?);
        }
        Ok(())
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
            .find(|p| p.join("config.toml").is_file())
            .map(Path::to_path_buf)
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The last metrics line of the run in `root` (its latest update), read from the
    /// file's end.
    pub fn last_record(root: &Path) -> Option<UpdateRecord> {
        serde_json::from_value(last_line(&root.join("metrics.jsonl"))?).ok()
    }

    /// The final (latest) checkpoint's directory.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.root.join("checkpoint")
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

    pub(crate) fn write_record(&mut self, record: &UpdateRecord) -> Result<(), RuntimeError> {
        let path = self.root.join("metrics.jsonl");
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
        let path = self.root.join("eval.jsonl");
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
                .map_err(|e| RuntimeError::io(self.root.join("metrics.jsonl"), e))?;
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

/// `<root>.replaced-<YYYYMMDD-HHMMSS>` beside `root`, numbered on if taken.
fn aside_path(root: &Path) -> PathBuf {
    let name = root
        .file_name()
        .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
    let base = format!(
        "{name}.replaced-{}",
        utc_stamp(std::time::SystemTime::now())
    );
    let parent = root.parent().unwrap_or(Path::new("."));
    (1..)
        .map(|k| match k {
            1 => parent.join(&base),
            k => parent.join(format!("{base}-{k}")),
        })
        .find(|p| !p.exists())
        .expect("some numbered name is free")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollback_keeps_what_a_recovery_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join("ledger/wal")).unwrap();
        fs::write(root.join("ledger/wal/part-1.parquet"), "rows").unwrap();
        fs::write(root.join("metrics.jsonl"), "{}\n").unwrap();
        let pristine = Pristine::note(root, false).unwrap();
        // Compaction on open: the log file's rows now live in a partition file.
        fs::create_dir_all(root.join("ledger/samples/generation=3")).unwrap();
        fs::write(
            root.join("ledger/samples/generation=3/part-1.parquet"),
            "rows",
        )
        .unwrap();
        fs::remove_file(root.join("ledger/wal/part-1.parquet")).unwrap();
        fs::write(root.join("eval.jsonl"), "{}\n").unwrap();
        pristine.restore(root).unwrap();
        assert!(root
            .join("ledger/samples/generation=3/part-1.parquet")
            .exists());
        assert!(
            !root.join("eval.jsonl").exists(),
            "elsewhere, what was added goes"
        );
    }

    #[test]
    fn utc_stamps_match_known_dates() {
        let at = |secs| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        assert_eq!(utc_stamp(at(0)), "19700101-000000");
        // 2026-12-01T14:30:00Z and a leap day.
        assert_eq!(utc_stamp(at(1_796_135_400)), "20261201-143000");
        assert_eq!(utc_stamp(at(951_782_400)), "20000229-000000");
    }

    #[test]
    fn a_rollback_removes_what_was_added_and_cuts_what_was_appended() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::write(root.join("config.toml"), "# config hash abc\n").unwrap();
        fs::write(root.join("metrics.jsonl"), "{\"global_step\":5}\n").unwrap();
        fs::create_dir(root.join("checkpoint")).unwrap();
        fs::write(root.join("checkpoint/meta.json"), "{}").unwrap();
        let pristine = Pristine::note(root, false).unwrap();
        fs::write(root.join("config.toml"), "# config hash other\n").unwrap();
        let mut m = fs::OpenOptions::new()
            .append(true)
            .open(root.join("metrics.jsonl"))
            .unwrap();
        m.write_all(b"{\"global_step\":9}\n").unwrap();
        fs::create_dir_all(root.join("tb/x")).unwrap();
        fs::write(root.join("tb/x/events"), "e").unwrap();
        fs::write(root.join("eval.jsonl"), "{}\n").unwrap();
        pristine.restore(root).unwrap();
        let after = Pristine::note(root, false).unwrap();
        assert_eq!(after.files, pristine.files);
        assert_eq!(after.dirs, pristine.dirs);
        assert_eq!(
            fs::read_to_string(root.join("config.toml")).unwrap(),
            "# config hash abc\n"
        );
        assert_eq!(last_step(&root.join("metrics.jsonl")), Some(5));
    }
}
