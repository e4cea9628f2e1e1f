//! Perturbation wrappers: a fixed compute cost per env step (to model expensive simulators
//! in benchmarks) and injected faults (NaN, panic, hang) to test that the runtime contains
//! them. Both are configuration, not test doubles: the envs underneath are the real ones.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::{EnvError, EnvSpec, NormalizerStats, StepBatch, VecEnv, VecEnvSnapshot};

/// Busy-works `micros` per env per step, like a physics engine would.
pub struct StepCost<V> {
    inner: V,
    per_env: Duration,
}

impl<V: VecEnv> StepCost<V> {
    /// Adds `micros` microseconds of work per env step.
    pub fn new(inner: V, micros: u64) -> Self {
        StepCost {
            inner,
            per_env: Duration::from_micros(micros),
        }
    }
}

/// What fault to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// The env returns NaN observations.
    Nan,
    /// The env panics.
    Panic,
    /// The env stops responding for `hang_seconds`.
    Hang,
    /// The env's process crashes with a segmentation fault (Gymnasium envs only: a
    /// built-in env shares the trainer's process).
    Crash,
}

/// A fault injected once, at a given step of a given vectorised env.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    /// What happens.
    pub kind: FaultKind,
    /// At which `step` call of the vector (counted from 1).
    pub at_step: u64,
    /// How long a hang lasts.
    #[serde(default = "default_hang")]
    pub hang_seconds: f64,
}

fn default_hang() -> f64 {
    30.0
}

/// Injects a [`FaultPlan`] once.
pub struct InjectFault<V> {
    inner: V,
    plan: FaultPlan,
    steps: u64,
}

impl<V: VecEnv> InjectFault<V> {
    /// Wraps `inner`.
    pub fn new(inner: V, plan: FaultPlan) -> Self {
        InjectFault {
            inner,
            plan,
            steps: 0,
        }
    }
}

/// Forwards the [`VecEnv`] methods a wrapper does not change.
macro_rules! forward_vec_env {
    () => {
        fn spec(&self) -> &EnvSpec {
            self.inner.spec()
        }
        fn num_envs(&self) -> usize {
            self.inner.num_envs()
        }
        fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError> {
            self.inner.reset(seed, obs)
        }
        fn snapshot(&self) -> VecEnvSnapshot {
            self.inner.snapshot()
        }
        fn restore(&mut self, snapshot: &VecEnvSnapshot) -> Result<(), EnvError> {
            self.inner.restore(snapshot)
        }
        fn restores_exactly(&self) -> bool {
            self.inner.restores_exactly()
        }
        fn revive(&mut self) -> Result<bool, EnvError> {
            self.inner.revive()
        }
        fn set_training(&mut self, training: bool) {
            self.inner.set_training(training)
        }
        fn normalizer(&self) -> NormalizerStats {
            self.inner.normalizer()
        }
        fn set_normalizer(&mut self, stats: &NormalizerStats) -> Result<(), EnvError> {
            self.inner.set_normalizer(stats)
        }
        fn take_normalizer_delta(&mut self) -> NormalizerStats {
            self.inner.take_normalizer_delta()
        }
        fn context(&self, env: usize, current: bool) -> crate::EnvContext {
            self.inner.context(env, current)
        }
        fn reobserve(&mut self, env: usize, obs: &mut [f32]) {
            self.inner.reobserve(env, obs)
        }
        fn record(&mut self) -> Result<(), EnvError> {
            self.inner.record()
        }
        fn take_frames(&mut self) -> Result<Vec<crate::Frame>, EnvError> {
            self.inner.take_frames()
        }
    };
}

impl<V: VecEnv> VecEnv for StepCost<V> {
    forward_vec_env!();
    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError> {
        let until = Instant::now() + self.per_env * self.inner.num_envs() as u32;
        self.inner.step(actions, out)?;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

impl<V: VecEnv> VecEnv for InjectFault<V> {
    forward_vec_env!();
    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError> {
        self.steps += 1;
        if self.steps == self.plan.at_step {
            match self.plan.kind {
                FaultKind::Panic => panic!("injected fault: env panicked at step {}", self.steps),
                FaultKind::Hang => {
                    std::thread::sleep(Duration::from_secs_f64(self.plan.hang_seconds))
                }
                // An env in the trainer's process cannot crash alone; the config refuses
                // this for built-in envs, and a direct caller gets a contained panic.
                FaultKind::Crash => {
                    panic!("injected fault: a crash needs an env in a process of its own (gym:...)")
                }
                FaultKind::Nan => {
                    self.inner.step(actions, out)?;
                    out.obs[0] = f32::NAN;
                    return Err(EnvError::NonFinite {
                        env: self.spec().name.clone(),
                        index: 0,
                        what: "observation",
                        value: f64::NAN,
                        step: self.steps as u32,
                    });
                }
            }
        }
        self.inner.step(actions, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CartPole, Vectorized};

    #[test]
    fn step_cost_takes_at_least_its_time() {
        let mut envs = StepCost::new(Vectorized::new(CartPole::default(), 4), 250);
        let mut batch = StepBatch::new(envs.spec(), 4);
        envs.reset(0, &mut batch.obs).unwrap();
        let t = Instant::now();
        envs.step(&[0.0; 4], &mut batch).unwrap();
        assert!(t.elapsed() >= Duration::from_micros(1000));
    }

    #[test]
    fn faults_fire_once_at_their_step() {
        let plan = FaultPlan {
            kind: FaultKind::Nan,
            at_step: 2,
            hang_seconds: 0.0,
        };
        let mut envs = InjectFault::new(Vectorized::new(CartPole::default(), 1), plan);
        let mut batch = StepBatch::new(envs.spec(), 1);
        envs.reset(0, &mut batch.obs).unwrap();
        envs.step(&[0.0], &mut batch).unwrap();
        assert!(matches!(
            envs.step(&[0.0], &mut batch),
            Err(EnvError::NonFinite { .. })
        ));
        envs.step(&[0.0], &mut batch).unwrap();
        let plan = FaultPlan {
            kind: FaultKind::Panic,
            at_step: 1,
            hang_seconds: 0.0,
        };
        let mut envs = InjectFault::new(Vectorized::new(CartPole::default(), 1), plan);
        envs.reset(0, &mut batch.obs).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            envs.step(&[0.0], &mut batch)
        }));
        assert!(caught.is_err());
    }
}
