//! The checkpoint file format: `model.safetensors` (weights and Adam state) plus
//! `meta.json` (config, hash, policy version, counters, env and normaliser state, RNG
//! states, and the weights file's SHA-256), written to a temporary directory and renamed
//! into place; read back verified.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rand_xoshiro::Xoshiro256PlusPlus;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata_env::NormalizerStats;
use strata_nn::NamedTensor;

use crate::run_layout::RunLayout;
use crate::{LearnerError, Progress, WorkerState};
use strata_config::RunConfig;

/// Bumped when the layout changes incompatibly.
const FORMAT_VERSION: u32 = 2;
const WEIGHTS: &str = "model.safetensors";
/// The metadata file: its presence makes a directory a checkpoint.
pub(super) const META: &str = "meta.json";

/// A trainer's whole state between two updates: what a checkpoint stores and what a
/// resumed run starts from. The checkpoint module knows this snapshot, not the trainer.
#[derive(Clone, Debug)]
pub struct TrainerState {
    /// The run's config.
    pub config: RunConfig,
    /// The run's config hash: the hash of `config` as it was when the run started, or
    /// when a resume last changed its identity ([`TrainerState::continue_with`]).
    pub config_hash: String,
    /// The hash the run had before [`TrainerState::continue_with`] changed it: the run
    /// directory that holds the run under it is still this run's.
    pub continued_from: Option<String>,
    /// Counters and statistics; `progress.policy_version` is the weights' version.
    pub progress: Progress,
    /// The learner's normalisation statistics (published with the policy).
    pub normalizer: NormalizerStats,
    /// Each worker's envs, observations and RNG after its last consumed fragment.
    pub workers: Vec<WorkerState>,
    /// Minibatch-shuffling RNG.
    pub ppo_rng: Xoshiro256PlusPlus,
    /// Weights and optimiser state, by name.
    pub tensors: Vec<NamedTensor>,
}

/// Everything but the weights.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// Layout version.
    pub format_version: u32,
    /// The run's config.
    pub config: RunConfig,
    /// The run's config hash.
    pub config_hash: String,
    /// Policy version of the saved weights.
    pub policy_version: u64,
    /// Counters and statistics.
    pub progress: Progress,
    /// The learner's normalisation statistics (published with the policy).
    pub normalizer: NormalizerStats,
    /// Each worker's envs, observations and RNG after its last consumed fragment.
    pub workers: Vec<WorkerState>,
    /// Minibatch-shuffling RNG.
    pub ppo_rng: Xoshiro256PlusPlus,
    /// SHA-256 of `model.safetensors`, hex.
    pub weights_sha256: String,
}

/// Why tensors could not be written or read as safetensors.
#[derive(Debug, thiserror::Error)]
pub enum TensorFileError {
    /// Not a safetensors file, or a tensor whose shape does not match its data.
    #[error("not a valid safetensors file: {0}")]
    Format(#[from] safetensors::SafeTensorError),
    /// A tensor of another element type than f32.
    #[error("tensor `{name}` is {dtype}, expected F32")]
    NotF32 {
        /// The tensor.
        name: String,
        /// Its element type.
        dtype: String,
    },
}

/// Serialises tensors as safetensors.
///
/// # Errors
/// A tensor whose shape does not match its data.
pub fn tensors_to_bytes(tensors: &[NamedTensor]) -> Result<Vec<u8>, TensorFileError> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.shape.clone(),
                t.data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = bytes
        .iter()
        .map(|(name, shape, data)| {
            TensorView::new(Dtype::F32, shape.clone(), data).map(|v| (name.clone(), v))
        })
        .collect::<Result<_, _>>()?;
    Ok(safetensors::serialize(views, &None)?)
}

/// Reads safetensors written by [`tensors_to_bytes`].
///
/// # Errors
/// Not a safetensors file, or not of f32 tensors.
pub fn tensors_from_bytes(bytes: &[u8]) -> Result<Vec<NamedTensor>, TensorFileError> {
    let st = SafeTensors::deserialize(bytes)?;
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            if view.dtype() != Dtype::F32 {
                return Err(TensorFileError::NotF32 {
                    name,
                    dtype: format!("{:?}", view.dtype()),
                });
            }
            let data = view
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Ok(NamedTensor {
                name,
                shape: view.shape().to_vec(),
                data,
            })
        })
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), LearnerError> {
    let mut f = fs::File::create(path).map_err(|e| LearnerError::io(path, e))?;
    f.write_all(bytes).map_err(|e| LearnerError::io(path, e))?;
    f.sync_all().map_err(|e| LearnerError::io(path, e))
}

