//! Policy versions the gateway serves: each stored once as safetensors in `policies/`
//! (synced, renamed into place), a bounded set kept in memory with a model for inference.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use strata_nn::{ActorCritic, NamedTensor};
use strata_runtime::checkpoint::{tensors_from_bytes, tensors_to_bytes};
use strata_runtime::RunConfig;

use crate::error::{GatewayError, RequestError};

/// One served version: its parameters and a model to act with.
pub struct Served {
    /// Flat parameters.
    pub params: Vec<f32>,
    /// The model (inference is a few microseconds; one lock per version is enough).
    pub model: Mutex<Box<dyn ActorCritic>>,
}

/// Versions on disk, the recent ones in memory.
pub struct PolicyStore {
    dir: PathBuf,
    config: RunConfig,
    cache: RwLock<BTreeMap<u64, Arc<Served>>>,
    capacity: usize,
}

impl PolicyStore {
    /// Stores versions under `dir` for models built from `config`.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn open(dir: &Path, config: &RunConfig, capacity: usize) -> Result<Self, GatewayError> {
        std::fs::create_dir_all(dir).map_err(|e| GatewayError::io(dir, e))?;
        Ok(PolicyStore {
            dir: dir.to_path_buf(),
            config: config.clone(),
            cache: RwLock::new(BTreeMap::new()),
            capacity: capacity.max(2),
        })
    }

    fn path(&self, version: u64) -> PathBuf {
        self.dir.join(format!("v{version:08}.safetensors"))
    }

    /// Whether `version` is stored.
    pub fn exists(&self, version: u64) -> bool {
        self.cache.read().contains_key(&version) || self.path(version).exists()
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
        let path = self.path(version);
        let tmp = self
            .dir
            .join(format!(".v{version:08}.tmp-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| GatewayError::io(&path, e))?;
        self.cache_params(version, tensor.data)
    }

    fn cache_params(&self, version: u64, params: Vec<f32>) -> Result<Arc<Served>, GatewayError> {
        let mut model = strata_runtime::build_model(&self.config)?;
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

    /// A stored version, loaded from disk if it left the cache.
    ///
    /// # Errors
    /// `NotFound` for a version never stored; `Unavailable` for an unreadable file.
    pub fn get(&self, version: u64) -> Result<Arc<Served>, RequestError> {
        if let Some(s) = self.cache.read().get(&version) {
            return Ok(s.clone());
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
