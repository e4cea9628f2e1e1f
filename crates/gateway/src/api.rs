//! The JSON bodies of the HTTP API (documented in `openapi.json`, served at `/openapi.json`).

use serde::{Deserialize, Deserializer, Serialize};

/// How dangerous it is to execute an action twice; declared per action type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffect {
    /// Only observes: safe to replay.
    ReadOnly,
    /// Executing twice equals executing once: safe to replay.
    Idempotent,
    /// The agent can ask the world whether it happened: replay only after the query says no.
    Queryable,
    /// May act twice: a timeout means "status unknown", never a blind replay.
    Unsafe,
}

impl SideEffect {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffect::ReadOnly => "read_only",
            SideEffect::Idempotent => "idempotent",
            SideEffect::Queryable => "queryable",
            SideEffect::Unsafe => "unsafe",
        }
    }
}

/// Which policy a new episode samples with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// The promoted version.
    Stable,
    /// The candidate under canary; its samples go to the canary bucket.
    Canary,
}

/// Where an episode stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeStatus {
    /// Acting.
    Active,
    /// A re-check saw an unexpected top-level element; resumes on an operator's confirm.
    AwaitingConfirmation,
    /// Ended by the agent or timed out.
    Ended,
}

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
}

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

/// An observation as a request carries it: a JSON array of numbers, or an array's bytes
/// ([`EncodedArray`], compact for pictures).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Observation {
    /// The values, flat (an image channels-last).
    Values(Vec<f32>),
    /// An array's raw bytes, base64-encoded.
    Encoded(EncodedArray),
}

/// An array of bytes sent as such: `[obs_dim]` values (images channels-last), or, for an
/// env whose observation is one image, that image in the env's own shape (`[4, 84, 84]`).
/// Only bytes: every byte string of the right length is a valid observation, so the
/// served OpenAPI spec can state exactly what is accepted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncodedArray {
    /// The element type.
    pub dtype: ArrayDtype,
    /// The array's shape.
    pub shape: Vec<usize>,
    /// Its bytes, row-major, in standard (padded) base64.
    pub base64: String,
}

/// The element type of an [`EncodedArray`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrayDtype {
    /// Bytes (pixels 0..=255).
    Uint8,
}

/// An array is values, an object is an encoded array: each with its own error messages
/// (an untagged enum would say only that neither matched).
impl<'de> Deserialize<'de> for Observation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        if value.is_object() {
            serde_json::from_value(value)
                .map(Observation::Encoded)
                .map_err(|e| D::Error::custom(format!("encoded observation: {e}")))
        } else {
            serde_json::from_value(value)
                .map(Observation::Values)
                .map_err(D::Error::custom)
        }
    }
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

/// `POST /v1/operator/publish`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// A checkpoint directory (or run directory) written by `strata train` for the same
    /// env and network.
    pub checkpoint: String,
}

/// `POST /v1/operator/canary`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanaryRequest {
    /// Fraction of new episodes that get the candidate, in [0, 1].
    pub fraction: f64,
}

/// `POST /v1/operator/promote` and `/rollback`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchRequest {
    /// The version (promote: the candidate when absent).
    #[serde(default)]
    pub version: Option<u64>,
    /// Switch running episodes too, invalidating their current trajectories.
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/operator/cooldown`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CooldownRequest {
    /// Seconds between publishing a version and new episodes sampling with it.
    pub seconds: f64,
}

/// `POST /v1/operator/invalidate`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvalidateRequest {
    /// A trajectory.
    #[serde(default)]
    pub trajectory: Option<u64>,
    /// Or the first sample of a range.
    #[serde(default)]
    pub first_sample: Option<u64>,
    /// The range's last sample (inclusive; `first_sample` when absent).
    #[serde(default)]
    pub last_sample: Option<u64>,
    /// Reason code (`operator` when absent).
    #[serde(default)]
    pub reason: Option<String>,
    /// Why, in words.
    pub text: String,
}

/// The release state (`GET /v1/status`, and the answer to every operator switch).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReleaseStatus {
    /// The version new stable episodes get.
    pub stable: u64,
    /// The candidate under canary, if any.
    pub candidate: Option<u64>,
    /// Fraction of new episodes that get the candidate.
    pub canary_fraction: f64,
    /// Cooldown in seconds.
    pub cooldown_secs: f64,
    /// Versions published and waiting out the cooldown: `(version, channel, seconds left)`.
    pub pending: Vec<(u64, Channel, f64)>,
    /// The newest version published.
    pub latest: u64,
    /// Open episodes.
    pub open_episodes: usize,
    /// The learner's updates so far.
    pub updates: u64,
    /// The admission-rules version in force (new versions are bound to it).
    pub rules_version: u64,
}
