//! A trainer's requests: admitted samples by cursor, and what it trained on.

use serde::{Deserialize, Serialize};

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
