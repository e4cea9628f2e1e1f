//! The vectorised environment: many instances of one env stepped in lock-step, with
//! time limits, same-step autoreset and per-env seeds derived from one run seed.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::{Env, EnvError, EnvSpec, NormalizerStats, RunningMeanStd, Space};

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
        }
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

/// A batch of environments stepped together. Object-safe: pick the env by name once, then
/// every call handles the whole batch.
pub trait VecEnv: Send {
    /// The (single) env's description.
    fn spec(&self) -> &EnvSpec;
    /// How many envs.
    fn num_envs(&self) -> usize;
    /// Seeds env `i` with `derive_seed(seed, i)`, resets all, writes the first observations.
    fn reset(&mut self, seed: u64, obs: &mut [f32]);
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
    /// Wrappers collect statistics moments only while training (default: on).
    fn set_training(&mut self, _training: bool) {}
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
}

/// [`VecEnv`] over `num_envs` instances of one concrete [`Env`] type (static dispatch on
/// the hot path).
pub struct Vectorized<E: Env> {
    envs: Vec<E>,
    rngs: Vec<EnvRng>,
    elapsed: Vec<u32>,
    episode_return: Vec<f64>,
    spec: EnvSpec,
    clipped: Vec<f32>,
}

impl<E: Env + Clone> Vectorized<E> {
    /// `num_envs` copies of `env`; call [`VecEnv::reset`] before stepping.
    pub fn new(env: E, num_envs: usize) -> Self {
        let spec = env.spec();
        let clipped = vec![0.0; spec.action_dim()];
        Vectorized {
            envs: vec![env; num_envs],
            rngs: (0..num_envs)
                .map(|i| EnvRng::seed_from_u64(derive_seed(0, i as u64)))
                .collect(),
            elapsed: vec![0; num_envs],
            episode_return: vec![0.0; num_envs],
            spec,
            clipped,
        }
    }
}

impl<E: Env> Vectorized<E> {
    fn check_actions(&self, actions: &[f32]) -> Result<(), EnvError> {
        let per_env = self.spec.action_dim();
        let expected = self.envs.len() * per_env;
        if actions.len() != expected {
            return Err(EnvError::ActionShape {
                env: self.spec.name.clone(),
                got: actions.len(),
                expected,
                num_envs: self.envs.len(),
                per_env,
            });
        }
        let bad = |index: usize, value: f32, reason: String| EnvError::BadAction {
            env: self.spec.name.clone(),
            index,
            value,
            reason,
        };
        for (k, &a) in actions.iter().enumerate() {
            let index = k / per_env;
            if !a.is_finite() {
                return Err(bad(index, a, "not a finite number".into()));
            }
            if let Space::Discrete { n } = self.spec.action_space {
                if a.fract() != 0.0 || a < 0.0 || a >= n as f32 {
                    return Err(bad(index, a, format!("expected an integer in 0..{n}")));
                }
            }
        }
        Ok(())
    }

    fn non_finite(&self, index: usize, what: &'static str, value: f64) -> EnvError {
        EnvError::NonFinite {
            env: self.spec.name.clone(),
            index,
            what,
            value,
            step: self.elapsed[index],
        }
    }
}

