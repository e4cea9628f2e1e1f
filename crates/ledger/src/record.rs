//! What the ledger stores: sample provenance (columnar, as produced), admission decisions,
//! invalidations, duplicates and generation bindings (row records).

use serde::{Deserialize, Serialize};

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// One sample's provenance: the six fields of DESIGN.md plus identity and outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    /// Unique within the ledger.
    pub sample_id: u64,
    /// The episode it belongs to (spans policy versions in async training).
    pub episode_id: u64,
    /// Steps of one episode under one policy version.
    pub trajectory_id: u64,
    /// Index of the step within its episode.
    pub step: u32,
    /// (1) Policy version that chose the action.
    pub policy_version: u64,
    /// (1) Config hash of that policy.
    pub config_hash: String,
    /// (2) When the action was issued (ns since the epoch).
    pub issued_at_ns: i64,
    /// (2) When its execution completed (ns since the epoch).
    pub completed_at_ns: i64,
    /// (3) Observations seen while the action executed.
    pub obs_count: u32,
    /// (3) Hash of those observations, in order.
    pub obs_hash: u64,
    /// (3) Per-dimension minimum.
    pub obs_min: Vec<f32>,
    /// (3) Per-dimension maximum.
    pub obs_max: Vec<f32>,
    /// (3) Per-dimension mean.
    pub obs_mean: Vec<f32>,
    /// (4) The environment's own clock or sequence number at completion.
    pub env_clock: u64,
    /// (5) The newest version sampling when this sample completed (whether a newer
    /// policy was already sampling is derived from it: [`SampleRecord::newer_policy_sampling`]).
    pub sampler_version: u64,
    /// Storage area (`train`, `stable`, `canary`, ...).
    pub bucket: String,
    /// The agent's idempotency key (deployed agents; simulators leave it empty).
    pub idempotency_key: Option<String>,
    /// Reward as trained on (after wrappers).
    pub reward: f32,
    /// The episode reached a terminal state.
    pub terminated: bool,
    /// The episode was cut (time limit, operator).
    pub truncated: bool,
    /// The episode's undiscounted raw return, on its last step.
    pub episode_return: Option<f64>,
    /// Whether the episode succeeded, on its last step, where the task defines success.
    pub success: Option<bool>,
}

impl SampleRecord {
    /// (5) Whether a newer policy than the one that chose the action was already sampling
    /// when it completed.
    pub fn newer_policy_sampling(&self) -> bool {
        self.sampler_version > self.policy_version
    }
}

/// Samples in columns, as the learner and the writer handle them. All rows share
/// `bucket`, `config_hash` and the observation width.
#[derive(Clone, Debug, Default, PartialEq)]
#[allow(missing_docs)] // columns of SampleRecord, documented there
pub struct SampleBatch {
    pub bucket: String,
    pub config_hash: String,
    pub obs_dim: usize,
    pub sample_id: Vec<u64>,
    pub episode_id: Vec<u64>,
    pub trajectory_id: Vec<u64>,
    pub step: Vec<u32>,
    pub policy_version: Vec<u64>,
    pub issued_at_ns: Vec<i64>,
    pub completed_at_ns: Vec<i64>,
    pub obs_count: Vec<u32>,
    pub obs_hash: Vec<u64>,
    pub obs_min: Vec<f32>,
    pub obs_max: Vec<f32>,
    pub obs_mean: Vec<f32>,
    pub env_clock: Vec<u64>,
    pub sampler_version: Vec<u64>,
    pub idempotency_key: Vec<Option<String>>,
    pub reward: Vec<f32>,
    pub terminated: Vec<bool>,
    pub truncated: Vec<bool>,
    pub episode_return: Vec<Option<f64>>,
    pub success: Vec<Option<bool>>,
}

impl SampleBatch {
    /// An empty batch for one bucket, config and observation width.
    pub fn new(bucket: &str, config_hash: &str, obs_dim: usize) -> Self {
        SampleBatch {
            bucket: bucket.to_string(),
            config_hash: config_hash.to_string(),
            obs_dim,
            ..SampleBatch::default()
        }
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.sample_id.len()
    }

    /// Whether it holds no rows.
    pub fn is_empty(&self) -> bool {
        self.sample_id.is_empty()
    }

