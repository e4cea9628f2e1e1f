//! Checkpoints: `model.safetensors` (weights and Adam state) plus `meta.json` (config, hash,
//! policy version, counters, env and normaliser state, RNG states, and the weights file's
//! SHA-256), written to a temporary directory and renamed into place.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rand_xoshiro::Xoshiro256PlusPlus;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata_env::NormalizerStats;
use strata_nn::{ActorCritic, NamedTensor};

use crate::buffer::WorkerState;
use crate::factory::build_model;
use crate::records::Progress;
use crate::{RunConfig, RuntimeError};

/// Bumped when the layout changes incompatibly.
const FORMAT_VERSION: u32 = 2;
const WEIGHTS: &str = "model.safetensors";
const META: &str = "meta.json";
/// The run directory's checkpoint of its best-evaluated version.
pub(crate) const BEST_DIR: &str = "best";
/// That version's evaluation, beside it.
pub(crate) const BEST_EVAL: &str = "eval.json";

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

impl TrainerState {
    /// Takes `wanted` as the config to go on with ([`RunConfig::resumed_with`]). When its
    /// identity differs from the checkpoint's (a new budget, new admission rules), the run
    /// continues under `wanted`'s config hash from the version it stands at; returns a
    /// note saying so.
    ///
    /// # Errors
    /// As [`RunConfig::resumed_with`]: nothing is changed.
    pub fn continue_with(&mut self, wanted: RunConfig) -> Result<Option<String>, RuntimeError> {
        let changed = self.config.identity().differences(&wanted.identity());
        self.config = self.config.clone().resumed_with(wanted)?;
        if changed.is_empty() {
            return Ok(None);
        }
        let hash = self.config.config_hash();
        let note = format!(
            "{} changed: the run continues under config hash {hash} (was {}) from policy \
             version {}",
            changed.join(", "),
            self.config_hash,
            self.progress.policy_version
        );
        self.continued_from = Some(std::mem::replace(&mut self.config_hash, hash));
        Ok(Some(note))
    }
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

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), RuntimeError> {
    let mut f = fs::File::create(path).map_err(|e| RuntimeError::io(path, e))?;
    f.write_all(bytes).map_err(|e| RuntimeError::io(path, e))?;
    f.sync_all().map_err(|e| RuntimeError::io(path, e))
}