impl<E: Env> VecEnv for Vectorized<E> {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn num_envs(&self) -> usize {
        self.envs.len()
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        let obs_dim = self.spec.obs_dim();
        for (i, env) in self.envs.iter_mut().enumerate() {
            self.rngs[i] = EnvRng::seed_from_u64(derive_seed(seed, i as u64));
            env.reset(&mut self.rngs[i], &mut obs[i * obs_dim..(i + 1) * obs_dim]);
            self.elapsed[i] = 0;
            self.episode_return[i] = 0.0;
        }
    }

    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError> {
        self.check_actions(actions)?;
        let obs_dim = self.spec.obs_dim();
        let act_dim = self.spec.action_dim();
        out.episodes.clear();
        for i in 0..self.envs.len() {
            let action = &actions[i * act_dim..(i + 1) * act_dim];
            let action = match &self.spec.action_space {
                Space::Box { low, high } => {
                    for (k, c) in self.clipped.iter_mut().enumerate() {
                        *c = action[k].clamp(low[k], high[k]);
                    }
                    &self.clipped[..]
                }
                Space::Discrete { .. } => action,
            };
            let obs = &mut out.obs[i * obs_dim..(i + 1) * obs_dim];
            let transition = self.envs[i].step(action, obs);
            if let Some(v) = obs.iter().find(|v| !v.is_finite()) {
                return Err(self.non_finite(i, "observation", f64::from(*v)));
            }
            if !transition.reward.is_finite() {
                return Err(self.non_finite(i, "reward", transition.reward));
            }
            self.elapsed[i] += 1;
            self.episode_return[i] += transition.reward;
            out.rewards[i] = transition.reward as f32;
            out.terminated[i] = transition.terminated;
            // Gymnasium's TimeLimit: truncated whenever the limit is reached, even if the
            // same step also terminated (terminated then wins for bootstrapping).
            out.truncated[i] = self.elapsed[i] >= self.spec.max_episode_steps;
            if out.terminated[i] || out.truncated[i] {
                out.final_obs[i * obs_dim..(i + 1) * obs_dim].copy_from_slice(obs);
                out.episodes.push(EpisodeEnd {
                    env: i,
                    episode_return: self.episode_return[i],
                    length: self.elapsed[i],
                    terminated: transition.terminated,
                });
                self.envs[i].reset(&mut self.rngs[i], obs);
                self.elapsed[i] = 0;
                self.episode_return[i] = 0.0;
            }
        }
        Ok(())
    }

    fn snapshot(&self) -> VecEnvSnapshot {
        VecEnvSnapshot {
            slots: (0..self.envs.len())
                .map(|i| SlotSnapshot {
                    state: self.envs[i].save(),
                    rng: self.rngs[i].clone(),
                    elapsed: self.elapsed[i],
                    episode_return: self.episode_return[i],
                })
                .collect(),
            obs_rms: None,
            return_rms: None,
        }
    }

