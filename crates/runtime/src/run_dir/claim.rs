//! Claiming a run directory: one process at a time, a directory holding another run
//! refused with what it holds and the choices, `--overwrite` moving it aside (renamed,
//! never deleted), a resumed run continuing only its own; and what a claimed directory
//! does when the command fails before opening it.

use std::fs;
use std::path::{Path, PathBuf};

use strata_dirlock::{DirLock, LockError};

use super::rollback::Pristine;
use super::{utc_stamp, RunDir};
use crate::trainer::Trainer;
use crate::RuntimeError;
use strata_learner::RunLayout;

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

/// What a run directory holds, in one line, for a refusal.
fn describe_run(root: &Path) -> String {
    let layout = RunLayout::new(root);
    let config = fs::read_to_string(layout.config()).ok();
    let hash = config.as_deref().and_then(RunLayout::saved_hash);
    let parsed = config
        .as_deref()
        .and_then(|t| crate::RunConfig::from_saved_toml(t).ok());
    let steps = last_step(&layout.metrics());
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
pub(super) fn last_step(metrics: &Path) -> Option<u64> {
    last_line(metrics)?.get("global_step")?.as_u64()
}

/// A JSON-lines file's last line, read from its end whatever the file's size.
pub(super) fn last_line(path: &Path) -> Option<serde_json::Value> {
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

fn lock(root: &Path) -> Result<DirLock, RuntimeError> {
    DirLock::acquire(root, "run directory").map_err(|e| match e {
        LockError::Held { .. } => RuntimeError::RunDir(e.to_string()),
        LockError::Io { path, source, .. } => RuntimeError::io(path, source),
    })
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
        if let Some(held) = RunLayout::new(&root).run_hash() {
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
        let is_run = RunLayout::new(root).holds_run();
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
