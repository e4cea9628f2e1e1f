//! Policy versions the gateway serves: each stored once as safetensors in `policies/`
//! (synced, renamed into place), a bounded set kept in memory with a model for inference.
//! The gateway's [`PolicyStore`]: a version stays readable until the gateway's retention
//! rule removes it.
//!
//! An external version (an artifact the gateway never executes: agents act with their own
//! model) is stored as its reference, `vNNNNNNNN.external.json`, beside them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use strata_config::RunConfig;
use strata_env::NormalizerStats;
use strata_learner::checkpoint::{tensors_from_bytes, tensors_to_bytes};
use strata_learner::{PolicyStore, PublishedPolicy, StoreError};
use strata_nn::{ActorCritic, NamedTensor};

use crate::api::ExternalPolicy;
use crate::error::{GatewayError, RequestError};

/// The file name suffixes of a stored version: Strata's own, an external one.
const OWN: &str = ".safetensors";
const EXTERNAL: &str = ".external.json";

/// One served version: its parameters and a model to act with.
pub struct Served {
    /// Flat parameters.
    pub params: Vec<f32>,
    /// The model (inference is a few microseconds; one lock per version is enough).
    pub model: Mutex<Box<dyn ActorCritic>>,
}

/// Versions on disk, the recent ones in memory.
pub struct DiskPolicyStore {
    dir: PathBuf,
    config: RunConfig,
    cache: RwLock<BTreeMap<u64, Arc<Served>>>,
    capacity: usize,
    /// The newest version stored (0 when none is).
    latest: AtomicU64,
    /// External versions stored (small: every one is kept in memory until removed).
    external: RwLock<BTreeMap<u64, Arc<ExternalPolicy>>>,
}

impl DiskPolicyStore {
    /// Stores versions under `dir` for models built from `config`.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn open(dir: &Path, config: &RunConfig, capacity: usize) -> Result<Self, GatewayError> {
        std::fs::create_dir_all(dir).map_err(|e| GatewayError::io(dir, e))?;
        let stored = std::fs::read_dir(dir).map_err(|e| GatewayError::io(dir, e))?;
        let mut latest = 0;
        let mut external = BTreeMap::new();
        for entry in stored {
            let name = entry.map_err(|e| GatewayError::io(dir, e))?.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = name.strip_prefix('v') else {
                continue;
            };
            if let Some(v) = rest.strip_suffix(OWN).and_then(|v| v.parse::<u64>().ok()) {
                latest = latest.max(v);
            } else if let Some(v) = rest.strip_suffix(EXTERNAL).and_then(|v| v.parse().ok()) {
                let path = dir.join(name);
                let text = std::fs::read(&path).map_err(|e| GatewayError::io(&path, e))?;
                let policy: ExternalPolicy = serde_json::from_slice(&text)
                    .map_err(|e| GatewayError::Config(format!("{}: {e}", path.display())))?;
                external.insert(v, Arc::new(policy));
                latest = latest.max(v);
            }
        }
        Ok(DiskPolicyStore {
            dir: dir.to_path_buf(),
            config: config.clone(),
            cache: RwLock::new(BTreeMap::new()),
            capacity: capacity.max(2),
            latest: AtomicU64::new(latest),
            external: RwLock::new(external),
        })
    }

    fn path(&self, version: u64) -> PathBuf {
        self.dir.join(format!("v{version:08}{OWN}"))
    }

    fn external_path(&self, version: u64) -> PathBuf {
        self.dir.join(format!("v{version:08}{EXTERNAL}"))
    }

    /// Writes `bytes` to `path` durably: a synced temporary file renamed into place, the
    /// directory synced.
    fn write_durably(&self, path: &Path, bytes: &[u8]) -> Result<(), GatewayError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("version");
        let tmp = self.dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| GatewayError::io(path, e))
    }

    /// Stores an external version's reference as `version` (durable before it returns).
    ///
    /// # Errors
    /// Storage failures.
    pub fn insert_external(
        &self,
        version: u64,
        policy: ExternalPolicy,
    ) -> Result<Arc<ExternalPolicy>, GatewayError> {
        let bytes = serde_json::to_vec_pretty(&policy).expect("references serialise");
        self.write_durably(&self.external_path(version), &bytes)?;
        self.latest.fetch_max(version, Ordering::Relaxed);
        let policy = Arc::new(policy);
        self.external.write().insert(version, policy.clone());
        Ok(policy)
    }

    /// The reference of an external version; `None` for Strata's own or an unknown one.
    pub fn external(&self, version: u64) -> Option<Arc<ExternalPolicy>> {
        self.external.read().get(&version).cloned()
    }

    /// Removes `version` from disk and memory; whether it was stored.
    ///
    /// # Errors
    /// The file cannot be removed.
    pub fn remove(&self, version: u64) -> Result<bool, GatewayError> {
        self.cache.write().remove(&version);
        self.external.write().remove(&version);
        let mut removed = false;
        for path in [self.path(version), self.external_path(version)] {
            match std::fs::remove_file(&path) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(GatewayError::io(&path, e)),
            }
        }
        Ok(removed)
    }

    /// Whether `version` is stored (Strata's own or external).
    pub fn exists(&self, version: u64) -> bool {
        self.cache.read().contains_key(&version)
            || self.external.read().contains_key(&version)
            || self.path(version).exists()
    }

    /// Stores `params` as `version` (durable before it returns) and caches it.
    ///
    /// # Errors
    /// Storage failures, or parameters that do not fit the model.
    pub fn insert(&self, version: u64, params: Vec<f32>) -> Result<Arc<Served>, GatewayError> {
        let tensor = NamedTensor {
            name: "params".into(),
            shape: vec![params.len()],
            data: params,
        };
        let bytes = tensors_to_bytes(std::slice::from_ref(&tensor))
            .map_err(|e| GatewayError::Config(format!("policy v{version}: {e}")))?;
        self.write_durably(&self.path(version), &bytes)?;
        self.latest.fetch_max(version, Ordering::Relaxed);
        self.cache_params(version, tensor.data)
    }

    fn cache_params(&self, version: u64, params: Vec<f32>) -> Result<Arc<Served>, GatewayError> {
        let mut model = strata_config::build_model(&self.config)?;
        model
            .set_flat_params(&params)
            .map_err(|e| GatewayError::Config(format!("policy v{version}: {e}")))?;
        let served = Arc::new(Served {
            params,
            model: Mutex::new(model),
        });
        let mut cache = self.cache.write();
        cache.insert(version, served.clone());
        while cache.len() > self.capacity {
            let oldest = *cache.keys().next().expect("non-empty");
            cache.remove(&oldest);
        }
        Ok(served)
    }

    /// A stored version ready to act with, loaded from disk if it left the cache.
    ///
    /// # Errors
    /// `NotFound` for a version never stored; `Conflict` for an external one; `Unavailable`
    /// for an unreadable file.
    pub fn served(&self, version: u64) -> Result<Arc<Served>, RequestError> {
        if let Some(s) = self.cache.read().get(&version) {
            return Ok(s.clone());
        }
        if let Some(external) = self.external(version) {
            return Err(RequestError::conflict(format!(
                "policy version {version} is external ({}, by {}): the gateway does not execute it; act with it and record the action (POST /v1/episodes/{{id}}/record)",
                external.artifact.uri, external.trainer
            )));
        }
        let path = self.path(version);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RequestError::not_found(format!(
                    "unknown policy version {version}"
                )))
            }
            Err(e) => {
                return Err(RequestError::unavailable(format!(
                    "{}: {e}",
                    path.display()
                )))
            }
        };
        let tensors = tensors_from_bytes(&bytes)
            .map_err(|e| RequestError::unavailable(format!("{}: {e}", path.display())))?;
        let params = tensors
            .into_iter()
            .find(|t| t.name == "params")
            .ok_or_else(|| {
                RequestError::unavailable(format!("{}: no `params` tensor", path.display()))
            })?
            .data;
        self.cache_params(version, params)
            .map_err(|e| RequestError::unavailable(e.to_string()))
    }
}

