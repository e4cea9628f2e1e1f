//! What a run reports: the metrics line per update and the summary. The counters that
//! survive a checkpoint, the time breakdown and the record of fragments lost are the
//! learner's ([`strata_learner::Progress`]), re-exported here.

use serde::{Deserialize, Serialize};
use strata_algo::{IsWeightStats, UpdateStats};
pub use strata_learner::{AdmissionCounts, InvalidFragment, Progress, TimeBreakdown};

/// One line of the metrics file, written after every update.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateRecord {
    /// Update index (1-based).
    pub update: u64,
    /// Policy version published by this update.
    pub policy_version: u64,
    /// Env steps so far.
    pub global_step: u64,
    /// Seconds of training so far (across resumes).
    pub wall_seconds: f64,
    /// Env steps per second over the whole run.
    pub env_steps_per_sec: f64,
    /// Episodes finished so far.
    pub episodes: u64,
    /// Mean return of the last `solve_window` finished episodes (None before the first).
    pub mean_return: Option<f64>,
    /// Mean length of the episodes finished during this update's rollout.
    pub mean_episode_length: Option<f64>,
    /// Smallest policy lag (learner version minus behaviour version) in this batch.
    pub policy_lag_min: u64,
    /// Mean policy lag over the batch's fragments.
    pub policy_lag_avg: f64,
    /// Largest policy lag in this batch.
    pub policy_lag_max: u64,
    /// The importance ratios of this batch's lag correction (absent when it was on-policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_weights: Option<IsWeightStats>,
    /// Fragments recorded invalid so far (worker failures, restarts).
    pub invalid_fragments: usize,
    /// Worker failures survived so far (each restarted its worker or env process).
    #[serde(default)]
    pub worker_faults: u64,
    /// What admission did with this batch.
    pub admission: AdmissionCounts,
    /// Where the time went so far (cumulative seconds).
    pub time: TimeBreakdown,
    /// The PPO statistics.
    #[serde(flatten)]
    pub ppo: UpdateStats,
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// It trained its budget (`train.total_steps`).
    #[default]
    Budget,
    /// It was solved, with `train.stop_when_solved`.
    Solved,
    /// It was asked to stop (Ctrl-C, SIGTERM, `q` in the monitor): resumable.
    Interrupted,
}

/// The run summary (`--summary-json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Why it stopped.
    #[serde(default)]
    pub stop: StopReason,
    /// The budget it was training to (`train.total_steps`).
    #[serde(default)]
    pub budget_steps: u64,
    /// Worker failures survived (each a restart with its fragment recorded invalid).
    #[serde(default)]
    pub worker_faults: u64,
    /// Env name.
    pub env: String,
    /// Run seed.
    pub seed: u64,
    /// Env steps taken.
    pub total_steps: u64,
    /// Training seconds (across resumes).
    pub wall_seconds: f64,
    /// `total_steps / wall_seconds`.
    pub env_steps_per_sec: f64,
    /// Training throughput: `total_steps` over the seconds not spent evaluating.
    #[serde(default)]
    pub train_steps_per_sec: f64,
    /// Mean return of the last `solve_window` episodes.
    pub final_mean_return: Option<f64>,
    /// Whether that mean reached the env's threshold at some update.
    pub solved: bool,
    /// Env steps when first solved (counted at the update that saw it).
    pub steps_to_solve: Option<u64>,
    /// Env steps the first solving policy had been trained on: the steps consumed when the
    /// newest version that collected the solving update's batch was published. Under policy
    /// lag the collecting version is older than the update, and `steps_to_solve` credits
    /// the run with steps that policy never used; this count is comparable across lags.
    #[serde(default)]
    pub steps_to_solve_trained: Option<u64>,
    /// Training seconds when first solved.
    pub seconds_to_solve: Option<f64>,
    /// Config hash of the run.
    pub config_hash: String,
    /// Last published policy version.
    pub policy_version: u64,
    /// Where the time went.
    pub time: TimeBreakdown,
}
