//! Finding a run's checkpoints: its final one, its periodic ones, its best-evaluated one,
//! the one holding a given version, and where `--resume` goes on from; and loading one as
//! a policy to evaluate.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use strata_env::NormalizerStats;
use strata_nn::ActorCritic;

use super::format::{read_checkpoint, resolve, META};
use crate::run_layout::{RunLayout, BEST_DIR};
use crate::LearnerError;
use strata_config::build_model;
use strata_config::RunConfig;

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
    let run = RunLayout::new(run_dir);
    let mut candidates = vec![run.final_checkpoint(), run.best_checkpoint()];
    if let Ok(entries) = fs::read_dir(run.periodic_checkpoints()) {
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
/// [`LearnerError::Checkpoint`] listing the versions the run has checkpoints of.
pub fn find_version(run_dir: &Path, version: u64) -> Result<PathBuf, LearnerError> {
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
    Err(LearnerError::checkpoint(
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
/// [`LearnerError::Checkpoint`]: no `best/` (saying why there may be none), or no
/// checkpoint of the version (listing those there are).
pub fn pick_checkpoint(path: &Path, pick: PolicyPick) -> Result<(PathBuf, String), LearnerError> {
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
            let best = RunLayout::new(path).best_checkpoint();
            if best.join(META).exists() {
                Ok((best, "best evaluated".into()))
            } else {
                Err(LearnerError::checkpoint(
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
pub fn load_policy(path: &Path) -> Result<Policy, LearnerError> {
    let loaded = read_checkpoint(path)?;
    let mut model = build_model(&loaded.meta.config)?;
    model.load_tensors(&loaded.tensors)?;
    if loaded.meta.config.env.normalize_obs && loaded.meta.normalizer.obs.is_none() {
        return Err(LearnerError::checkpoint(
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
        let run = RunLayout::new(root);
        fake_checkpoint(&run.final_checkpoint(), 3);
        assert_eq!(resume_point(root), run.final_checkpoint());
        // Killed after a later periodic checkpoint: that one; `best/` is never resumed.
        fake_checkpoint(&run.periodic_checkpoint(2048), 5);
        fake_checkpoint(&run.best_checkpoint(), 9);
        assert_eq!(resume_point(root), run.periodic_checkpoint(2048));
        // A checkpoint directory is taken as it is.
        let named = run.final_checkpoint();
        assert_eq!(resume_point(&named), named);
    }

    #[test]
    fn the_default_pick_is_the_final_checkpoint_or_without_one_the_newest() {
        let run = tempfile::tempdir().unwrap();
        let root = run.path();
        let layout = RunLayout::new(root);
        fake_checkpoint(&layout.periodic_checkpoint(1024), 4);
        fake_checkpoint(&layout.periodic_checkpoint(2048), 8);
        fake_checkpoint(&layout.best_checkpoint(), 6);
        let (dir, said) = pick_checkpoint(root, PolicyPick::Final).unwrap();
        assert_eq!(dir, layout.periodic_checkpoint(2048));
        assert!(said.contains("no final one"), "{said}");
        fake_checkpoint(&layout.final_checkpoint(), 7);
        let (dir, said) = pick_checkpoint(root, PolicyPick::Final).unwrap();
        assert_eq!(
            (dir, said.as_str()),
            (layout.final_checkpoint(), "final checkpoint")
        );
        let step = layout.periodic_checkpoint(1024);
        assert_eq!(pick_checkpoint(&step, PolicyPick::Final).unwrap().0, step);
    }
}
