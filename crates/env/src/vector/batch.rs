//! What a vector of envs hands back: each step's batch (observations, rewards, flags,
//! final observations, ended episodes), the seeds of its envs, and its snapshots.

use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::latency::ExecSummary;
use crate::{EnvSpec, RunningMeanStd};

/// The RNG every environment samples its start states from.
pub type EnvRng = Xoshiro256PlusPlus;

/// Derives the seed of stream `index` from a run seed (SplitMix64 finaliser), so that env `i`
/// of a run always gets the same, well-mixed seed.
pub fn derive_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A finished episode, reported by the step that ended it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpisodeEnd {
    /// Which env of the vector.
    pub env: usize,
    /// Undiscounted sum of the env's own (unscaled) rewards.
    pub episode_return: f64,
    /// Steps in the episode.
    pub length: u32,
    /// True when it ended in a terminal state, false when truncated by the time limit.
    pub terminated: bool,
    /// Whether it succeeded, where the env defines success ([`Env::success`]).
    pub success: Option<bool>,
    /// Whether it is an episode as users count them. False for an end the env's wrappers
    /// make for training alone: a life lost in an Atari game that goes on (the game's end
    /// is counted, with the game's raw score and steps). Statistics count these only.
    #[serde(default = "counted_default")]
    pub counted: bool,
}

fn counted_default() -> bool {
    true
}

/// Seconds of one step's work on this side of the env boundary, beside the envs' own
/// (set by the vectors that do such work, Gymnasium's; zero otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTiming {
    /// Turning the env processes' observations (frames as bytes, values as floats) into
    /// observation rows.
    pub frames: f64,
    /// Checking each observation and reward, and summarising what each env observed (the
    /// ledger's hashes and summaries).
    pub summaries: f64,
}

/// The outputs of one vectorised step, preallocated once and reused.
#[derive(Clone, Debug)]
pub struct StepBatch {
    /// Next observations, `num_envs * obs_dim`, row-major (first obs of the new episode
    /// where one ended).
    pub obs: Vec<f32>,
    /// Rewards after any wrappers (e.g. scaled).
    pub rewards: Vec<f32>,
    /// Terminal state reached.
    pub terminated: Vec<bool>,
    /// Cut by the time limit.
    pub truncated: Vec<bool>,
    /// The last observation of an episode that ended this step (rows where
    /// `terminated || truncated`; other rows are stale).
    pub final_obs: Vec<f32>,
    /// Episodes that ended this step.
    pub episodes: Vec<EpisodeEnd>,
    /// Each env's own clock after this step: ticks since it was created, across episodes.
    pub clock: Vec<u64>,
    /// When set, filled with what each env observed while executing its action.
    pub exec: Option<ExecSummary>,
    /// Where this step's time went beside the envs themselves.
    pub timing: StepTiming,
}

impl StepBatch {
    /// Buffers sized for `num_envs` envs of `spec`.
    pub fn new(spec: &EnvSpec, num_envs: usize) -> Self {
        let obs = vec![0.0; num_envs * spec.obs_dim()];
        StepBatch {
            final_obs: obs.clone(),
            obs,
            rewards: vec![0.0; num_envs],
            terminated: vec![false; num_envs],
            truncated: vec![false; num_envs],
            episodes: Vec::with_capacity(num_envs),
            clock: vec![0; num_envs],
            exec: None,
            timing: StepTiming::default(),
        }
    }

    /// Also records execution summaries ([`StepBatch::exec`]).
    pub fn with_exec(mut self, spec: &EnvSpec) -> Self {
        self.exec = Some(ExecSummary::with_images(
            self.rewards.len(),
            spec.obs_dim(),
            &spec.images,
        ));
        self
    }

    /// Whether env `i`'s episode ended this step.
    pub fn done(&self, i: usize) -> bool {
        self.terminated[i] || self.truncated[i]
    }
}

/// The saved state of one env slot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotSnapshot {
    /// What [`Env::save`] returned.
    pub state: Vec<f64>,
    /// The slot's start-state RNG.
    pub rng: EnvRng,
    /// Steps taken in the current episode.
    pub elapsed: u32,
    /// Return so far in the current episode.
    pub episode_return: f64,
    /// The env's clock (ticks since creation).
    #[serde(default)]
    pub clock: u64,
    /// The action still executing under action latency (empty: none yet this episode).
    #[serde(default)]
    pub previous_action: Vec<f32>,
}

/// Everything needed to continue a vectorised env bit for bit (checkpoints, resume).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VecEnvSnapshot {
    /// One per env.
    pub slots: Vec<SlotSnapshot>,
    /// Observation-normalisation statistics, when that wrapper is on.
    pub obs_rms: Option<RunningMeanStd>,
    /// Reward-scaling statistics and running discounted returns, when that wrapper is on.
    pub return_rms: Option<(RunningMeanStd, Vec<f64>)>,
}
