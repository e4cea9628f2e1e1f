//! One writer per directory. [`DirLock`] holds an exclusive advisory lock (`flock`) on a
//! directory for as long as it lives; a second process asking for the same directory gets
//! [`LockError::Held`] naming the holder's pid and command line.
//!
//! The lock is taken on the directory itself, not on a file inside it, so taking it writes
//! nothing: a command that is refused, or that fails, leaves the directory byte for byte as
//! it was. The kernel releases the lock when its holder exits in any way (kill -9 included),
//! so a stale lock cannot outlive a crash. The holder is found in `/proc/locks` (Linux);
//! where that is unreadable the refusal says the directory is held without naming whom.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let lock = strata_dirlock::DirLock::acquire(dir.path(), "run directory").unwrap();
//! // Another process asking now is refused with this one's pid and command.
//! drop(lock); // released
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the directory.
    #[error("{what} {} is in use by {holder}; one process writes a directory at a time (stop that process, or choose another directory)", path.display())]
    Held {
        /// What the directory is (run directory, ledger, gateway directory).
        what: String,
        /// The directory.
        path: PathBuf,
        /// Who holds it, in words: `pid 4178 (strata train ...)`, or `another process`.
        holder: String,
    },
    /// The directory cannot be opened or locked.
    #[error("cannot lock {what} {}: {source}", path.display())]
    Io {
        /// What the directory is.
        what: String,
        /// The directory.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

/// An exclusive lock on a directory, released when dropped (or when the process exits).
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
    // Held open for the lock: `flock` locks belong to the open file description.
    _dir: File,
}

impl DirLock {
    /// Locks `path` (an existing directory) for this process; `what` names it in errors.
    ///
    /// # Errors
    /// [`LockError::Held`] when another process (or another handle in this one) holds it;
    /// [`LockError::Io`] when it cannot be opened.
    pub fn acquire(path: &Path, what: &str) -> Result<DirLock, LockError> {
        let io = |source| LockError::Io {
            what: what.to_string(),
            path: path.to_path_buf(),
            source,
        };
        let dir = File::open(path).map_err(io)?;
        match dir.try_lock() {
            Ok(()) => Ok(DirLock {
                path: path.to_path_buf(),
                _dir: dir,
            }),
            Err(std::fs::TryLockError::WouldBlock) => Err(LockError::Held {
                what: what.to_string(),
                path: path.to_path_buf(),
                holder: holder_of(&dir).unwrap_or_else(|| "another process".to_string()),
            }),
            Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
        }
    }

    /// Whether `path` is held by some process now (without taking it).
    ///
    /// # Errors
    /// [`LockError::Io`] when it cannot be opened.
    pub fn holder(path: &Path) -> Result<Option<String>, LockError> {
        match DirLock::acquire(path, "directory") {
            Ok(_released) => Ok(None),
            Err(LockError::Held { holder, .. }) => Ok(Some(holder)),
            Err(e) => Err(e),
        }
    }

    /// The locked directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `pid N (command line)` of the process holding an exclusive `flock` on `dir`'s inode, from
/// `/proc/locks` (lines like `1: FLOCK ADVISORY WRITE 4178 fe:00:10010897 0 EOF`).
#[cfg(target_os = "linux")]
fn holder_of(dir: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = dir.metadata().ok()?;
    let dev = meta.dev();
    // Linux's dev_t: major in bits 8..20 and 32..44, minor in bits 0..8 and 20..32.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let wanted = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "N:" FLOCK ADVISORY WRITE PID DEV:INODE START END; a waiter's line has "->"
        // second and so never matches.
        (fields.get(1) == Some(&"FLOCK") && fields.get(5) == Some(&wanted.as_str()))
            .then(|| fields.get(4)?.parse::<u32>().ok())
            .flatten()
    })?;
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| String::from_utf8_lossy(part).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|c| !c.is_empty());
    Some(match command {
        Some(c) => format!("pid {pid} ({c})"),
        None => format!("pid {pid}"),
    })
}

#[cfg(not(target_os = "linux"))]
fn holder_of(_dir: &File) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path(), "run directory").unwrap();
        let err = DirLock::acquire(dir.path(), "run directory").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LockError::Held { .. }), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "the refusal names the holder: {text}"
        );
        assert!(text.contains("run directory"), "{text}");
        assert!(DirLock::holder(dir.path()).unwrap().is_some());
        drop(first);
        assert_eq!(DirLock::holder(dir.path()).unwrap(), None);
        DirLock::acquire(dir.path(), "run directory").unwrap();
    }

    #[test]
    fn taking_the_lock_writes_nothing_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let _lock = DirLock::acquire(dir.path(), "ledger").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = DirLock::acquire(&missing, "gateway directory").unwrap_err();
        assert!(matches!(err, LockError::Io { .. }));
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
