//! Episodes and actions: starting an episode, acting with the served version, recording
//! an action of the agent's own model, re-checking before executing.

use serde::{Deserialize, Serialize};

use super::{Channel, EpisodeStatus, ExternalPolicy, Observation, SideEffect};

/// `POST /v1/episodes`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartEpisodeRequest {
    /// A client-chosen key: starting twice with the same key returns the same episode.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// The answer to a start.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EpisodeInfo {
    /// Episode id.
    pub episode_id: u64,
    /// The version the episode is pinned to.
    pub policy_version: u64,
    /// Its config hash.
    pub config_hash: String,
    /// Stable or canary.
    pub channel: Channel,
    /// The ledger bucket its samples go to.
    pub bucket: strata_ledger::Bucket,
    /// The current trajectory (changes after an abort, a confirm or a forced switch).
    pub trajectory_id: u64,
    /// Status.
    pub status: EpisodeStatus,
    /// Steps reported so far.
    pub steps: u32,
    /// The action awaiting its report, if any.
    pub pending_action: Option<u64>,
    /// Observation width the policy expects.
    pub obs_dim: usize,
    /// Values per action.
    pub action_dim: usize,
    /// For a version the gateway does not execute: the artifact the agent acts with (and
    /// records its actions from, `POST /v1/episodes/{id}/record`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalPolicy>,
}

/// The most JSON a recorded action may take.
pub const MAX_RECORDED_ACTION: usize = 64 * 1024;

/// What the agent sees that a re-check compares against.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Context {
    /// The target position the action aims at.
    #[serde(default)]
    pub target: Option<Vec<f32>>,
    /// The UI's top-level elements, by name.
    #[serde(default)]
    pub ui_top_level: Option<Vec<String>>,
}

/// `POST /v1/episodes/{id}/act`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActRequest {
    /// The observation to act on.
    pub observation: Observation,
    /// The environment's own clock or sequence number.
    pub env_seq: u64,
    /// Unique per action: a retry with the same key gets the same answer.
    pub idempotency_key: String,
    /// The action type (declares the side-effect class); `default` when absent.
    #[serde(default)]
    pub action_type: Option<String>,
    /// What a later re-check compares against.
    #[serde(default)]
    pub context: Option<Context>,
}

/// The answer to an act.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ActResponse {
    /// Action id, to re-check, report or replay.
    pub action_id: u64,
    /// The action (a discrete action is its index).
    pub action: Vec<f32>,
    /// The policy version that chose it.
    pub policy_version: u64,
    /// Its config hash.
    pub config_hash: String,
    /// When the gateway issued it (ns since the Unix epoch).
    pub issued_at_ns: i64,
    /// The action type's side-effect class.
    pub side_effect: SideEffect,
    /// The trajectory it belongs to.
    pub trajectory_id: u64,
}

/// `POST /v1/episodes/{id}/record`: an action the agent chose with its own model.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordRequest {
    /// The observation it acted on.
    pub observation: Observation,
    /// The action, any JSON value but null (a vector, an index, a command).
    pub action: serde_json::Value,
    /// The version it actually acted with. Another than the episode's pinned version
    /// invalidates the episode's trajectory (reason `version_switch`).
    pub policy_version: u64,
    /// That version's config hash.
    pub config_hash: String,
    /// The action's log-probability under the policy that chose it, for off-policy
    /// corrections by the trainer.
    #[serde(default)]
    pub log_prob: Option<f32>,
    /// Or its probability, in (0, 1] (stored as its logarithm).
    #[serde(default)]
    pub probability: Option<f32>,
    /// When the agent's model issued the action (ns since the Unix epoch); now when absent.
    #[serde(default)]
    pub issued_at_ns: Option<i64>,
    /// The environment's own clock or sequence number.
    pub env_seq: u64,
    /// Unique per action: a retry with the same key gets the same answer.
    pub idempotency_key: String,
    /// The action type (declares the side-effect class); `default` when absent.
    #[serde(default)]
    pub action_type: Option<String>,
    /// What a later re-check compares against.
    #[serde(default)]
    pub context: Option<Context>,
}

/// The answer to a record.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RecordResponse {
    /// Action id, to re-check, report or replay, as for an act.
    pub action_id: u64,
    /// The version it was recorded with.
    pub policy_version: u64,
    /// Its config hash.
    pub config_hash: String,
    /// When it was issued (ns since the Unix epoch).
    pub issued_at_ns: i64,
    /// The action type's side-effect class.
    pub side_effect: SideEffect,
    /// The trajectory it belongs to.
    pub trajectory_id: u64,
    /// Why that trajectory was invalidated by this record (a version other than the
    /// episode's); the episode goes on in a new trajectory.
    pub invalidated: Option<String>,
}

/// `POST /v1/actions/{id}/recheck`: the agent's current view.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecheckRequest {
    /// Where the target is now.
    #[serde(default)]
    pub target: Option<Vec<f32>>,
    /// The UI's top-level elements now.
    #[serde(default)]
    pub ui_top_level: Option<Vec<String>>,
}

/// A re-check's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Execute the action.
    Proceed,
    /// Do not execute: the observation is stale; the trajectory was invalidated.
    Abort,
    /// Do not execute: the episode awaits an operator's confirmation.
    NeedsHuman,
}

/// The answer to a re-check.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecheckResponse {
    /// The verdict.
    pub verdict: Verdict,
    /// Why.
    pub reason: String,
}
