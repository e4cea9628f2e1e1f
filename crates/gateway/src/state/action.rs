//! An action's record: what was answered, on what observation, where it stands.

use serde::{Deserialize, Serialize};

use crate::api::{ActResponse, Context};

/// Where an action stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    /// Issued, not reported.
    Pending,
    /// The agent timed out on it; replay may be allowed.
    TimedOut,
    /// Reported and stored as `sample`.
    Reported {
        /// The sample id.
        sample: u64,
    },
    /// A re-check aborted it (never executed).
    Aborted,
    /// Not executed: the episode awaits a human, or a forced switch replaced its version.
    Cancelled,
    /// An unsafe action that timed out: whether it happened is unknown.
    Unknown,
}

/// An issued action and what is needed to train on it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ActionRec {
    /// The answer given (returned again for the same key).
    pub answer: ActResponse,
    /// Episode.
    pub episode: u64,
    /// Idempotency key.
    pub key: String,
    /// Action type.
    pub action_type: String,
    /// The observation acted on.
    pub obs: Vec<f32>,
    /// Log-prob of the action.
    pub log_prob: f32,
    /// V(obs).
    pub value: f32,
    /// Env sequence at the act.
    pub env_seq: u64,
    /// What a re-check compares against.
    pub context: Option<Context>,
    /// Status.
    pub status: ActionStatus,
    /// For an action the agent chose with its own model and recorded: what it recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Recorded>,
}

/// An action an agent chose with its own model (`record`), as it recorded it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Recorded {
    /// The action, as JSON text.
    pub action: String,
    /// Its log-probability under the policy that chose it, if given.
    pub log_prob: Option<f32>,
    /// Why this record invalidated its trajectory, if it did.
    pub invalidated: Option<String>,
}