    /// Drops every row, keeping the allocations.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Keeps the first `rows` rows.
    pub fn truncate(&mut self, rows: usize) {
        let od = self.obs_dim;
        self.sample_id.truncate(rows);
        self.episode_id.truncate(rows);
        self.trajectory_id.truncate(rows);
        self.step.truncate(rows);
        self.policy_version.truncate(rows);
        self.issued_at_ns.truncate(rows);
        self.completed_at_ns.truncate(rows);
        self.obs_count.truncate(rows);
        self.obs_hash.truncate(rows);
        self.obs_min.truncate(rows * od);
        self.obs_max.truncate(rows * od);
        self.obs_mean.truncate(rows * od);
        self.env_clock.truncate(rows);
        self.sampler_version.truncate(rows);
        self.idempotency_key.truncate(rows);
        self.reward.truncate(rows);
        self.terminated.truncate(rows);
        self.truncated.truncate(rows);
        self.episode_return.truncate(rows);
        self.success.truncate(rows);
    }

    /// Appends one record.
    ///
    /// # Errors
    /// When the record's observation summary does not have `obs_dim` values per statistic,
    /// or its config hash differs from the batch's.
    pub fn push(&mut self, r: &SampleRecord) -> Result<(), String> {
        let od = self.obs_dim;
        if r.obs_min.len() != od || r.obs_max.len() != od || r.obs_mean.len() != od {
            return Err(format!(
                "sample {}: observation summary has {}/{}/{} values per statistic, expected {od}",
                r.sample_id,
                r.obs_min.len(),
                r.obs_max.len(),
                r.obs_mean.len()
            ));
        }
        if r.config_hash != self.config_hash {
            return Err(format!(
                "sample {}: config hash {} in a batch of {}",
                r.sample_id, r.config_hash, self.config_hash
            ));
        }
        self.sample_id.push(r.sample_id);
        self.episode_id.push(r.episode_id);
        self.trajectory_id.push(r.trajectory_id);
        self.step.push(r.step);
        self.policy_version.push(r.policy_version);
        self.issued_at_ns.push(r.issued_at_ns);
        self.completed_at_ns.push(r.completed_at_ns);
        self.obs_count.push(r.obs_count);
        self.obs_hash.push(r.obs_hash);
        self.obs_min.extend_from_slice(&r.obs_min);
        self.obs_max.extend_from_slice(&r.obs_max);
        self.obs_mean.extend_from_slice(&r.obs_mean);
        self.env_clock.push(r.env_clock);
        self.sampler_version.push(r.sampler_version);
        self.idempotency_key.push(r.idempotency_key.clone());
        self.reward.push(r.reward);
        self.terminated.push(r.terminated);
        self.truncated.push(r.truncated);
        self.episode_return.push(r.episode_return);
        self.success.push(r.success);
        Ok(())
    }

    /// Row `i` as a record.
    pub fn row(&self, i: usize) -> SampleRecord {
        let od = self.obs_dim;
        let dims = i * od..(i + 1) * od;
        SampleRecord {
            sample_id: self.sample_id[i],
            episode_id: self.episode_id[i],
            trajectory_id: self.trajectory_id[i],
            step: self.step[i],
            policy_version: self.policy_version[i],
            config_hash: self.config_hash.clone(),
            issued_at_ns: self.issued_at_ns[i],
            completed_at_ns: self.completed_at_ns[i],
            obs_count: self.obs_count[i],
            obs_hash: self.obs_hash[i],
            obs_min: self.obs_min[dims.clone()].to_vec(),
            obs_max: self.obs_max[dims.clone()].to_vec(),
            obs_mean: self.obs_mean[dims].to_vec(),
            env_clock: self.env_clock[i],
            sampler_version: self.sampler_version[i],
            bucket: self.bucket.clone(),
            idempotency_key: self.idempotency_key[i].clone(),
            reward: self.reward[i],
            terminated: self.terminated[i],
            truncated: self.truncated[i],
            episode_return: self.episode_return[i],
            success: self.success[i],
        }
    }

