//! Putting a run directory back as it was claimed, after a command that failed before
//! its first update: what it held is noted at the claim (every file and its length,
//! `config.toml`'s bytes), and restored byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::RuntimeError;
use strata_learner::RunLayout;

/// What a directory held when it was claimed, to put back after a failed command.
pub(super) struct Pristine {
    /// The directory did not exist: a rollback removes it.
    pub(super) created: bool,
    /// Every file (relative path) and its length.
    pub(super) files: BTreeMap<PathBuf, u64>,
    pub(super) dirs: BTreeSet<PathBuf>,
    /// `config.toml`'s bytes (the one file a command rewrites rather than appends to).
    pub(super) config: Option<Vec<u8>>,
    /// Where `--overwrite` moved the run that was there: a rollback moves it back.
    pub(super) moved_aside: Option<PathBuf>,
}

impl Pristine {
    /// Notes every file and directory under `root` (which exists).
    pub(super) fn note(root: &Path, created: bool) -> Result<Pristine, RuntimeError> {
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
            config: fs::read(RunLayout::new(root).config()).ok(),
            moved_aside: None,
        })
    }

    /// Puts `root` back as noted: removes what was added, truncates what was appended to,
    /// restores `config.toml`; a directory the command made is removed, and a run it moved
    /// aside moved back.
    pub(super) fn restore(&self, root: &Path) -> Result<(), RuntimeError> {
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
            let path = RunLayout::new(root).config();
            fs::write(&path, bytes).map_err(|e| RuntimeError::io(&path, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::claim::last_step;
    use std::io::Write;

    #[test]
    fn a_rollback_keeps_what_a_recovery_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let run = RunLayout::new(root);
        fs::create_dir_all(root.join("ledger/wal")).unwrap();
        fs::write(root.join("ledger/wal/part-1.parquet"), "rows").unwrap();
        fs::write(run.metrics(), "{}\n").unwrap();
        let pristine = Pristine::note(root, false).unwrap();
        // Compaction on open: the log file's rows now live in a partition file.
        fs::create_dir_all(root.join("ledger/samples/generation=3")).unwrap();
        fs::write(
            root.join("ledger/samples/generation=3/part-1.parquet"),
            "rows",
        )
        .unwrap();
        fs::remove_file(root.join("ledger/wal/part-1.parquet")).unwrap();
        fs::write(run.evals(), "{}\n").unwrap();
        pristine.restore(root).unwrap();
        assert!(root
            .join("ledger/samples/generation=3/part-1.parquet")
            .exists());
        assert!(!run.evals().exists(), "elsewhere, what was added goes");
    }

    #[test]
    fn a_rollback_removes_what_was_added_and_cuts_what_was_appended() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let run = RunLayout::new(root);
        let saved = RunLayout::config_text("abc", "");
        fs::write(run.config(), &saved).unwrap();
        fs::write(run.metrics(), "{\"global_step\":5}\n").unwrap();
        fs::create_dir(run.final_checkpoint()).unwrap();
        fs::write(run.final_checkpoint().join("meta.json"), "{}").unwrap();
        let pristine = Pristine::note(root, false).unwrap();
        fs::write(run.config(), RunLayout::config_text("other", "")).unwrap();
        let mut m = fs::OpenOptions::new()
            .append(true)
            .open(run.metrics())
            .unwrap();
        m.write_all(b"{\"global_step\":9}\n").unwrap();
        fs::create_dir_all(run.tensorboard().join("x")).unwrap();
        fs::write(run.tensorboard().join("x/events"), "e").unwrap();
        fs::write(run.evals(), "{}\n").unwrap();
        pristine.restore(root).unwrap();
        let after = Pristine::note(root, false).unwrap();
        assert_eq!(after.files, pristine.files);
        assert_eq!(after.dirs, pristine.dirs);
        assert_eq!(fs::read_to_string(run.config()).unwrap(), saved);
        assert_eq!(last_step(&run.metrics()), Some(5));
    }
}
