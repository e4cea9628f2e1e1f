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
    /// For a version the gateway does not execute: the artifact the agent acts with (and
    /// records its actions from, `POST /v1/episodes/{id}/record`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalPolicy>,
}

/// Where an external version's artifact lies and how to check it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// Where agents fetch it (any scheme: `s3://`, `https://`, a path).
    pub uri: String,
    /// Its SHA-256, 64 hex digits.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A policy version the gateway does not execute: published by reference, acted with by
/// the agents' own model, trained by a trainer that need not be Strata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalPolicy {
    /// The artifact.
    pub artifact: Artifact,
    /// The config hash of what produced it (recorded with every sample it chooses).
    pub config_hash: String,
    /// The trainer that produced it (a name, e.g. `my-ppo@2.1`).
    pub trainer: String,
    /// Free metadata, kept as given.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl ExternalPolicy {
    /// Checks every field.
    ///
    /// # Errors
    /// Names the first bad field.
    pub fn validate(&self) -> Result<(), String> {
        let a = &self.artifact;
        if a.uri.trim().is_empty() {
            return Err("external.artifact.uri is empty".into());
        }
        if a.sha256.len() != 64 || !a.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "external.artifact.sha256 {:?} is not 64 hex digits",
                a.sha256
            ));
        }
        if self.config_hash.trim().is_empty() {
            return Err("external.config_hash is empty".into());
        }
        if self.trainer.trim().is_empty() {
            return Err("external.trainer is empty".into());
        }
        let size = serde_json::to_vec(&self.metadata).map_or(0, |m| m.len());
        if size > MAX_METADATA {
            return Err(format!(
                "external.metadata is {size} bytes of JSON (at most {MAX_METADATA})"
            ));
        }
        Ok(())
    }
}

/// The most JSON an external version's metadata may take.
pub const MAX_METADATA: usize = 64 * 1024;

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
/// (an untagged enum would say only that neither matched). Read straight from the
/// request, never through a `serde_json::Value` (a value per number: for a picture sent as
/// numbers, tens of thousands of allocations per request).
impl<'de> Deserialize<'de> for Observation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObservationVisitor)
    }
}

struct ObservationVisitor;

impl<'de> serde::de::Visitor<'de> for ObservationVisitor {
    type Value = Observation;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of numbers or an encoded array object")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Observation, A::Error> {
        Vec::<f32>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
            .map(Observation::Values)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Observation, A::Error> {
        use serde::de::Error;
        EncodedArray::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            .map(Observation::Encoded)
            .map_err(|e| A::Error::custom(format!("encoded observation: {e}")))
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

/// `POST /v1/operator/publish`: one of `checkpoint` or `external`. The version becomes
/// the canary candidate after the cooldown.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// A checkpoint directory (or run directory) written by `strata train` for the same
    /// env and network.
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// Or a version the gateway does not execute.
    #[serde(default)]
    pub external: Option<ExternalPolicy>,
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
    /// The version published by this request, when it published one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<u64>,
}

/// `GET /v1/trainer/admitted`: a page of the samples a trainer may train on.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmittedQuery {
    /// Samples from this id on: the previous page's `next_cursor` (from the first when
    /// absent).
    #[serde(default)]
    pub cursor: Option<u64>,
    /// Refused with a message that names `cursor` (the older parameter, whose meaning
    /// differed by one: read as before, it would skip a sample a page).
    #[serde(default)]
    pub after: Option<u64>,
    /// Samples on a page, at most 10,000 (1,000 when absent).
    #[serde(default)]
    pub limit: Option<usize>,
    /// The version the trainer trains from: samples' ages are counted from it (the newest
    /// version published when absent).
    #[serde(default)]
    pub learner_version: Option<u64>,
    /// Only samples of this bucket (`stable`, `canary`, ...); all when absent.
    #[serde(default)]
    pub bucket: Option<String>,
}

/// A sample a trainer may train on: the transition, its provenance and its admission.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AdmittedSample {
    /// Sample id (what `trained` reports).
    pub sample_id: u64,
    /// Episode.
    pub episode_id: u64,
    /// Trajectory (steps of one episode under one version).
    pub trajectory_id: u64,
    /// Step within the episode.
    pub step: u32,
    /// The version that chose the action.
    pub policy_version: u64,
    /// Its config hash.
    pub config_hash: String,
    /// The bucket.
    pub bucket: String,
    /// The observation acted on (the gateway's layout, images channels-last).
    pub observation: Vec<f32>,
    /// The action as recorded.
    pub action: serde_json::Value,
    /// The behaviour log-probability, if recorded.
    pub behaviour_log_prob: Option<f32>,
    /// Reward.
    pub reward: f32,
    /// The observation after the action.
    pub next_observation: Vec<f32>,
    /// A terminal state was reached.
    pub terminated: bool,
    /// The episode was cut.
    pub truncated: bool,
    /// When the action completed (ns since the Unix epoch).
    pub completed_at_ns: i64,
    /// `trained` (weight 1), `down_weighted`, or `needs_kl` (rule `decay` on a sample
    /// older than `learner_version`: its weight follows from the KL the trainer measures
    /// and reports).
    pub admission: String,
    /// The policy-loss weight under the rules in force (`null` for `needs_kl`).
    pub weight: Option<f32>,
}

/// A page of admitted samples.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdmittedPage {
    /// The samples, by id.
    pub samples: Vec<AdmittedSample>,
    /// Where the next page goes on from: pass it as `cursor`. One past the last sample
    /// looked at, or the `cursor` asked for when none was (0 on an empty ledger), so a
    /// trainer that follows it never skips a sample.
    pub next_cursor: u64,
    /// Whether samples beyond this page were stored when it was read.
    pub more: bool,
    /// The version ages were counted from.
    pub learner_version: u64,
    /// The admission rules applied.
    pub rules_version: u64,
    /// Their hash.
    pub rules_hash: String,
    /// Stored samples after `after` that were left out: invalidated, dropped by the rules,
    /// already trained on, or of Strata's own versions (no stored transition).
    pub left_out: u64,
}

/// `POST /v1/trainer/trained`: what a trainer trained on, into which version.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainedRequest {
    /// The version the training produced (published before reporting).
    pub version: u64,
    /// The version it trained from (ages are counted from it).
    pub base_version: u64,
    /// The samples it consumed. Each gets the decision the rules in force make for it.
    pub samples: Vec<u64>,
    /// For rule `decay`: the KL(producing || base) the trainer measured, by producing
    /// version (as a string key, JSON's only kind).
    #[serde(default)]
    pub kl: std::collections::BTreeMap<String, f64>,
}

/// What a `trained` report recorded.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TrainedResponse {
    /// Samples recorded as trained on with full weight.
    pub trained: u64,
    /// Samples recorded as down-weighted.
    pub down_weighted: u64,
    /// Samples the rules drop (recorded as dropped: they must not have been trained on).
    pub dropped: u64,
    /// Decision records written (one per run of consecutive samples).
    pub decisions: u64,
    /// The rules applied.
    pub rules_version: u64,
}
