//! Many instances of one built-in env stepped in lock-step in this process, with time
//! limits, same-step autoreset, action checks and clipping at the env boundary.

use rand::SeedableRng;

use super::{derive_seed, EnvRng, EpisodeEnd, SlotSnapshot, StepBatch, VecEnv, VecEnvSnapshot};
use crate::{Env, EnvError, EnvSpec, Frame, Space};

/// [`VecEnv`] over `num_envs` instances of one concrete [`Env`] type (static dispatch on
/// the hot path).
pub struct Vectorized<E: Env> {
    envs: Vec<E>,
    rngs: Vec<EnvRng>,
    elapsed: Vec<u32>,
    episode_return: Vec<f64>,
    spec: EnvSpec,
    clipped: Vec<f32>,
    clock: Vec<u64>,
    latency: u32,
    /// Per env, the action applied last (valid where `has_previous`).
    previous: Vec<f32>,
    has_previous: Vec<bool>,
    /// Env 0's pictures since the last `take_frames`, when recording.
    frames: Option<Vec<Frame>>,
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
            clock: vec![0; num_envs],
            latency: 0,
            previous: vec![0.0; num_envs * spec.action_dim()],
            has_previous: vec![false; num_envs],
            frames: None,
            spec,
            clipped,
        }
    }

    /// Each action takes `ticks` env ticks to take effect (see [`crate::latency`]).
    pub fn with_action_latency(mut self, ticks: u32) -> Self {
        self.latency = ticks;
        self
    }
}

/// Checks an action batch before any env moves: its length, finiteness, and for a
/// Discrete space integer indices in range.
///
/// # Errors
/// [`EnvError::ActionShape`] or [`EnvError::BadAction`], naming the env.
pub(crate) fn check_actions(
    spec: &EnvSpec,
    num_envs: usize,
    actions: &[f32],
) -> Result<(), EnvError> {
    let per_env = spec.action_dim();
    let expected = num_envs * per_env;
    if actions.len() != expected {
        return Err(EnvError::ActionShape {
            env: spec.name.clone(),
            got: actions.len(),
            expected,
            num_envs,
            per_env,
        });
    }
    let bad = |index: usize, value: f32, reason: String| EnvError::BadAction {
        env: spec.name.clone(),
        index,
        value,
        reason,
    };
    for (k, &a) in actions.iter().enumerate() {
        let index = k / per_env;
        if !a.is_finite() {
            return Err(bad(index, a, "not a finite number".into()));
        }
        if let Space::Discrete { n } = spec.action_space {
            if a.fract() != 0.0 || a < 0.0 || a >= n as f32 {
                return Err(bad(index, a, format!("expected an integer in 0..{n}")));
            }
        }
    }
    Ok(())
}

/// Writes one env's action into `out`, clipped to a Box space's bounds (a Discrete index
/// as it is): what the env applies, while the caller keeps its unclipped sample.
pub(crate) fn clip_action(space: &Space, action: &[f32], out: &mut [f32]) {
    out.copy_from_slice(action);
    space.clip(out);
}

