//! Reporting what an executed action did, and replaying one that timed out.

use serde::{Deserialize, Serialize};

use super::Observation;

/// What happened to an action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It ran; the report carries its result.
    #[default]
    Executed,
    /// The agent timed out waiting for it.
    Timeout,
}

/// The observations an action's execution produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecObservations {
    /// Observations (ticks) seen while executing.
    pub count: u32,
    /// A hash of them.
    pub hash: u64,
    /// Per-dimension minimum.
    pub min: Vec<f32>,
    /// Per-dimension maximum.
    pub max: Vec<f32>,
    /// Per-dimension mean.
    pub mean: Vec<f32>,
}

/// `POST /v1/actions/{id}/report`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportRequest {
    /// What happened.
    #[serde(default)]
    pub outcome: Outcome,
    /// When the action finished (ns since the Unix epoch); now when absent.
    #[serde(default)]
    pub completed_at_ns: Option<i64>,
    /// The environment's clock after the action.
    #[serde(default)]
    pub env_seq: Option<u64>,
    /// The observation after the action (required when executed).
    #[serde(default)]
    pub observation_after: Option<Observation>,
    /// What was observed while it executed; the observation after counts once when absent.
    #[serde(default)]
    pub during_execution: Option<ExecObservations>,
    /// Reward.
    #[serde(default)]
    pub reward: Option<f32>,
    /// Terminal state reached.
    #[serde(default)]
    pub terminated: bool,
    /// Cut by a time limit.
    #[serde(default)]
    pub truncated: bool,
    /// The episode's undiscounted return, on its last step.
    #[serde(default)]
    pub episode_return: Option<f64>,
    /// Whether the episode succeeded, on its last step.
    #[serde(default)]
    pub success: Option<bool>,
}

/// What a report did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    /// Stored, durable in the ledger's log.
    Stored,
    /// Already stored; this repeat was recorded as a duplicate.
    Duplicate,
    /// A timed-out action that may be replayed (`replay` says how).
    TimedOut,
    /// A timed-out unsafe action: recorded as status unknown, never replayed.
    StatusUnknown,
}

/// The answer to a report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReportResponse {
    /// What the report did.
    pub status: ReportStatus,
    /// The sample's id when stored or duplicate.
    pub sample_id: Option<u64>,
    /// For a timeout: `allowed`, `query_first` or `never`.
    pub replay: Option<String>,
}

/// `POST /v1/actions/{id}/replay`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// For a queryable action: what asking the world said (`not_happened` or `happened`).
    #[serde(default)]
    pub query_result: Option<String>,
}