impl PolicyStore for DiskPolicyStore {
    fn publish(&self, policy: PublishedPolicy) -> Result<(), StoreError> {
        policy.verify()?;
        let version = policy.version;
        self.insert(version, policy.params)
            .map(|_| ())
            .map_err(|e| StoreError::Storage {
                version,
                reason: e.to_string(),
            })
    }

    fn get(&self, version: u64) -> Result<Arc<PublishedPolicy>, StoreError> {
        let served = self.served(version).map_err(|e| match e {
            RequestError::NotFound(_) => StoreError::Missing(version),
            other => StoreError::Storage {
                version,
                reason: other.to_string(),
            },
        })?;
        // The gateway serves raw observations: no normalisation statistics.
        Ok(Arc::new(PublishedPolicy::new(
            version,
            served.params.clone(),
            NormalizerStats::default(),
        )))
    }

    fn latest_version(&self) -> u64 {
        self.latest.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every [`PolicyStore`] does, checked through the trait: versions read back
    /// exactly, the newest is known, an unknown one is `Missing`, a corrupt one refused.
    fn conforms(store: &dyn PolicyStore, width: usize) {
        let first = store.latest_version();
        for v in first + 1..=first + 3 {
            let params: Vec<f32> = (0..width).map(|i| (v * 100 + i as u64) as f32).collect();
            store
                .publish(PublishedPolicy::new(v, params, NormalizerStats::default()))
                .unwrap();
        }
        assert_eq!(store.latest_version(), first + 3);
        let back = store.get(first + 2).unwrap();
        assert_eq!(back.version, first + 2);
        assert_eq!(back.params[1], ((first + 2) * 100 + 1) as f32);
        back.verify().unwrap();
        assert_eq!(
            store.get(first + 99).unwrap_err(),
            StoreError::Missing(first + 99)
        );
        let mut bad = PublishedPolicy::new(first + 4, vec![0.0; width], NormalizerStats::default());
        bad.params[0] = 1.0;
        assert!(matches!(
            store.publish(bad),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn memory_and_disk_stores_keep_the_same_contract() {
        let config = strata_config::preset("cartpole").unwrap();
        let width = strata_config::build_model(&config)
            .unwrap()
            .flat_params()
            .len();
        let initial = PublishedPolicy::new(0, vec![0.0; width], NormalizerStats::default());
        conforms(
            &strata_learner::MemoryPolicyStore::new(initial, 1, 8).unwrap(),
            width,
        );
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskPolicyStore::open(dir.path(), &config, 2).unwrap();
        disk.insert(0, vec![0.0; width]).unwrap();
        conforms(&disk, width);
        // Evicted from the two-version cache, the oldest still reads back from disk.
        assert_eq!(PolicyStore::get(&disk, 1).unwrap().params[0], 100.0);
        let reopened = DiskPolicyStore::open(dir.path(), &config, 2).unwrap();
        assert_eq!(reopened.latest_version(), 3);
    }
}