    fn restore(&mut self, snapshot: &VecEnvSnapshot) -> Result<(), EnvError> {
        if snapshot.slots.len() != self.envs.len() {
            return Err(EnvError::BadState {
                env: self.spec.name.clone(),
                reason: format!(
                    "snapshot holds {} envs, this vector has {}",
                    snapshot.slots.len(),
                    self.envs.len()
                ),
            });
        }
        for (i, slot) in snapshot.slots.iter().enumerate() {
            self.envs[i].load(&slot.state)?;
            self.rngs[i] = slot.rng.clone();
            self.elapsed[i] = slot.elapsed;
            self.episode_return[i] = slot.episode_return;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CartPole, Pendulum};

    #[test]
    fn derived_seeds_differ_per_env_and_per_run() {
        assert_ne!(derive_seed(1, 0), derive_seed(1, 1));
        assert_ne!(derive_seed(1, 0), derive_seed(2, 0));
        assert_eq!(derive_seed(5, 3), derive_seed(5, 3));
    }

    #[test]
    fn time_limit_truncates_and_keeps_final_observation() {
        let mut envs = Vectorized::new(Pendulum::default(), 2);
        let mut batch = StepBatch::new(envs.spec(), 2);
        envs.reset(3, &mut batch.obs);
        for step in 1..=200 {
            envs.step(&[0.0, 0.5], &mut batch).unwrap();
            assert_eq!(batch.truncated, vec![step == 200; 2]);
        }
        assert_eq!(batch.episodes.len(), 2);
        assert_eq!(batch.episodes[0].length, 200);
        // The final observation is the pre-reset one: a unit vector (cos, sin).
        let (c, s) = (batch.final_obs[0], batch.final_obs[1]);
        assert!((c * c + s * s - 1.0).abs() < 1e-5);
        assert_ne!(&batch.final_obs[..3], &batch.obs[..3]);
    }

    #[test]
    fn termination_autoresets_in_the_same_step() {
        let mut envs = Vectorized::new(CartPole::default(), 1);
        let mut batch = StepBatch::new(envs.spec(), 1);
        envs.reset(0, &mut batch.obs);
        let mut steps = 0;
        while batch.episodes.is_empty() {
            envs.step(&[1.0], &mut batch).unwrap();
            steps += 1;
        }
        assert!(batch.terminated[0] && !batch.truncated[0]);
        assert_eq!(batch.episodes[0].length, steps);
        // A fresh episode starts within (-0.05, 0.05); the final one left the bounds.
        assert!(batch.obs.iter().all(|v| v.abs() < 0.05));
        assert!(batch.final_obs[2].abs() > 0.2 || batch.final_obs[0].abs() > 2.4);
    }

    #[test]
    fn bad_actions_are_rejected_before_any_env_moves() {
        let mut envs = Vectorized::new(CartPole::default(), 2);
        let mut batch = StepBatch::new(envs.spec(), 2);
        envs.reset(0, &mut batch.obs);
        let before = envs.snapshot();
        for actions in [
            vec![1.0],
            vec![1.0, 2.0],
            vec![0.0, 0.5],
            vec![f32::NAN, 0.0],
        ] {
            let err = envs.step(&actions, &mut batch).unwrap_err();
            assert!(matches!(
                err,
                EnvError::ActionShape { .. } | EnvError::BadAction { .. }
            ));
        }
        assert_eq!(envs.snapshot(), before);
    }

    #[test]
    fn continuous_actions_are_clipped_at_the_env_boundary() {
        let mut a = Vectorized::new(Pendulum::default(), 1);
        let mut b = Vectorized::new(Pendulum::default(), 1);
        let mut batch_a = StepBatch::new(a.spec(), 1);
        let mut batch_b = batch_a.clone();
        a.reset(4, &mut batch_a.obs);
        b.reset(4, &mut batch_b.obs);
        let actions = [5.0_f32];
        a.step(&actions, &mut batch_a).unwrap();
        b.step(&[2.0], &mut batch_b).unwrap();
        assert_eq!(batch_a.obs, batch_b.obs);
        assert_eq!(batch_a.rewards, batch_b.rewards);
        assert_eq!(actions, [5.0], "the caller's action is left as sampled");
    }

    #[test]
    fn non_finite_observations_stop_with_a_clear_error() {
        let mut envs = Vectorized::new(CartPole::default(), 2);
        let mut batch = StepBatch::new(envs.spec(), 2);
        envs.reset(0, &mut batch.obs);
        let mut snap = envs.snapshot();
        // An angular velocity whose square overflows: the next state is NaN.
        snap.slots[1].state = vec![0.0, 0.0, 0.01, 1e200];
        envs.restore(&snap).unwrap();
        let err = envs.step(&[0.0, 0.0], &mut batch).unwrap_err();
        assert!(
            matches!(
                err,
                EnvError::NonFinite {
                    index: 1,
                    what: "observation",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("env 1 of `cartpole`"), "{err}");
    }

    #[test]
    fn snapshot_restore_continues_identically() {
        let mut a = Vectorized::new(CartPole::default(), 3);
        let mut batch = StepBatch::new(a.spec(), 3);
        a.reset(9, &mut batch.obs);
        for _ in 0..50 {
            a.step(&[1.0, 0.0, 1.0], &mut batch).unwrap();
        }
        let mut b = Vectorized::new(CartPole::default(), 3);
        b.restore(&a.snapshot()).unwrap();
        let mut batch_b = batch.clone();
        for k in 0..100 {
            let act = [(k % 2) as f32, 1.0, 0.0];
            a.step(&act, &mut batch).unwrap();
            b.step(&act, &mut batch_b).unwrap();
            assert_eq!(batch.obs, batch_b.obs);
        }
    }
}