impl<E: Env> Vectorized<E> {
    /// Env 0's picture, kept when recording.
    fn keep_frame(&mut self, episode_start: bool) {
        if let (Some(frames), Some(env)) = (self.frames.as_mut(), self.envs.first()) {
            frames.extend(env.render().map(|f| Frame { episode_start, ..f }));
        }
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

    fn context(&self, env: usize, current: bool) -> crate::EnvContext {
        self.envs[env].context(current)
    }

    fn reobserve(&mut self, env: usize, obs: &mut [f32]) {
        self.envs[env].reobserve(obs);
    }

    fn num_envs(&self) -> usize {
        self.envs.len()
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError> {
        let obs_dim = self.spec.obs_dim();
        for (i, env) in self.envs.iter_mut().enumerate() {
            self.rngs[i] = EnvRng::seed_from_u64(derive_seed(seed, i as u64));
            env.reset(&mut self.rngs[i], &mut obs[i * obs_dim..(i + 1) * obs_dim]);
            self.elapsed[i] = 0;
            self.episode_return[i] = 0.0;
            self.has_previous[i] = false;
        }
        self.keep_frame(true);
        Ok(())
    }

    fn record(&mut self) -> Result<(), EnvError> {
        if self.envs.first().and_then(Env::render).is_none() {
            return Err(EnvError::NoPictures {
                env: self.spec.name.clone(),
                reason: "it does not draw itself".into(),
            });
        }
        self.frames.get_or_insert_with(Vec::new);
        Ok(())
    }

    fn take_frames(&mut self) -> Result<Vec<Frame>, EnvError> {
        Ok(self.frames.as_mut().map(std::mem::take).unwrap_or_default())
    }

    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError> {
        check_actions(&self.spec, self.envs.len(), actions)?;
        let obs_dim = self.spec.obs_dim();
        let act_dim = self.spec.action_dim();
        out.episodes.clear();
        for i in 0..self.envs.len() {
            let action = &actions[i * act_dim..(i + 1) * act_dim];
            let action = match &self.spec.action_space {
                Space::Box { .. } => {
                    clip_action(&self.spec.action_space, action, &mut self.clipped);
                    &self.clipped[..]
                }
                Space::Discrete { .. } => action,
            };
            let obs = &mut out.obs[i * obs_dim..(i + 1) * obs_dim];
            if let Some(exec) = out.exec.as_mut() {
                exec.start(i);
            }
            let mut reward = 0.0;
            let mut terminated = false;
            // Under latency the previous action keeps acting while the new one is on its way.
            let held = i * act_dim..(i + 1) * act_dim;
            let ticks = if self.has_previous[i] {
                self.latency
            } else {
                0
            };
            for tick in 0..=ticks {
                let applied = if tick < ticks {
                    &self.previous[held.clone()]
                } else {
                    action
                };
                let transition = self.envs[i].step(applied, obs);
                self.clock[i] += 1;
                if let Some(v) = obs.iter().find(|v| !v.is_finite()) {
                    let v = f64::from(*v);
                    return Err(self.non_finite(i, "observation", v));
                }
                if !transition.reward.is_finite() {
                    return Err(self.non_finite(i, "reward", transition.reward));
                }
                if let Some(exec) = out.exec.as_mut() {
                    exec.observe(i, obs);
                }
                reward += transition.reward;
                if transition.terminated {
                    terminated = true;
                    break;
                }
            }
            if let Some(exec) = out.exec.as_mut() {
                exec.finish(i);
            }
            self.previous[held].copy_from_slice(action);
            self.has_previous[i] = true;
            out.clock[i] = self.clock[i];
            self.elapsed[i] += 1;
            self.episode_return[i] += reward;
            out.rewards[i] = reward as f32;
            out.terminated[i] = terminated;
            // Gymnasium's TimeLimit: truncated whenever the limit is reached, even if the
            // same step also terminated (terminated then wins for bootstrapping).
            out.truncated[i] = self.elapsed[i] >= self.spec.max_episode_steps;
            if out.terminated[i] || out.truncated[i] {
                out.final_obs[i * obs_dim..(i + 1) * obs_dim].copy_from_slice(obs);
                out.episodes.push(EpisodeEnd {
                    env: i,
                    episode_return: self.episode_return[i],
                    length: self.elapsed[i],
                    terminated,
                    success: self.envs[i].success(terminated),
                    counted: true,
                });
                self.envs[i].reset(&mut self.rngs[i], obs);
                self.elapsed[i] = 0;
                self.episode_return[i] = 0.0;
                self.has_previous[i] = false;
            }
        }
        let started = out.terminated.first().copied().unwrap_or(false)
            || out.truncated.first().copied().unwrap_or(false);
        self.keep_frame(started);
        Ok(())
    }

    fn snapshot(&self) -> VecEnvSnapshot {
        let ad = self.spec.action_dim();
        VecEnvSnapshot {
            slots: (0..self.envs.len())
                .map(|i| SlotSnapshot {
                    state: self.envs[i].save(),
                    rng: self.rngs[i].clone(),
                    elapsed: self.elapsed[i],
                    episode_return: self.episode_return[i],
                    clock: self.clock[i],
                    previous_action: if self.has_previous[i] {
                        self.previous[i * ad..(i + 1) * ad].to_vec()
                    } else {
                        Vec::new()
                    },
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
            self.clock[i] = slot.clock;
            let ad = self.spec.action_dim();
            self.has_previous[i] = slot.previous_action.len() == ad;
            if self.has_previous[i] {
                self.previous[i * ad..(i + 1) * ad].copy_from_slice(&slot.previous_action);
            }
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
        envs.reset(3, &mut batch.obs).unwrap();
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
        envs.reset(0, &mut batch.obs).unwrap();
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
        envs.reset(0, &mut batch.obs).unwrap();
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
        a.reset(4, &mut batch_a.obs).unwrap();
        b.reset(4, &mut batch_b.obs).unwrap();
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
        envs.reset(0, &mut batch.obs).unwrap();
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
        a.reset(9, &mut batch.obs).unwrap();
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

    #[test]
    fn without_latency_the_summary_is_the_observation_and_the_clock_ticks_once() {
        let mut envs = Vectorized::new(CartPole::default(), 2);
        let mut batch = StepBatch::new(envs.spec(), 2).with_exec(envs.spec());
        envs.reset(1, &mut batch.obs).unwrap();
        for step in 1..=3u64 {
            envs.step(&[0.0, 1.0], &mut batch).unwrap();
            let exec = batch.exec.as_ref().unwrap();
            assert_eq!(exec.ticks, vec![1, 1]);
            assert_eq!(exec.min, batch.obs);
            assert_eq!(exec.max, batch.obs);
            assert_eq!(exec.mean, batch.obs);
            assert_eq!(batch.clock, vec![step, step]);
        }
    }

    #[test]
    fn under_latency_the_previous_action_acts_while_the_new_one_arrives() {
        let k = 2;
        let mut latent = Vectorized::new(Pendulum::default(), 1).with_action_latency(k);
        let mut plain = Vectorized::new(Pendulum::default(), 1);
        let spec = latent.spec().clone();
        let mut a = StepBatch::new(&spec, 1).with_exec(&spec);
        let mut b = StepBatch::new(&spec, 1);
        latent.reset(9, &mut a.obs).unwrap();
        plain.reset(9, &mut b.obs).unwrap();
        // First step of an episode: nothing is in flight, the action applies at once.
        latent.step(&[1.5], &mut a).unwrap();
        plain.step(&[1.5], &mut b).unwrap();
        assert_eq!(a.obs, b.obs);
        assert_eq!(a.clock, vec![1]);
        // Then each step: k ticks of the previous action, one of the new.
        latent.step(&[-2.0], &mut a).unwrap();
        let mut seen = Vec::new();
        let mut reward = 0.0;
        for action in [1.5, 1.5, -2.0] {
            plain.step(&[action], &mut b).unwrap();
            seen.push(b.obs.clone());
            reward += b.rewards[0];
        }
        assert_eq!(a.obs, b.obs);
        assert!((a.rewards[0] - reward).abs() < 1e-5);
        assert_eq!(a.clock, vec![1 + u64::from(k) + 1]);
        let exec = a.exec.as_ref().unwrap();
        assert_eq!(exec.ticks, vec![k + 1]);
        for d in 0..3 {
            let column: Vec<f32> = seen.iter().map(|o| o[d]).collect();
            let min = column.iter().copied().fold(f32::INFINITY, f32::min);
            let max = column.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!((exec.min[d], exec.max[d]), (min, max));
            assert!((exec.mean[d] - column.iter().sum::<f32>() / 3.0).abs() < 1e-6);
        }
        // The clock and the action in flight survive a snapshot.
        let snap = latent.snapshot();
        let mut copy = Vectorized::new(Pendulum::default(), 1).with_action_latency(k);
        copy.restore(&snap).unwrap();
        let mut c = a.clone();
        latent.step(&[0.3], &mut a).unwrap();
        copy.step(&[0.3], &mut c).unwrap();
        assert_eq!((a.obs, a.clock), (c.obs, c.clock));
    }
}
