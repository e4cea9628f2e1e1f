//! What the ledger stores: sample provenance (columnar, as produced), admission decisions,
//! invalidations, duplicates and generation bindings (row records).

use serde::{Deserialize, Serialize};

use crate::bucket::Bucket;

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// What admission did with a run of samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Trained on with full weight.
    Trained,
    /// Trained on with a weight below one.
    DownWeighted,
    /// Not trained on (recorded, kept).
    Dropped,
}

impl DecisionKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Trained => "trained",
            DecisionKind::DownWeighted => "down_weighted",
            DecisionKind::Dropped => "dropped",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Trained, Self::DownWeighted, Self::Dropped]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// The admission decision for consecutive sample ids `first_sample..=last_sample` (one
/// fragment of one policy version), with the facts it was made from so it can be recomputed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// First sample id covered.
    pub first_sample: u64,
    /// Last sample id covered (inclusive).
    pub last_sample: u64,
    /// Bucket of the samples.
    pub bucket: Bucket,
    /// Version that produced the samples.
    pub policy_version: u64,
    /// The learner's version when it consumed them.
    pub learner_version: u64,
    /// The update (training batch) number; for a trainer that is not Strata, the version
    /// its update produced.
    pub update: u64,
    /// Admission-rules version in force.
    pub rules_version: u64,
    /// Hash of those rules.
    pub rules_hash: String,
    /// What was done.
    pub decision: DecisionKind,
    /// Weight applied to the policy loss (0 when dropped).
    pub weight: f32,
    /// Estimated KL(producing || current) on the samples' own observations.
    pub kl: Option<f64>,
    /// `learner_version - policy_version`.
    pub age_versions: u64,
    /// Seconds from the last sample's completion to the decision.
    pub age_seconds: f64,
    /// When the decision was made (ns since the epoch).
    pub decided_at_ns: i64,
}

/// Whether `text` says nothing: empty, or ASCII whitespace alone (an invalidation's text
/// must say why; the gateway's API spec states the same rule as a pattern).
pub fn is_blank(text: &str) -> bool {
    text.chars()
        .all(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'))
}

/// Why something was invalidated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// The policy version changed within a trajectory.
    VersionSwitch,
    /// The environment sequence went backwards or observations could not be realigned.
    ObservationMisaligned,
    /// The target moved beyond the re-check threshold before the action executed.
    ObservationStale,
    /// A person interrupted the episode.
    HumanInterrupt,
    /// The producing worker failed or was restarted mid-fragment.
    WorkerFailure,
    /// Written after the checkpoint a run was resumed from, then superseded.
    AbandonedByResume,
    /// An operator's decision, with the reason in the text.
    Operator,
    /// An unsafe action timed out: whether it happened is unknown, so it is never replayed
    /// and the trajectory cannot be trusted.
    StatusUnknown,
}

impl ReasonCode {
    /// Every code.
    pub const ALL: [ReasonCode; 8] = [
        ReasonCode::VersionSwitch,
        ReasonCode::ObservationMisaligned,
        ReasonCode::ObservationStale,
        ReasonCode::HumanInterrupt,
        ReasonCode::WorkerFailure,
        ReasonCode::AbandonedByResume,
        ReasonCode::Operator,
        ReasonCode::StatusUnknown,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::VersionSwitch => "version_switch",
            ReasonCode::ObservationMisaligned => "observation_misaligned",
            ReasonCode::ObservationStale => "observation_stale",
            ReasonCode::HumanInterrupt => "human_interrupt",
            ReasonCode::WorkerFailure => "worker_failure",
            ReasonCode::AbandonedByResume => "abandoned_by_resume",
            ReasonCode::Operator => "operator",
            ReasonCode::StatusUnknown => "status_unknown",
        }
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// Lists the known codes.
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown reason code {s:?}; known: {}", known.join(", "))
            })
    }
}

/// What an invalidation covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Sample ids `first..=last`.
    Samples {
        /// First id.
        first: u64,
        /// Last id (inclusive).
        last: u64,
    },
    /// Every sample of one trajectory, before and after the record.
    Trajectory {
        /// The trajectory.
        id: u64,
    },
}

/// An append-only invalidation: references samples, deletes nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Invalidation {
    /// What it covers.
    pub target: Target,
    /// Why (code).
    pub reason: ReasonCode,
    /// Why (words).
    pub text: String,
    /// Who: a component name or an operator.
    pub author: String,
    /// Admission-rules version in force.
    pub rules_version: u64,
    /// When (ns since the epoch).
    pub at_ns: i64,
}

/// A repeated idempotency key: the repeat is not stored as a sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DuplicateRecord {
    /// The key.
    pub idempotency_key: String,
    /// The sample stored under it first.
    pub original_sample: u64,
    /// Bucket of the repeat.
    pub bucket: Bucket,
    /// When the repeat arrived (ns since the epoch).
    pub at_ns: i64,
}

/// A policy version bound to its admission rules (on publish, promote or rollback).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenerationRecord {
    /// The policy version.
    pub policy_version: u64,
    /// Its config hash.
    pub config_hash: String,
    /// Rules version in force with it.
    pub rules_version: u64,
    /// Their hash.
    pub rules_hash: String,
    /// `publish`, `promote` or `rollback`.
    pub operation: String,
    /// Who did it.
    pub author: String,
    /// When (ns since the epoch).
    pub at_ns: i64,
}
