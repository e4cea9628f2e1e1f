//! An episode's record: its pin, trajectory, progress and a recurrent policy's state,
//! kept exactly in the journal.

use serde::{Deserialize, Serialize};

use crate::api::{Channel, EpisodeStatus};

/// An episode.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EpisodeRec {
    /// Id.
    pub id: u64,
    /// The agent (token name) that owns it.
    pub agent: String,
    /// Pinned version.
    pub version: u64,
    /// Stable or canary.
    pub channel: Channel,
    /// Ledger bucket.
    pub bucket: strata_ledger::Bucket,
    /// Current trajectory.
    pub trajectory: u64,
    /// Status.
    pub status: EpisodeStatus,
    /// Steps reported.
    pub steps: u32,
    /// Sum of reported rewards.
    pub reward_sum: f64,
    /// Env sequence of the last act or report.
    pub last_seq: Option<u64>,
    /// The last reported observation (bootstraps a cut trajectory's value).
    pub last_obs: Option<Vec<f32>>,
    /// The action awaiting its report.
    pub pending: Option<u64>,
    /// The key it was started with.
    pub start_key: Option<String>,
    /// Wall-clock ns of the last request on it.
    pub last_activity_ns: i64,
    /// A recurrent policy's state after the last reported action: what the next act and
    /// the bootstrap of a cut trajectory start from. Zero when the episode starts and after
    /// a switch of version; empty for a feed-forward policy and once the episode ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "state_bytes")]
    pub memory: Vec<f32>,
    /// The state after the outstanding action: it becomes `memory` when the action is
    /// reported, and is dropped when the action is never executed (aborted, cancelled).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "state_bytes")]
    pub pending_memory: Vec<f32>,
}

impl EpisodeRec {
    /// The outstanding action was executed and reported: the state after it carries on.
    /// Returns the state before it (the one its step was taken from).
    pub fn take_reported(&mut self) -> Vec<f32> {
        self.pending = None;
        if self.pending_memory.is_empty() {
            return Vec::new();
        }
        std::mem::replace(&mut self.memory, std::mem::take(&mut self.pending_memory))
    }

    /// The outstanding action will never be executed: the state goes back to before it.
    /// Returns the action.
    pub fn withdraw_pending(&mut self) -> Option<u64> {
        self.pending_memory.clear();
        self.pending.take()
    }

    /// The episode runs a new version from here: a state of the old one's means nothing.
    pub fn reset_memory(&mut self) {
        self.memory.fill(0.0);
        self.pending_memory.clear();
    }

    /// The episode ended: its state is no longer needed.
    pub fn release_memory(&mut self) {
        self.memory = Vec::new();
        self.pending_memory = Vec::new();
    }
}

/// A recurrent state in the journal: its `f32`s as little-endian bytes in base64 (exact,
/// and under half the size of JSON numbers).
mod state_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(state: &[f32], s: S) -> Result<S::Ok, S::Error> {
        let bytes = super::f32_le_bytes(state);
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)?;
        if bytes.len() % 4 != 0 {
            return Err(serde::de::Error::custom(format!(
                "a recurrent state of {} bytes (not whole f32s)",
                bytes.len()
            )));
        }
        Ok(super::f32_from_le_bytes(&bytes))
    }
}

/// Values as little-endian `f32` bytes: how the journal keeps a recurrent state and the
/// ledger a transition's observations.
pub(crate) fn f32_le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// [`f32_le_bytes`] read back (a trailing partial value is ignored).
pub(crate) fn f32_from_le_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("four bytes")))
        .collect()
}
