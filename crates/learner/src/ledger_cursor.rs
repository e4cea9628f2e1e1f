//! Which episode and trajectory each env is in, by ledger id: saved in checkpoints so a
//! resumed run continues them.

use serde::{Deserialize, Serialize};

/// Per env (global index), the episode and trajectory in progress: ids are the sample id of
/// their first step. Saved in checkpoints so a resumed run continues them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LedgerCursor {
    /// Episode id per env (`u64::MAX`: the next step starts one).
    pub episode: Vec<u64>,
    /// Step index within the episode.
    pub step: Vec<u32>,
    /// Trajectory id per env: steps of one episode under one policy version.
    pub trajectory: Vec<u64>,
    /// The version of that trajectory.
    pub trajectory_version: Vec<u64>,
}

impl LedgerCursor {
    /// No episode or trajectory (the env's next step starts one).
    pub const NONE: u64 = u64::MAX;

    /// No episode in progress for `num_envs` envs.
    pub fn new(num_envs: usize) -> Self {
        LedgerCursor {
            episode: vec![Self::NONE; num_envs],
            step: vec![0; num_envs],
            trajectory: vec![Self::NONE; num_envs],
            trajectory_version: vec![Self::NONE; num_envs],
        }
    }

    /// Forgets the episodes of envs `range` (their worker restarted on fresh envs).
    pub fn abandon(&mut self, range: std::ops::Range<usize>) {
        for e in range {
            self.episode[e] = Self::NONE;
            self.trajectory[e] = Self::NONE;
        }
    }
}
