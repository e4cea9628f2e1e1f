//! Classic tasks with their velocities hidden, as rl-zoo3's `MaskVelocityWrapper` makes
//! them: the policy sees positions only and must remember to act well, which is what
//! recurrent policies are compared on.

use crate::{CartPole, Env, EnvContext, EnvError, EnvRng, EnvSpec, Pendulum, Space, Transition};

/// An env of which the policy sees only the observation values at `keep`.
#[derive(Clone, Debug)]
pub struct Masked<E> {
    inner: E,
    keep: &'static [usize],
    name: &'static str,
    gymnasium_id: &'static str,
    /// The inner env's whole observation.
    full: Vec<f32>,
}

impl Masked<CartPole> {
    /// CartPole seeing the cart's position and the pole's angle, not their velocities
    /// (rl-zoo3's `CartPoleNoVel-v1`).
    pub fn cartpole_no_vel() -> Self {
        Masked::new(
            CartPole::default(),
            &[0, 2],
            "cartpole-novel",
            "CartPoleNoVel-v1",
        )
    }
}

impl Masked<Pendulum> {
    /// Pendulum seeing its angle's cosine and sine, not its angular velocity (rl-zoo3's
    /// `PendulumNoVel-v1`).
    pub fn pendulum_no_vel() -> Self {
        Masked::new(
            Pendulum::default(),
            &[0, 1],
            "pendulum-novel",
            "PendulumNoVel-v1",
        )
    }
}

impl<E: Env> Masked<E> {
    fn new(
        inner: E,
        keep: &'static [usize],
        name: &'static str,
        gymnasium_id: &'static str,
    ) -> Self {
        let width = inner.spec().obs_dim();
        Masked {
            inner,
            keep,
            name,
            gymnasium_id,
            full: vec![0.0; width],
        }
    }

    fn show(&self, obs: &mut [f32]) {
        for (dst, &i) in obs.iter_mut().zip(self.keep) {
            *dst = self.full[i];
        }
    }
}

impl<E: Env> Env for Masked<E> {
    fn spec(&self) -> EnvSpec {
        let inner = self.inner.spec();
        let observation_space = match inner.observation_space {
            Space::Box { low, high } => Space::Box {
                low: self.keep.iter().map(|&i| low[i]).collect(),
                high: self.keep.iter().map(|&i| high[i]).collect(),
            },
            other => other,
        };
        EnvSpec {
            name: self.name.into(),
            gymnasium_id: self.gymnasium_id.into(),
            observation_space,
            ..inner
        }
    }

    fn reset(&mut self, rng: &mut EnvRng, obs: &mut [f32]) {
        self.inner.reset(rng, &mut self.full);
        self.show(obs);
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Transition {
        let t = self.inner.step(action, &mut self.full);
        self.show(obs);
        t
    }

    fn render(&self) -> Option<crate::Frame> {
        self.inner.render()
    }

    fn observe(&self, obs: &mut [f32]) {
        let mut full = vec![0.0; self.full.len()];
        self.inner.observe(&mut full);
        for (dst, &i) in obs.iter_mut().zip(self.keep) {
            *dst = full[i];
        }
    }

    fn state(&self) -> Vec<f64> {
        self.inner.state()
    }

    fn set_state(&mut self, state: &[f64]) -> Result<(), EnvError> {
        self.inner.set_state(state)?;
        self.inner.observe(&mut self.full);
        Ok(())
    }

    fn save(&self) -> Vec<f64> {
        self.inner.save()
    }

    fn load(&mut self, saved: &[f64]) -> Result<(), EnvError> {
        self.inner.load(saved)?;
        self.inner.observe(&mut self.full);
        Ok(())
    }

    fn success(&self, terminated: bool) -> Option<bool> {
        self.inner.success(terminated)
    }

    fn context(&self, current: bool) -> EnvContext {
        self.inner.context(current)
    }

    fn reobserve(&mut self, obs: &mut [f32]) {
        self.inner.reobserve(&mut self.full);
        self.show(obs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn the_masked_env_shows_the_kept_values_of_the_same_trajectory() {
        let (mut full, mut masked) = (CartPole::default(), Masked::cartpole_no_vel());
        assert_eq!(masked.spec().obs_dim(), 2);
        assert_eq!(masked.spec().max_episode_steps, 500);
        let (mut a, mut b) = ([0.0; 4], [0.0; 2]);
        full.reset(&mut EnvRng::seed_from_u64(3), &mut a);
        masked.reset(&mut EnvRng::seed_from_u64(3), &mut b);
        for step in 0..20 {
            let action = [(step % 2) as f32];
            let (ta, tb) = (full.step(&action, &mut a), masked.step(&action, &mut b));
            assert_eq!([a[0], a[2]], b);
            assert_eq!(ta, tb);
        }
        let mut seen = [0.0; 2];
        masked.observe(&mut seen);
        assert_eq!(seen, b);
        let mut p = Masked::pendulum_no_vel();
        let mut o = [9.0; 2];
        p.reset(&mut EnvRng::seed_from_u64(1), &mut o);
        assert!(
            (o[0] * o[0] + o[1] * o[1] - 1.0).abs() < 1e-5,
            "cos and sin: {o:?}"
        );
    }
}
