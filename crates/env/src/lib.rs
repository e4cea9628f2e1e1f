//! Environments for Strata, with Gymnasium semantics.
//!
//! An [`Env`] is one simulator instance: it resets from a seeded RNG and steps with one
//! action, reporting reward and termination. Time limits, autoreset and per-env seeding are
//! the job of the vectorised [`VecEnv`], built by [`make_vec_env`] from a registered name
//! (`cartpole`, `pendulum`, `acrobot`, `mountaincar-continuous`). Normalisation wrappers
//! ([`NormalizeObservation`], [`ScaleReward`]) wrap any `VecEnv`.
//!
//! ```
//! use strata_env::{make_vec_env, StepBatch};
//! let mut envs = make_vec_env("cartpole", 4).unwrap();
//! let mut batch = StepBatch::new(envs.spec(), envs.num_envs());
//! envs.reset(7, &mut batch.obs);
//! let actions = vec![1.0_f32; 4];
//! envs.step(&actions, &mut batch).unwrap();
//! assert_eq!(batch.rewards, vec![1.0; 4]);
//! ```
//!
//! # Terminology
//!
//! - **terminated**: the MDP reached a terminal state; the value after it is zero.
//! - **truncated**: the episode was cut (time limit); the value after it is *not* zero, so
//!   the learner bootstraps from the final observation kept in [`StepBatch::final_obs`].
//! - **autoreset**: a finished env is reset in the same `step` call; `obs` then holds the
//!   first observation of the next episode (Gymnasium's "same-step" mode).

mod classic;
mod error;
pub mod gym;
pub mod latency;
mod normalize;
mod perturb;
mod registry;
mod render;
mod seeds;
mod space;
pub mod tasks;
mod vector;

pub use classic::{Acrobot, CartPole, Masked, MountainCarContinuous, Pendulum};
pub use error::EnvError;
pub use latency::ExecSummary;
pub use normalize::{NormalizeObservation, NormalizerStats, RunningMeanStd, ScaleReward};
pub use perturb::{FaultKind, FaultPlan, InjectFault, StepCost};
pub use registry::{env_names, make_env, make_vec_env, make_vec_env_with_latency, spec_for};
pub use render::{read_frames, Frame, FrameReader};
pub use seeds::Stream;
pub use space::{EnvSpec, ImageSpan, Space};
pub use tasks::{ArmReach, UiForm};
pub use vector::{
    derive_seed, EnvRng, EpisodeEnd, SlotSnapshot, StepBatch, StepTiming, VecEnv, VecEnvSnapshot,
    Vectorized,
};

/// What one environment step produced, besides the observation written in place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    /// The reward, computed in f64 as the reference implementation does.
    pub reward: f64,
    /// Whether the MDP reached a terminal state.
    pub terminated: bool,
}

/// One environment instance with Gymnasium semantics (no time limit: the vector adds it).
pub trait Env: Send {
    /// Static description: name, spaces, time limit, solve threshold.
    fn spec(&self) -> EnvSpec;
    /// Samples a start state from `rng` and writes the first observation.
    fn reset(&mut self, rng: &mut EnvRng, obs: &mut [f32]);
    /// Applies `action` (a Discrete index stored as f32, or Box values, which the env treats
    /// exactly as Gymnasium does, out-of-range ones included) and writes the next observation.
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Transition;
    /// Writes the observation of the current state.
    fn observe(&self, obs: &mut [f32]);
    /// The full internal physical state, as Gymnasium's `env.unwrapped.state`.
    fn state(&self) -> Vec<f64>;
    /// Replaces the internal state.
    ///
    /// # Errors
    /// [`EnvError::BadState`] when `state` has the wrong length or is not finite.
    fn set_state(&mut self, state: &[f64]) -> Result<(), EnvError>;
    /// Everything needed to continue bit for bit (defaults to [`Env::state`]).
    fn save(&self) -> Vec<f64> {
        self.state()
    }
    /// Restores what [`Env::save`] returned.
    ///
    /// # Errors
    /// [`EnvError::BadState`] when `saved` does not fit.
    fn load(&mut self, saved: &[f64]) -> Result<(), EnvError> {
        self.set_state(saved)
    }
    /// Whether an episode that just ended succeeded (`terminated`: it reached a terminal
    /// state), for tasks that define success; `None` otherwise.
    fn success(&self, _terminated: bool) -> Option<bool> {
        None
    }
    /// What a deployed agent's re-check compares: the world as the last observation showed
    /// it (`current = false`) or as it is now (`current = true`; a target may have moved or
    /// a popup appeared since). Empty for tasks without such a view.
    fn context(&self, _current: bool) -> EnvContext {
        EnvContext::default()
    }
    /// Observes again, outside a step (an agent whose action was aborted looks anew): the
    /// current view becomes the observed one.
    fn reobserve(&mut self, obs: &mut [f32]) {
        self.observe(obs);
    }
    /// A picture of the current state (Gymnasium's `rgb_array`), for envs that draw
    /// themselves; `None` otherwise.
    fn render(&self) -> Option<Frame> {
        None
    }
}

/// The part of the world a re-check compares (see [`Env::context`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvContext {
    /// Where the target is.
    pub target: Option<Vec<f32>>,
    /// The UI's top-level elements, by name.
    pub ui_top_level: Option<Vec<String>>,
}

/// Checks a state vector's length and finiteness for [`Env::set_state`].
pub(crate) fn check_state(env: &str, state: &[f64], expected: usize) -> Result<(), EnvError> {
    if state.len() != expected {
        return Err(EnvError::BadState {
            env: env.to_string(),
            reason: format!("expected {expected} values, got {}", state.len()),
        });
    }
    if let Some(i) = state.iter().position(|v| !v.is_finite()) {
        return Err(EnvError::BadState {
            env: env.to_string(),
            reason: format!("value {i} is not finite ({})", state[i]),
        });
    }
    Ok(())
}