    /// Appends rows `rows` of `other` (same bucket, config and width).
    pub fn extend_from(&mut self, other: &SampleBatch, rows: std::ops::Range<usize>) {
        let od = other.obs_dim;
        let (r, d) = (rows.clone(), rows.start * od..rows.end * od);
        self.sample_id
            .extend_from_slice(&other.sample_id[r.clone()]);
        self.episode_id
            .extend_from_slice(&other.episode_id[r.clone()]);
        self.trajectory_id
            .extend_from_slice(&other.trajectory_id[r.clone()]);
        self.step.extend_from_slice(&other.step[r.clone()]);
        self.policy_version
            .extend_from_slice(&other.policy_version[r.clone()]);
        self.issued_at_ns
            .extend_from_slice(&other.issued_at_ns[r.clone()]);
        self.completed_at_ns
            .extend_from_slice(&other.completed_at_ns[r.clone()]);
        self.obs_count
            .extend_from_slice(&other.obs_count[r.clone()]);
        self.obs_hash.extend_from_slice(&other.obs_hash[r.clone()]);
        self.obs_min.extend_from_slice(&other.obs_min[d.clone()]);
        self.obs_max.extend_from_slice(&other.obs_max[d.clone()]);
        self.obs_mean.extend_from_slice(&other.obs_mean[d]);
        self.env_clock
            .extend_from_slice(&other.env_clock[r.clone()]);
        self.sampler_version
            .extend_from_slice(&other.sampler_version[r.clone()]);
        self.idempotency_key
            .extend_from_slice(&other.idempotency_key[r.clone()]);
        self.reward.extend_from_slice(&other.reward[r.clone()]);
        self.terminated
            .extend_from_slice(&other.terminated[r.clone()]);
        self.truncated
            .extend_from_slice(&other.truncated[r.clone()]);
        self.episode_return
            .extend_from_slice(&other.episode_return[r.clone()]);
        self.success.extend_from_slice(&other.success[r]);
    }

    /// Checks that every column has the batch's length and values are usable.
    ///
    /// # Errors
    /// Names the first column or row that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.len();
        let lens = [
            ("episode_id", self.episode_id.len()),
            ("trajectory_id", self.trajectory_id.len()),
            ("step", self.step.len()),
            ("policy_version", self.policy_version.len()),
            ("issued_at_ns", self.issued_at_ns.len()),
            ("completed_at_ns", self.completed_at_ns.len()),
            ("obs_count", self.obs_count.len()),
            ("obs_hash", self.obs_hash.len()),
            ("obs_min", self.obs_min.len() / self.obs_dim.max(1)),
            ("obs_max", self.obs_max.len() / self.obs_dim.max(1)),
            ("obs_mean", self.obs_mean.len() / self.obs_dim.max(1)),
            ("env_clock", self.env_clock.len()),
            ("sampler_version", self.sampler_version.len()),
            ("idempotency_key", self.idempotency_key.len()),
            ("reward", self.reward.len()),
            ("terminated", self.terminated.len()),
            ("truncated", self.truncated.len()),
            ("episode_return", self.episode_return.len()),
            ("success", self.success.len()),
        ];
        if let Some((name, len)) = lens.iter().find(|(_, len)| *len != n) {
            return Err(format!("column {name} has {len} rows, sample_id has {n}"));
        }
        if self.bucket.is_empty() || !self.bucket.chars().all(bucket_char) {
            return Err(format!(
                "bucket {:?}: use letters, digits, '-' and '_'",
                self.bucket
            ));
        }
        for i in 0..n {
            if self.completed_at_ns[i] < self.issued_at_ns[i] {
                return Err(format!(
                    "sample {}: completed_at_ns {} is before issued_at_ns {}",
                    self.sample_id[i], self.completed_at_ns[i], self.issued_at_ns[i]
                ));
            }
            if !self.reward[i].is_finite() {
                return Err(format!(
                    "sample {}: reward is {}",
                    self.sample_id[i], self.reward[i]
                ));
            }
        }
        Ok(())
    }
}

/// Characters allowed in a bucket name (it becomes a path segment).
pub fn bucket_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
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
    pub bucket: String,
    /// Version that produced the samples.
    pub policy_version: u64,
    /// The learner's version when it consumed them.
    pub learner_version: u64,
    /// The update (training batch) number.
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
    pub bucket: String,
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
