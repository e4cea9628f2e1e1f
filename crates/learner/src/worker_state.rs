//! What a rollout worker needs to continue exactly where it stopped: the part of a
//! checkpoint each worker owns.

use strata_env::VecEnvSnapshot;
use strata_nn::SampleRng;

/// What a worker needs to continue exactly after a fragment (kept for checkpoints).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WorkerState {
    /// Per env group: env states, RNGs, counters and per-env running returns.
    pub envs: Vec<VecEnvSnapshot>,
    /// Observations the envs will act on next (normalised as the worker saw them), in env
    /// order.
    pub obs: Vec<f32>,
    /// Per env group: the action-sampling RNG.
    pub rngs: Vec<SampleRng>,
    /// Per env group: the gSDE exploration matrices in use (empty without gSDE).
    #[serde(default)]
    pub sde_noise: Vec<Vec<f32>>,
    /// A recurrent policy's state for each env's next step, in env order (empty for a
    /// feed-forward policy).
    #[serde(default)]
    pub memory: Vec<f32>,
    /// Whether each env's next step starts an episode (empty for a feed-forward policy).
    #[serde(default)]
    pub starts: Vec<bool>,
    /// Fragments completed.
    pub fragments: u64,
}
