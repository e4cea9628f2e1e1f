//! Where ledger files live: any `object_store` store (a local directory by default, S3 with
//! the `s3` feature), behind a small blocking API for the writer and reader threads.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::LedgerError;

/// A ledger's storage root.
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    runtime: tokio::runtime::Runtime,
    location: String,
    /// A local directory: writes are staged under `_staging/` (which readers such as
    /// pyarrow and DuckDB's globs skip), fsynced and renamed into place.
    local: bool,
    staged: std::sync::atomic::AtomicU64,
}

/// Where local writes are staged before their rename into place.
const STAGING: &str = "_staging";

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
    /// Local writes are durable on return: staged file, fsync, rename, directory fsync.
    ///
    /// # Errors
    /// [`LedgerError::Storage`] when the location cannot be opened.
    pub fn open(location: &str) -> Result<Storage, LedgerError> {
        let err = |e: String| LedgerError::Storage(format!("{location}: {e}"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(e.to_string()))?;
        let local = !location.contains("://");
        let (store, prefix): (Arc<dyn ObjectStore>, Path) = if !local {
            let url = url::Url::parse(location).map_err(|e| err(e.to_string()))?;
            let (store, prefix) = object_store::parse_url_opts(
                &url,
                std::env::vars().filter(|(k, _)| k.starts_with("AWS_")),
            )
            .map_err(|e| err(e.to_string()))?;
            (Arc::from(store), prefix)
        } else {
            std::fs::create_dir_all(location).map_err(|e| err(e.to_string()))?;
            // What an interrupted write left behind is never part of the ledger.
            let staging = std::path::Path::new(location).join(STAGING);
            if staging.exists() {
                std::fs::remove_dir_all(&staging).map_err(|e| err(e.to_string()))?;
            }
            let local = LocalFileSystem::new_with_prefix(location)
                .map_err(|e| err(e.to_string()))?
                .with_fsync(true);
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

    /// Where it is.
    pub fn location(&self) -> &str {
        &self.location
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
        let path = self.path(relative);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let failed =
            |e: object_store::Error| LedgerError::Storage(format!("writing {relative}: {e}"));
        if !self.local {
            // An object store's put is atomic: the object appears whole or not at all.
            return self
                .runtime
                .block_on(self.store.put_opts(&path, PutPayload::from(bytes), opts))
                .map(|_| ())
                .map_err(failed);
        }
        let n = self
            .staged
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let staged = self.path(&format!("{STAGING}/{}-{n}", std::process::id()));
        self.runtime
            .block_on(async {
                self.store
                    .put_opts(&staged, PutPayload::from(bytes), opts)
                    .await?;
                self.store.rename_if_not_exists(&staged, &path).await
            })
            .map_err(failed)
    }

    /// Reads an object.
    ///
    /// # Errors
    /// [`LedgerError::Storage`] naming the object.
    pub fn get(&self, relative: &str) -> Result<Bytes, LedgerError> {
        let path = self.path(relative);
        self.runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map_err(|e| LedgerError::Storage(format!("reading {relative}: {e}")))
    }

    /// Every object under `relative_prefix`, relative to the root, sorted.
    ///
    /// # Errors
    /// [`LedgerError::Storage`].
    pub fn list(&self, relative_prefix: &str) -> Result<Vec<String>, LedgerError> {
        let prefix = self.path(relative_prefix);
        let metas: Vec<_> = self
            .runtime
            .block_on(self.store.list(Some(&prefix)).try_collect())
            .map_err(|e| LedgerError::Storage(format!("listing {relative_prefix}: {e}")))?;
        let mut names: Vec<String> = metas.iter().map(|m| self.relative(&m.location)).collect();
        names.sort();
        Ok(names)
    }
}
