//! Where ledger files live: any `object_store` store (a local directory by default, S3 with
//! the `s3` feature), behind a small blocking API for the writer and reader threads.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};

use crate::{LedgerError, SharedError};

/// A ledger's storage root.
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    runtime: tokio::runtime::Runtime,
    location: String,
    /// A local directory: each write is staged as a hidden file beside its final name
    /// (which readers such as pyarrow and DuckDB's globs skip), synced and linked into place.
    local: bool,
    staged: std::sync::atomic::AtomicU64,
}

/// Suffix of a local file staged before it is linked into place (hidden: leading '.').
const STAGED_SUFFIX: &str = ".staged";

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Storage {
    /// Opens `location`: a directory path (created if missing) or a URL such as
    /// `s3://bucket/prefix` (needs the `s3` feature; credentials from `AWS_*` variables).
    /// Writes are durable on return (see [`Storage::put_all`]).
    ///
    /// # Errors
    /// [`LedgerError::Storage`] when the location cannot be opened.
    pub fn open(location: &str) -> Result<Storage, LedgerError> {
        let err = |e: Box<dyn std::error::Error + Send + Sync>| LedgerError::storage(location, e);
        // File I/O runs on tokio's blocking threads, at normal priority: the writer's
        // flushes, which others wait on, go through them.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(e.into()))?;
        let local = !location.contains("://");
        let (store, prefix): (Arc<dyn ObjectStore>, Path) = if !local {
            let url = url::Url::parse(location).map_err(|e| err(e.into()))?;
            let (store, prefix) = object_store::parse_url_opts(
                &url,
                std::env::vars().filter(|(k, _)| k.starts_with("AWS_")),
            )
            .map_err(|e| err(e.into()))?;
            (Arc::from(store), prefix)
        } else {
            std::fs::create_dir_all(location).map_err(|e| err(e.into()))?;
            // Durability comes from put_all's group commit (one sync per batch of files).
            let local = LocalFileSystem::new_with_prefix(location).map_err(|e| err(e.into()))?;
            (Arc::new(local), Path::default())
        };
        Ok(Storage {
            store,
            prefix,
            runtime,
            location: location.to_string(),
            local,
            staged: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Takes a local ledger's directory for this process until the returned lock is
    /// dropped; `None` for an object store (its writers are the operator's to keep apart).
    ///
    /// # Errors
    /// [`LedgerError::InUse`] naming the process that holds it.
    pub fn lock(&self) -> Result<Option<strata_dirlock::DirLock>, LedgerError> {
        let Some(root) = self.local_root() else {
            return Ok(None);
        };
        match strata_dirlock::DirLock::acquire(root, "ledger") {
            Ok(lock) => Ok(Some(lock)),
            Err(e @ strata_dirlock::LockError::Held { .. }) => {
                Err(LedgerError::InUse(e.to_string()))
            }
            Err(strata_dirlock::LockError::Io { source, .. }) => Err(LedgerError::storage(
                format!("locking {}", root.display()),
                source,
            )),
        }
    }

    /// Where it is.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The directory, for a local ledger (which keeps a durable append log there).
    pub(crate) fn local_root(&self) -> Option<&std::path::Path> {
        self.local.then(|| std::path::Path::new(&self.location))
    }

    fn path(&self, relative: &str) -> Path {
        if self.prefix.as_ref().is_empty() {
            Path::from(relative)
        } else {
            Path::from(format!("{}/{relative}", self.prefix))
        }
    }

    fn relative(&self, path: &Path) -> String {
        let full = path.as_ref();
        let prefix = self.prefix.as_ref();
        if prefix.is_empty() {
            full.to_string()
        } else {
            full.strip_prefix(prefix)
                .unwrap_or(full)
                .trim_start_matches('/')
                .to_string()
        }
    }

    /// Writes a new object; never replaces one (an existing name is an error).
    ///
    /// # Errors
    /// [`LedgerError::Storage`] naming the object.
    pub fn put_new(&self, relative: &str, bytes: Bytes) -> Result<(), LedgerError> {
        self.put_all(vec![(relative.to_string(), bytes)])
            .pop()
            .expect("one result per file")
    }

    /// Writes new objects (never replacing one), durable on return; one result per file.
    /// Locally this is a group commit: every file is staged, one filesystem sync makes the
    /// data durable, the renames put the files in place, a second sync makes the names
    /// durable. A crash at any point leaves each file either absent or complete.
    pub fn put_all(&self, files: Vec<(String, Bytes)>) -> Vec<Result<(), LedgerError>> {
        let opts = || PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let failed = |name: &str, source: SharedError| LedgerError::Storage {
            what: format!("writing {name}"),
            source,
        };
        if !self.local {
            // An object store's put is atomic: the object appears whole or not at all.
            return files
                .into_iter()
                .map(|(name, bytes)| {
                    self.runtime
                        .block_on(self.store.put_opts(&self.path(&name), bytes.into(), opts()))
                        .map(|_| ())
                        .map_err(|e| failed(&name, Arc::new(e)))
                })
                .collect();
        }
        self.put_all_local(files)
    }

    /// The local group commit, on the filesystem directly: object_store's local put
    /// (its own staging file, rename and per-call dispatch) measured about 1.2 ms per small
    /// file here against about 0.25 ms for this, and a fast run writes hundreds of
    /// generation files a second. Reading and listing still go through object_store.
    fn put_all_local(&self, files: Vec<(String, Bytes)>) -> Vec<Result<(), LedgerError>> {
        let root = std::path::Path::new(&self.location);
        let failed = |name: &str, source: SharedError| LedgerError::Storage {
            what: format!("writing {name}"),
            source,
        };
        // A write of a file or two (an invalidation, a duplicate: answered as soon as they
        // are durable) syncs those files and their directories: a filesystem-wide sync
        // waits for whatever else the disk is writing, and a gateway commits such records
        // many times a second beside its reports' append log.
        let few = files.len() <= FEW_FILES;
        let written: Vec<(String, std::io::Result<std::path::PathBuf>)> = files
            .into_iter()
            .map(|(name, bytes)| {
                let n = self
                    .staged
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // Staged beside its final name, hidden (a leading '.', no .parquet suffix):
                // its inode then comes from its own directory's group, where the allocator
                // finds one at once; thousands in one staging directory cost ~1 ms each here.
                let target = root.join(&name);
                let dir = target.parent().unwrap_or(root);
                let tmp = dir.join(format!(".{}-{n}{STAGED_SUFFIX}", std::process::id()));
                let result = std::fs::create_dir_all(dir)
                    .and_then(|()| {
                        if few {
                            let mut f = std::fs::File::create(&tmp)?;
                            std::io::Write::write_all(&mut f, &bytes)?;
                            f.sync_data()
                        } else {
                            std::fs::write(&tmp, &bytes)
                        }
                    })
                    .map(|()| tmp);
                (name, result)
            })
            .collect();
        let mut results = Vec::with_capacity(written.len());
        let mut staged = Vec::with_capacity(written.len());
        for (name, result) in written {
            match result {
                Ok(tmp) => {
                    staged.push((results.len(), tmp, name));
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(failed(&name, Arc::new(e)))),
            }
        }
        if staged.is_empty() {
            return results;
        }
        if few {
            return self.place_few(root, staged, results);
        }
        if let Err(e) = sync_filesystem(root) {
            let e: SharedError = Arc::new(e);
            for (i, _, name) in &staged {
                results[*i] = Err(failed(&format!("{name} (syncing staged data)"), e.clone()));
            }
            return results;
        }
        let mut placed = false;
        for (i, tmp, name) in &staged {
            let target = root.join(name);
            let linked = rename_no_replace(tmp, &target);
            match linked {
                Ok(()) => placed = true,
                Err(e) => results[*i] = Err(failed(name, Arc::new(e))),
            }
        }
        if placed {
            if let Err(e) = sync_filesystem(root) {
                let e: SharedError = Arc::new(e);
                for (i, _, name) in &staged {
                    if results[*i].is_ok() {
                        results[*i] = Err(failed(&format!("{name} (syncing names)"), e.clone()));
                    }
                }
            }
        }
        results
    }

    /// Puts a few staged files (their data synced) in place, then syncs every directory
    /// from each file's up to the root, so that the names, and any directory made for
    /// them, are durable.
    fn place_few(
        &self,
        root: &std::path::Path,
        staged: Vec<(usize, std::path::PathBuf, String)>,
        mut results: Vec<Result<(), LedgerError>>,
    ) -> Vec<Result<(), LedgerError>> {
        let failed = |name: &str, source: std::io::Error| LedgerError::Storage {
            what: format!("writing {name}"),
            source: Arc::new(source),
        };
        for (i, tmp, name) in &staged {
            let target = root.join(name);
            let synced = rename_no_replace(tmp, &target).and_then(|()| {
                let mut dir = target.parent();
                while let Some(d) = dir.filter(|d| d.starts_with(root)) {
                    std::fs::File::open(d)?.sync_all()?;
                    dir = d.parent();
                }
                Ok(())
            });
            if let Err(e) = synced {
                results[*i] = Err(failed(name, e));
            }
        }
        results
    }

    /// Reads an object.
    ///
    /// # Errors
    /// [`LedgerError::Storage`] naming the object.
    pub fn get(&self, relative: &str) -> Result<Bytes, LedgerError> {
        let path = self.path(relative);
        self.runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map_err(|e| LedgerError::storage(format!("reading {relative}"), e))
    }

    /// Removes objects (compacted log files, strays of an interrupted compaction), durable
    /// on return. A missing object is not an error.
    ///
    /// # Errors
    /// [`LedgerError::Storage`] naming the first object that could not be removed.
    pub fn delete_all(&self, names: &[String]) -> Result<(), LedgerError> {
        if names.is_empty() {
            return Ok(());
        }
        let failed = |name: &str, source: SharedError| LedgerError::Storage {
            what: format!("removing {name}"),
            source,
        };
        if !self.local {
            for name in names {
                match self.runtime.block_on(self.store.delete(&self.path(name))) {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(failed(name, Arc::new(e))),
                }
            }
            return Ok(());
        }
        let root = std::path::Path::new(&self.location);
        for name in names {
            match std::fs::remove_file(root.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(failed(name, Arc::new(e))),
            }
        }
        sync_filesystem(root).map_err(|e| failed(&names[0], Arc::new(e)))
    }

    /// Every object under `relative_prefix`, relative to the root, sorted.
    ///
    /// # Errors
    /// [`LedgerError::Storage`].
    pub fn list(&self, relative_prefix: &str) -> Result<Vec<String>, LedgerError> {
        Ok(self
            .list_sized(relative_prefix)?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    /// As [`Storage::list`], with each object's size in bytes.
    ///
    /// # Errors
    /// [`LedgerError::Storage`].
    pub(crate) fn list_sized(
        &self,
        relative_prefix: &str,
    ) -> Result<Vec<(String, u64)>, LedgerError> {
        let prefix = self.path(relative_prefix);
        let metas: Vec<_> = self
            .runtime
            .block_on(self.store.list(Some(&prefix)).try_collect())
            .map_err(|e| LedgerError::storage(format!("listing {relative_prefix}"), e))?;
        let mut names: Vec<(String, u64)> = metas
            .iter()
            .map(|m| (self.relative(&m.location), m.size))
            .collect();
        names.sort();
        Ok(names)
    }
}

/// Files a write syncs one by one rather than with one filesystem-wide sync.
const FEW_FILES: usize = 2;

/// Makes everything written to the filesystem holding `root` durable: `syncfs` on Linux (one
/// call for all files and directory entries), `sync` elsewhere on Unix.
fn sync_filesystem(root: &std::path::Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let dir = std::fs::File::open(root)?;
        Ok(rustix::fs::syncfs(&dir)?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = root;
        rustix::fs::sync();
        Ok(())
    }
}

impl Storage {
    /// Removes staged files an interrupted write left behind (local directories; an object
    /// store has none). Only for the ledger's one owner: another process's writes in flight
    /// are staged files too.
    ///
    /// # Errors
    /// [`LedgerError::Storage`] when one cannot be removed.
    pub fn remove_staged_leftovers(&self) -> Result<(), LedgerError> {
        if !self.local {
            return Ok(());
        }
        remove_staged(std::path::Path::new(&self.location))
            .map_err(|e| LedgerError::storage(&self.location, e))
    }
}

/// Removes staged files under `root`.
fn remove_staged(root: &std::path::Path) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if entry.file_type()?.is_dir() {
            remove_staged(&entry.path())?;
        } else if name.starts_with('.') && name.ends_with(STAGED_SUFFIX) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Moves `from` to `to` unless `to` exists (then an error, and nothing changes).
fn rename_no_replace(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{renameat_with, RenameFlags, CWD};
        match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(()),
            // Filesystems without RENAME_NOREPLACE: a hard link never replaces a name either.
            Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    std::fs::hard_link(from, to).and_then(|()| std::fs::remove_file(from))
}