/// Writes a trainer's state (`Trainer::state`) to `dir`, replacing an older checkpoint
/// there only once the new one is complete.
///
/// # Errors
/// [`LearnerError::Io`] naming the file that could not be written.
pub fn save_checkpoint(state: &TrainerState, dir: &Path) -> Result<(), LearnerError> {
    let weights = tensors_to_bytes(&state.tensors)
        .map_err(|e| LearnerError::checkpoint(dir, e.to_string()))?;
    let meta = CheckpointMeta {
        format_version: FORMAT_VERSION,
        config: state.config.clone(),
        config_hash: state.config_hash.clone(),
        policy_version: state.progress.policy_version,
        progress: state.progress.clone(),
        normalizer: state.normalizer.clone(),
        workers: state.workers.clone(),
        ppo_rng: state.ppo_rng.clone(),
        weights_sha256: sha256_hex(&weights),
    };
    let parent = dir.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(|e| LearnerError::io(parent, e))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(|e| LearnerError::io(&tmp, e))?;
    write_synced(&tmp.join(WEIGHTS), &weights)?;
    let json = serde_json::to_vec_pretty(&meta).expect("checkpoint metadata serialises");
    write_synced(&tmp.join(META), &json)?;
    // Swap in: the old checkpoint stays whole until the new one is complete.
    let old = parent.join(format!(".{name}.old-{}", std::process::id()));
    if dir.exists() {
        fs::rename(dir, &old).map_err(|e| LearnerError::io(dir, e))?;
    }
    fs::rename(&tmp, dir).map_err(|e| LearnerError::io(dir, e))?;
    let _ = fs::remove_dir_all(&old);
    Ok(())
}

/// A checkpoint read back and verified.
pub struct LoadedCheckpoint {
    /// Metadata.
    pub meta: CheckpointMeta,
    /// Tensors by name.
    pub tensors: Vec<NamedTensor>,
}

impl LoadedCheckpoint {
    /// The trainer state it holds, to resume from.
    pub fn into_state(self) -> TrainerState {
        let m = self.meta;
        TrainerState {
            config: m.config,
            config_hash: m.config_hash,
            continued_from: None,
            progress: m.progress,
            normalizer: m.normalizer,
            workers: m.workers,
            ppo_rng: m.ppo_rng,
            tensors: self.tensors,
        }
    }
}

/// Resolves `path` to a checkpoint directory: itself, or a run directory's final one.
pub(super) fn resolve(path: &Path) -> PathBuf {
    if path.join(META).exists() {
        path.to_path_buf()
    } else {
        RunLayout::new(path).final_checkpoint()
    }
}

/// Reads and verifies a checkpoint (a checkpoint directory or a run directory).
///
/// # Errors
/// [`LearnerError::Checkpoint`] saying which file is missing, unreadable, corrupt or from
/// another format.
pub fn read_checkpoint(path: &Path) -> Result<LoadedCheckpoint, LearnerError> {
    let dir = resolve(path);
    if !dir.is_dir() {
        return Err(LearnerError::checkpoint(path, "no checkpoint here (expected a directory with meta.json and model.safetensors, or a run directory holding `checkpoint/`)"));
    }
    let meta_path = dir.join(META);
    let meta_text = fs::read(&meta_path)
        .map_err(|e| LearnerError::checkpoint(&meta_path, format!("cannot read: {e}")))?;
    let meta: CheckpointMeta = serde_json::from_slice(&meta_text)
        .map_err(|e| LearnerError::checkpoint(&meta_path, format!("corrupt metadata: {e}")))?;
    if meta.format_version != FORMAT_VERSION {
        return Err(LearnerError::checkpoint(
            &meta_path,
            format!(
                "format version {} (this build reads {FORMAT_VERSION})",
                meta.format_version
            ),
        ));
    }
    let weights_path = dir.join(WEIGHTS);
    let weights = fs::read(&weights_path)
        .map_err(|e| LearnerError::checkpoint(&weights_path, format!("cannot read: {e}")))?;
    if sha256_hex(&weights) != meta.weights_sha256 {
        return Err(LearnerError::checkpoint(
            &weights_path,
            "checksum mismatch: the weights file is corrupt or does not belong to this meta.json",
        ));
    }
    let tensors = tensors_from_bytes(&weights)
        .map_err(|e| LearnerError::checkpoint(&weights_path, e.to_string()))?;
    meta.config.validate()?;
    Ok(LoadedCheckpoint { meta, tensors })
}
