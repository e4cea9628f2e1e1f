//! The deployed learner's checkpoints: the trainer state (weights, optimiser, counters)
//! in Strata's checkpoint format, and beside it what makes a restart retrain nothing
//! twice: the segments trained in the latest updates, the update's decisions (written to
//! the ledger after the checkpoint) and the invalidations in force.
//!
//! Each update's checkpoint is a directory `checkpoints/u<update>/` holding the trainer
//! state and `deployed.json`; it is complete once `deployed.json` is there (written last,
//! synced and renamed into place). The newest two complete ones are kept.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_learner::{read_checkpoint, save_checkpoint, TrainerState};
use strata_ledger::{DecisionRecord, Target};

use crate::ClusterError;

/// The file that completes a checkpoint directory.
const SIDE: &str = "deployed.json";
/// Complete checkpoints kept.
const KEEP: usize = 2;
/// Updates whose trained segments a checkpoint remembers (a redelivered one is
/// acknowledged, not trained again).
pub(crate) const TRAINED_UPDATES: usize = 4;
/// Invalidated trajectories remembered: a trajectory's segments arrive within its
/// episode, so the oldest can be forgotten.
const TRAJECTORIES_KEPT: usize = 1 << 16;
/// Invalidated sample ranges remembered.
const RANGES_KEPT: usize = 1 << 12;

/// What a checkpoint keeps beside the trainer state.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Side {
    /// The update the checkpoint ends.
    pub(crate) update: u64,
    /// The version it published.
    pub(crate) version: u64,
    /// Message ids of the segments trained, per update, for the last few updates.
    pub(crate) trained: VecDeque<(u64, Vec<String>)>,
    /// The update's decisions (the ledger gets them after the checkpoint).
    pub(crate) decisions: Vec<DecisionRecord>,
    /// Invalidations in force.
    pub(crate) invalid: Invalid,
    /// The serving pointer's revision and version as the learner last saw them before
    /// this update's move: a restart compares the pointer with it.
    #[serde(default)]
    pub(crate) pointer: Option<(u64, u64)>,
}

/// Trajectories and sample ranges invalidated lately.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Invalid {
    trajectories: VecDeque<u64>,
    ranges: VecDeque<(u64, u64)>,
    #[serde(skip)]
    set: std::collections::HashSet<u64>,
}

impl Invalid {
    /// Adds an invalidation.
    pub(crate) fn add(&mut self, target: Target) {
        match target {
            Target::Trajectory { id } => {
                if self.set.insert(id) {
                    self.trajectories.push_back(id);
                    if self.trajectories.len() > TRAJECTORIES_KEPT {
                        let old = self.trajectories.pop_front().expect("non-empty");
                        self.set.remove(&old);
                    }
                }
            }
            Target::Samples { first, last } => {
                self.ranges.push_back((first, last));
                if self.ranges.len() > RANGES_KEPT {
                    self.ranges.pop_front();
                }
            }
        }
    }

    /// Whether a segment of `trajectory` with ascending `sample_ids` is invalidated.
    pub(crate) fn covers(&self, trajectory: u64, sample_ids: &[u64]) -> bool {
        if self.set.contains(&trajectory) {
            return true;
        }
        let (Some(&low), Some(&high)) = (sample_ids.first(), sample_ids.last()) else {
            return false;
        };
        self.ranges.iter().any(|&(first, last)| {
            first <= high && last >= low && sample_ids.iter().any(|id| (first..=last).contains(id))
        })
    }

    /// Rebuilds the lookup set after reading.
    fn reindex(&mut self) {
        self.set = self.trajectories.iter().copied().collect();
    }
}

/// Where a deployed learner keeps its checkpoints.
pub(crate) struct Checkpoints {
    root: PathBuf,
}

impl Checkpoints {
    /// Checkpoints under `dir/checkpoints`.
    pub(crate) fn new(dir: &Path) -> Self {
        Checkpoints {
            root: dir.join("checkpoints"),
        }
    }

    fn path(&self, update: u64) -> PathBuf {
        self.root.join(format!("u{update}"))
    }

    /// Complete checkpoints, newest first.
    fn complete(&self) -> Result<Vec<u64>, ClusterError> {
        let mut found = BTreeMap::new();
        let entries = match fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.root, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io(&self.root, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(update) = name.strip_prefix('u').and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            if entry.path().join(SIDE).is_file() {
                found.insert(update, ());
            }
        }
        Ok(found.into_keys().rev().collect())
    }

    /// The newest complete checkpoint: trainer state and side.
    pub(crate) fn newest(&self) -> Result<Option<(TrainerState, Side)>, ClusterError> {
        let Some(&update) = self.complete()?.first() else {
            return Ok(None);
        };
        let dir = self.path(update);
        let state = read_checkpoint(&dir)
            .map_err(|e| ClusterError::Runtime(strata_runtime::RuntimeError::from(e)))?
            .into_state();
        let side_path = dir.join(SIDE);
        let text = fs::read(&side_path).map_err(|e| io(&side_path, e))?;
        let mut side: Side = serde_json::from_slice(&text).map_err(|e| {
            ClusterError::Config(format!("{}: unreadable: {e}", side_path.display()))
        })?;
        side.invalid.reindex();
        Ok(Some((state, side)))
    }

    /// Writes update `side.update`'s checkpoint, complete once this returns, and drops
    /// all but the newest [`KEEP`].
    pub(crate) fn save(&self, state: &TrainerState, side: &Side) -> Result<(), ClusterError> {
        let dir = self.path(side.update);
        save_checkpoint(state, &dir)
            .map_err(|e| ClusterError::Runtime(strata_runtime::RuntimeError::from(e)))?;
        let json = serde_json::to_vec(side).expect("a checkpoint side serialises");
        let tmp = dir.join(format!(".{SIDE}.tmp"));
        let path = dir.join(SIDE);
        fs::write(&tmp, &json)
            .and_then(|()| fs::File::open(&tmp)?.sync_all())
            .and_then(|()| fs::rename(&tmp, &path))
            .and_then(|()| fs::File::open(&dir)?.sync_all())
            .map_err(|e| io(&path, e))?;
        for old in self.complete()?.into_iter().skip(KEEP) {
            let _ = fs::remove_dir_all(self.path(old));
        }
        // A directory left without its side by a crash is never complete: remove it.
        if let Ok(entries) = fs::read_dir(&self.root) {
            for entry in entries.flatten() {
                let p = entry.path();
                if p.is_dir() && !p.join(SIDE).is_file() {
                    let _ = fs::remove_dir_all(p);
                }
            }
        }
        Ok(())
    }
}

fn io(path: &Path, e: std::io::Error) -> ClusterError {
    ClusterError::Config(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidations_cover_their_trajectories_and_ranges_and_survive_a_reread() {
        let mut inv = Invalid::default();
        inv.add(Target::Trajectory { id: 7 });
        inv.add(Target::Samples {
            first: 20,
            last: 22,
        });
        assert!(inv.covers(7, &[1, 2]));
        assert!(inv.covers(8, &[21]));
        assert!(
            !inv.covers(8, &[19, 23]),
            "a range between ids holds none of them"
        );
        let mut back: Invalid = serde_json::from_slice(&serde_json::to_vec(&inv).unwrap()).unwrap();
        back.reindex();
        assert!(back.covers(7, &[]) && back.covers(1, &[22]));
    }
}
