//! An operator's requests: publish, canary, cooldown, promote and roll back, rules,
//! invalidate; and the release status they answer with.

use serde::{Deserialize, Serialize};

use super::{Channel, ExternalPolicy};

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
