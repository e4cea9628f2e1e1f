//! CartPole-v1, step for step as Gymnasium computes it.

use std::f64::consts::PI;

use rand::Rng;

use crate::{check_state, Env, EnvError, EnvRng, EnvSpec, Space, Transition};

const GRAVITY: f64 = 9.8;
const MASS_CART: f64 = 1.0;
const MASS_POLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASS_POLE + MASS_CART;
/// Half the pole's length, as in Gymnasium.
const LENGTH: f64 = 0.5;
const POLEMASS_LENGTH: f64 = MASS_POLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
const TAU: f64 = 0.02;
const THETA_THRESHOLD: f64 = 12.0 * 2.0 * PI / 360.0;
const X_THRESHOLD: f64 = 2.4;

/// CartPole-v1: push a cart left or right to keep a pole upright. Explicit Euler, f64 state.
#[derive(Clone, Debug, Default)]
pub struct CartPole {
    state: [f64; 4],
}

impl Env for CartPole {
    /// Success: the pole stayed up until the time limit.
    fn success(&self, terminated: bool) -> Option<bool> {
        Some(!terminated)
    }

    fn spec(&self) -> EnvSpec {
        let high = [
            (X_THRESHOLD * 2.0) as f32,
            f32::INFINITY,
            (THETA_THRESHOLD * 2.0) as f32,
            f32::INFINITY,
        ];
        EnvSpec {
            images: Vec::new(),
            name: "cartpole".into(),
            gymnasium_id: "CartPole-v1".into(),
            observation_space: Space::Box {
                low: high.iter().map(|h| -h).collect(),
                high: high.to_vec(),
            },
            action_space: Space::Discrete { n: 2 },
            max_episode_steps: 500,
            reward_threshold: 475.0,
        }
    }

    fn reset(&mut self, rng: &mut EnvRng, obs: &mut [f32]) {
        for s in &mut self.state {
            *s = rng.random_range(-0.05..0.05);
        }
        self.observe(obs);
    }

    #[inline]
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Transition {
        let [x, x_dot, theta, theta_dot] = self.state;
        let force = if action[0] == 1.0 {
            FORCE_MAG
        } else {
            -FORCE_MAG
        };
        let (sintheta, costheta) = theta.sin_cos();
        let temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
        let thetaacc = (GRAVITY * sintheta - costheta * temp)
            / (LENGTH * (4.0 / 3.0 - MASS_POLE * (costheta * costheta) / TOTAL_MASS));
        let xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
        self.state = [
            x + TAU * x_dot,
            x_dot + TAU * xacc,
            theta + TAU * theta_dot,
            theta_dot + TAU * thetaacc,
        ];
        let [x, _, theta, _] = self.state;
        let terminated = !(-X_THRESHOLD..=X_THRESHOLD).contains(&x)
            || !(-THETA_THRESHOLD..=THETA_THRESHOLD).contains(&theta);
        self.observe(obs);
        // Gymnasium 1.x rewards every step, the terminating one included.
        Transition {
            reward: 1.0,
            terminated,
        }
    }

    #[inline]
    fn render(&self) -> Option<crate::Frame> {
        Some(crate::render::cartpole(&self.state()))
    }

    fn observe(&self, obs: &mut [f32]) {
        for (o, s) in obs.iter_mut().zip(&self.state) {
            *o = *s as f32;
        }
    }

    fn state(&self) -> Vec<f64> {
        self.state.to_vec()
    }

    fn set_state(&mut self, state: &[f64]) -> Result<(), EnvError> {
        check_state("cartpole", state, 4)?;
        self.state.copy_from_slice(state);
        Ok(())
    }
}