/// Writes a trainer's state (`Trainer::state`) to `dir`, replacing an older checkpoint
/// there only once the new one is complete.
///
/// # Errors
/// [`RuntimeError::Io`] naming the file that could not be written.
pub fn save_checkpoint(state: &TrainerState, dir: &Path) -> Result<(), RuntimeError> {
    let weights = tensors_to_bytes(&state.tensors)
        .map_err(|e| RuntimeError::checkpoint(dir, e.to_string()))?;
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
    fs::create_dir_all(parent).map_err(|e| RuntimeError::io(parent, e))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(|e| RuntimeError::io(&tmp, e))?;
    write_synced(&tmp.join(WEIGHTS), &weights)?;
    let json = serde_json::to_vec_pretty(&meta).expect("checkpoint metadata serialises");
    write_synced(&tmp.join(META), &json)?;
    // Swap in: the old checkpoint stays whole until the new one is complete.
    let old = parent.join(format!(".{name}.old-{}", std::process::id()));
    if dir.exists() {
        fs::rename(dir, &old).map_err(|e| RuntimeError::io(dir, e))?;
    }
    fs::rename(&tmp, dir).map_err(|e| RuntimeError::io(dir, e))?;
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

/// Resolves `path` to a checkpoint directory: itself, or `path/checkpoint` for a run dir.
fn resolve(path: &Path) -> PathBuf {
    if path.join(META).exists() {
        path.to_path_buf()
    } else {
        path.join("checkpoint")
    }
}

/// Reads and verifies a checkpoint (a checkpoint directory or a run directory).
///
/// # Errors
/// [`RuntimeError::Checkpoint`] saying which file is missing, unreadable, corrupt or from
/// another format.
pub fn read_checkpoint(path: &Path) -> Result<LoadedCheckpoint, RuntimeError> {
    let dir = resolve(path);
    if !dir.is_dir() {
        return Err(RuntimeError::checkpoint(path, "no checkpoint here (expected a directory with meta.json and model.safetensors, or a run directory holding `checkpoint/`)"));
    }
    let meta_path = dir.join(META);
    let meta_text = fs::read(&meta_path)
        .map_err(|e| RuntimeError::checkpoint(&meta_path, format!("cannot read: {e}")))?;
    let meta: CheckpointMeta = serde_json::from_slice(&meta_text)
        .map_err(|e| RuntimeError::checkpoint(&meta_path, format!("corrupt metadata: {e}")))?;
    if meta.format_version != FORMAT_VERSION {
        return Err(RuntimeError::checkpoint(
            &meta_path,
            format!(
                "format version {} (this build reads {FORMAT_VERSION})",
                meta.format_version
            ),
        ));
    }
    let weights_path = dir.join(WEIGHTS);
    let weights = fs::read(&weights_path)
        .map_err(|e| RuntimeError::checkpoint(&weights_path, format!("cannot read: {e}")))?;
    if sha256_hex(&weights) != meta.weights_sha256 {
        return Err(RuntimeError::checkpoint(
            &weights_path,
            "checksum mismatch: the weights file is corrupt or does not belong to this meta.json",
        ));
    }
    let tensors = tensors_from_bytes(&weights)
        .map_err(|e| RuntimeError::checkpoint(&weights_path, e.to_string()))?;
    meta.config.validate()?;
    Ok(LoadedCheckpoint { meta, tensors })
}

/// A trained policy ready for evaluation: its config, model and (frozen) env wrappers.
pub struct Policy {
    /// The run's config.
    pub config: RunConfig,
    /// The config hash.
    pub config_hash: String,
    /// The policy version.
    pub policy_version: u64,
    /// The model.
    pub model: Box<dyn ActorCritic>,
    /// Normalisation statistics to apply (frozen).
    pub normalizer: NormalizerStats,
}

/// The checkpoints of `run_dir` (`checkpoint/`, `best/`, `checkpoints/step-N/`) with the
/// policy version each holds.
fn checkpoints_of(run_dir: &Path) -> Vec<(PathBuf, u64)> {
    #[derive(Deserialize)]
    struct VersionOnly {
        policy_version: u64,
    }
    let mut candidates = vec![run_dir.join("checkpoint"), run_dir.join(BEST_DIR)];
    if let Ok(entries) = fs::read_dir(run_dir.join("checkpoints")) {
        candidates.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
    }
    candidates
        .into_iter()
        .filter_map(|dir| {
            let text = fs::read(dir.join(META)).ok()?;
            let meta = serde_json::from_slice::<VersionOnly>(&text).ok()?;
            Some((dir, meta.policy_version))
        })
        .collect()
}

/// The checkpoint `--resume PATH` means: a checkpoint directory as it is, or a run
/// directory's newest checkpoint (its final one, or after a crash its newest periodic one).
pub fn resume_point(path: &Path) -> PathBuf {
    if path.join(META).exists() {
        return path.to_path_buf();
    }
    latest_checkpoint(path).unwrap_or_else(|| path.to_path_buf())
}

/// Resumes from `path` (a checkpoint, or a run directory's newest): reads its state, lays
/// the caller's `overrides` over the checkpoint's config, and continues under
/// [`continue_run`]'s rule. Every way of resuming (`strata train --resume`,
/// `strata.train(resume=)`) goes through here.
///
/// # Errors
/// The checkpoint's, the overrides', and [`continue_run`]'s.
pub fn resume_run<E: From<RuntimeError>>(
    path: &Path,
    overrides: impl FnOnce(RunConfig) -> Result<RunConfig, E>,
) -> Result<(TrainerState, Vec<String>), E> {
    let state = read_checkpoint(&resume_point(path))?.into_state();
    let wanted = overrides(state.config.clone())?;
    Ok(continue_run(state, wanted)?)
}

/// Continues a checkpointed run with the run-control settings of `wanted` (the
/// checkpoint's config with a command's overrides): the one rule every way of resuming
/// (`strata train --resume`, `strata.train(resume=)`) follows. Returns the state to start
/// the trainer from and what changed that the user should be told.
///
/// - A run solved under `train.stop_when_solved` has its solve stop lifted: asked to
///   resume, it trains on to its budget rather than stopping at once.
/// - A run that has trained its whole budget is refused, saying how to give it more.
/// - A new budget re-anchors the learning-rate and clip schedules where the run stands:
///   from the fraction they had reached they fall linearly to zero at the new budget,
///   without the jump that stretching the old line would give. The same budget keeps the
///   schedule exactly (a resumed run equals an uninterrupted one).
///
/// # Errors
/// [`RuntimeError::Config`] when `wanted` changes what defines the policy, or when there
/// is no budget left to train.
pub fn continue_run(
    mut state: TrainerState,
    wanted: RunConfig,
) -> Result<(TrainerState, Vec<String>), RuntimeError> {
    let before = state.config.train.total_steps;
    let mut notes = Vec::new();
    notes.extend(state.continue_with(wanted)?);
    let p = &mut state.progress;
    let train = &mut state.config.train;
    let step = p.global_step;
    if p.global_step >= train.total_steps {
        return Err(RuntimeError::Config(format!(
            "the run has trained its budget: step {} of {} (train.total_steps); nothing was \
             changed. Give a larger budget to train on, e.g. --max-steps {}",
            group_digits(step),
            group_digits(train.total_steps),
            step + train.total_steps.max(1)
        )));
    }
    if let (Some((solved, _)), true) = (p.solved_at, train.stop_when_solved) {
        train.stop_when_solved = false;
        notes.push(format!(
            "the run was solved at step {}; its solve stop is lifted, so it trains on to {} steps",
            group_digits(solved),
            group_digits(train.total_steps)
        ));
    }
    if train.total_steps != before {
        let fraction = p.schedule_remaining(step, before).clamp(0.0, 1.0);
        p.schedule_anchor = Some((step, fraction));
        let ppo = &state.config.ppo;
        let annealed = [
            ("learning rate", ppo.anneal_lr),
            ("clip range", ppo.anneal_clip_range),
        ]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(" and ");
        if annealed.is_empty() {
            // Constant schedules: nothing to re-anchor that a user would notice.
        } else if fraction <= 0.0 {
            notes.push(format!(
                "the {annealed} had annealed to zero at the old budget of {} steps: the \
                 {} steps added are collected and recorded, but the weights no longer change",
                group_digits(before),
                group_digits(train.total_steps.saturating_sub(step))
            ));
        } else {
            notes.push(format!(
                "the budget moves from {} to {} steps: the {annealed} go on from {:.1}% of \
                 their start value to zero at step {}",
                group_digits(before),
                group_digits(train.total_steps),
                fraction * 100.0,
                group_digits(train.total_steps)
            ));
        }
    }
    Ok((state, notes))
}

/// `57600` as `57,600`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The newest checkpoint of `run_dir` (the highest policy version of its final and
/// periodic ones, `best/` aside): where a run that was killed continues from.
fn latest_checkpoint(run_dir: &Path) -> Option<PathBuf> {
    checkpoints_of(run_dir)
        .into_iter()
        .filter(|(dir, _)| !dir.ends_with(BEST_DIR))
        .max_by_key(|(_, version)| *version)
        .map(|(dir, _)| dir)
}

/// The checkpoint of `run_dir` (its final `checkpoint/` or one of `checkpoints/step-N/`)
/// that holds policy version `version`.
///
/// # Errors
/// [`RuntimeError::Checkpoint`] listing the versions the run has checkpoints of.
pub fn find_version(run_dir: &Path, version: u64) -> Result<PathBuf, RuntimeError> {
    let mut found = Vec::new();
    for (dir, policy_version) in checkpoints_of(run_dir) {
        if policy_version == version {
            return Ok(dir);
        }
        found.push(policy_version);
    }
    found.sort_unstable();
    found.dedup();
    let have = if found.is_empty() {
        "none".to_string()
    } else {
        found
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(RuntimeError::checkpoint(
        run_dir,
        format!("no checkpoint holds policy version {version} (checkpointed versions: {have}; `--checkpoint-every` keeps more)"),
    ))
}

/// Which of a run's policies a command loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyPick {
    /// The checkpoint given, or a run directory's final `checkpoint/` (the default: the
    /// last version trained); for a run stopped without one, its newest periodic one.
    Final,
    /// A run directory's `best/`: the version with the best evaluation, the one to deploy.
    Best,
    /// The run's checkpoint that holds this policy version.
    Version(u64),
}

/// The checkpoint directory `pick` names in `path` (a run or checkpoint directory), and
/// how to say it (`final checkpoint`, `best evaluated`, `checkpoint of version 40`).
///
/// # Errors
/// [`RuntimeError::Checkpoint`]: no `best/` (saying why there may be none), or no
/// checkpoint of the version (listing those there are).
pub fn pick_checkpoint(path: &Path, pick: PolicyPick) -> Result<(PathBuf, String), RuntimeError> {
    match pick {
        PolicyPick::Final => {
            let dir = resolve(path);
            if !dir.join(META).exists() {
                // A run stopped without its final checkpoint (killed, or a second Ctrl-C):
                // its newest periodic one, said so.
                if let Some(newest) = latest_checkpoint(path) {
                    return Ok((
                        newest,
                        "newest checkpoint (the run has no final one)".into(),
                    ));
                }
            }
            Ok((dir, "final checkpoint".into()))
        }
        PolicyPick::Version(v) => {
            Ok((find_version(path, v)?, format!("checkpoint of version {v}")))
        }
        PolicyPick::Best => {
            let best = path.join(BEST_DIR);
            if best.join(META).exists() {
                Ok((best, "best evaluated".into()))
            } else {
                Err(RuntimeError::checkpoint(
                    path,
                    "no best/ here: a run directory has one once an evaluation has run \
                     (report.eval_every, report.eval_episodes > 0)",
                ))
            }
        }
    }
}

/// The policy version of a run's `best/`, if it has one.
pub fn best_version(run_dir: &Path) -> Option<u64> {
    checkpoints_of(run_dir)
        .into_iter()
        .find(|(dir, _)| dir.ends_with(BEST_DIR))
        .map(|(_, version)| version)
}

/// Loads a checkpoint's policy for evaluation.
///
/// # Errors
/// A checkpoint error.
pub fn load_policy(path: &Path) -> Result<Policy, RuntimeError> {
    let loaded = read_checkpoint(path)?;
    let mut model = build_model(&loaded.meta.config)?;
    model.load_tensors(&loaded.tensors)?;
    if loaded.meta.config.env.normalize_obs && loaded.meta.normalizer.obs.is_none() {
        return Err(RuntimeError::checkpoint(
            path,
            "the config normalises observations but meta.json holds no statistics",
        ));
    }
    Ok(Policy {
        config_hash: loaded.meta.config_hash,
        policy_version: loaded.meta.policy_version,
        config: loaded.meta.config,
        model,
        normalizer: loaded.meta.normalizer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_checkpoint(dir: &Path, version: u64) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join(META), format!("{{\"policy_version\": {version}}}")).unwrap();
    }

    #[test]
    fn a_run_directory_resumes_from_its_newest_checkpoint_best_aside() {
        let run = tempfile::tempdir().unwrap();
        let root = run.path();
        // No checkpoint yet: the path as given (read_checkpoint then says what is missing).
        assert_eq!(resume_point(root), root);
        fake_checkpoint(&root.join("checkpoint"), 3);
        assert_eq!(resume_point(root), root.join("checkpoint"));
        // Killed after a later periodic checkpoint: that one; `best/` is never resumed.
        fake_checkpoint(&root.join("checkpoints/step-2048"), 5);
        fake_checkpoint(&root.join(BEST_DIR), 9);
        assert_eq!(resume_point(root), root.join("checkpoints/step-2048"));
        // A checkpoint directory is taken as it is.
        let named = root.join("checkpoint");
        assert_eq!(resume_point(&named), named);
    }

    #[test]
    fn the_default_pick_is_the_final_checkpoint_or_without_one_the_newest() {
        let run = tempfile::tempdir().unwrap();
        let root = run.path();
        fake_checkpoint(&root.join("checkpoints/step-1024"), 4);
        fake_checkpoint(&root.join("checkpoints/step-2048"), 8);
        fake_checkpoint(&root.join(BEST_DIR), 6);
        let (dir, said) = pick_checkpoint(root, PolicyPick::Final).unwrap();
        assert_eq!(dir, root.join("checkpoints/step-2048"));
        assert!(said.contains("no final one"), "{said}");
        fake_checkpoint(&root.join("checkpoint"), 7);
        let (dir, said) = pick_checkpoint(root, PolicyPick::Final).unwrap();
        assert_eq!(
            (dir, said.as_str()),
            (root.join("checkpoint"), "final checkpoint")
        );
        let step = root.join("checkpoints/step-1024");
        assert_eq!(pick_checkpoint(&step, PolicyPick::Final).unwrap().0, step);
    }
}
