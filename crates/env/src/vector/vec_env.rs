//! The vectorised-environment interface every vector of envs implements: built-in envs
//! in this process, Gymnasium envs in worker processes.

use super::{StepBatch, VecEnvSnapshot};
use crate::{EnvError, EnvSpec, Frame, NormalizerStats};

/// A batch of environments stepped together. Object-safe: pick the env by name once, then
/// every call handles the whole batch.
pub trait VecEnv: Send {
    /// The (single) env's description.
    fn spec(&self) -> &EnvSpec;
    /// How many envs.
    fn num_envs(&self) -> usize;
    /// Seeds env `i` with `derive_seed(seed, i)`, resets all, writes the first observations.
    ///
    /// # Errors
    /// Only envs in other processes fail to reset ([`EnvError::Gym`]).
    fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError>;
    /// Steps every env with its slice of `actions` (`num_envs * action_dim` values).
    ///
    /// Continuous actions are clipped to the action space here, at the env boundary; the
    /// caller keeps its unclipped sample. All actions are checked before any env moves.
    ///
    /// # Errors
    /// [`EnvError::ActionShape`] or [`EnvError::BadAction`] for bad actions (nothing
    /// stepped); [`EnvError::NonFinite`] when an env produced NaN/inf.
    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError>;
    /// Saves every env's state, RNG, counters and wrapper statistics.
    fn snapshot(&self) -> VecEnvSnapshot;
    /// Restores a [`VecEnv::snapshot`].
    ///
    /// # Errors
    /// [`EnvError::BadState`] when the snapshot is for another env or size.
    fn restore(&mut self, snapshot: &VecEnvSnapshot) -> Result<(), EnvError>;
    /// Whether [`VecEnv::restore`] continues the saved episodes bit for bit (built-in
    /// envs) or starts fresh ones (envs whose state lives in another process); after an
    /// inexact restore the caller reads the new observations with [`VecEnv::reobserve`].
    fn restores_exactly(&self) -> bool {
        true
    }
    /// After a failure, replaces only what failed (an env process that raised, died or
    /// hung), keeping the healthy parts, so that a [`VecEnv::reset`] can start fresh
    /// episodes on the same vector. Returns whether it did; `false` (the default) means the
    /// vector cannot mend itself and its owner replaces it whole.
    ///
    /// # Errors
    /// A replacement that cannot be started.
    fn revive(&mut self) -> Result<bool, EnvError> {
        Ok(false)
    }
    /// Wrappers collect statistics moments only while training (default: on).
    fn set_training(&mut self, _training: bool) {}
    /// Env `env`'s view for re-checks ([`crate::Env::context`]).
    fn context(&self, _env: usize, _current: bool) -> crate::EnvContext {
        crate::EnvContext::default()
    }
    /// Writes env `env`'s observation anew into `obs` (one row), outside a step
    /// ([`crate::Env::reobserve`]).
    fn reobserve(&mut self, env: usize, obs: &mut [f32]);
    /// The normalisation statistics in use (none without normalisation wrappers).
    fn normalizer(&self) -> NormalizerStats {
        NormalizerStats::default()
    }
    /// Replaces the normalisation statistics in use (published with a policy version).
    ///
    /// # Errors
    /// [`EnvError::BadState`] when the statistics do not fit.
    fn set_normalizer(&mut self, _stats: &NormalizerStats) -> Result<(), EnvError> {
        Ok(())
    }
    /// Moments of the raw data seen since the last call, for the statistics' owner to merge.
    fn take_normalizer_delta(&mut self) -> NormalizerStats {
        NormalizerStats::default()
    }
    /// Starts keeping env 0's pictures, one after every reset and step (after an autoreset,
    /// the new episode's first), for [`VecEnv::take_frames`].
    ///
    /// # Errors
    /// [`EnvError::NoPictures`] when the env does not draw itself.
    fn record(&mut self) -> Result<(), EnvError> {
        Err(EnvError::NoPictures {
            env: self.spec().name.clone(),
            reason: "it does not draw itself".into(),
        })
    }
    /// The pictures kept since the last call (none when not recording).
    ///
    /// # Errors
    /// When an env process's recording cannot be read.
    fn take_frames(&mut self) -> Result<Vec<Frame>, EnvError> {
        Ok(Vec::new())
    }
}
