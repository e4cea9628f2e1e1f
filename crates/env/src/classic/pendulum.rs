//! Pendulum-v1, step for step as Gymnasium computes it.

use std::f64::consts::PI;

use rand::Rng;

use crate::{check_state, Env, EnvError, EnvRng, EnvSpec, Space, Transition};

const MAX_SPEED: f64 = 8.0;
const MAX_TORQUE: f32 = 2.0;
const DT: f64 = 0.05;
const G: f64 = 10.0;
const M: f64 = 1.0;
const L: f64 = 1.0;

/// Pendulum-v1: swing a pendulum up and hold it with bounded torque. f64 state; the torque
/// terms are computed in f32 as NumPy 2 does for an f32 action.
#[derive(Clone, Debug, Default)]
pub struct Pendulum {
    theta: f64,
    theta_dot: f64,
}

/// Python's `((x + pi) % (2 pi)) - pi` (floored modulo, unlike Rust's `%`).
fn angle_normalize(x: f64) -> f64 {
    (x + PI).rem_euclid(2.0 * PI) - PI
}

impl Env for Pendulum {
    fn spec(&self) -> EnvSpec {
        EnvSpec {
            images: Vec::new(),
            name: "pendulum".into(),
            gymnasium_id: "Pendulum-v1".into(),
            observation_space: Space::Box {
                low: vec![-1.0, -1.0, -MAX_SPEED as f32],
                high: vec![1.0, 1.0, MAX_SPEED as f32],
            },
            action_space: Space::uniform_box(1, -MAX_TORQUE, MAX_TORQUE),
            max_episode_steps: 200,
            reward_threshold: -200.0,
        }
    }

    fn reset(&mut self, rng: &mut EnvRng, obs: &mut [f32]) {
        self.theta = rng.random_range(-PI..PI);
        self.theta_dot = rng.random_range(-1.0..1.0);
        self.observe(obs);
    }

    #[inline]
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Transition {
        let (th, thdot) = (self.theta, self.theta_dot);
        let u = action[0].clamp(-MAX_TORQUE, MAX_TORQUE);
        // `0.001 * u**2` and `3.0 / (m l^2) * u` stay f32 under NumPy 2's promotion rules.
        let torque_cost = f64::from(0.001_f32 * (u * u));
        let torque_acc = f64::from((3.0 / (M * L * L)) as f32 * u);
        let costs = angle_normalize(th).powi(2) + 0.1 * thdot.powi(2) + torque_cost;
        let new_thdot = thdot + (3.0 * G / (2.0 * L) * th.sin() + torque_acc) * DT;
        let new_thdot = new_thdot.clamp(-MAX_SPEED, MAX_SPEED);
        self.theta = th + new_thdot * DT;
        self.theta_dot = new_thdot;
        self.observe(obs);
        Transition {
            reward: -costs,
            terminated: false,
        }
    }

    #[inline]
    fn render(&self) -> Option<crate::Frame> {
        Some(crate::render::pendulum(&self.state()))
    }

    fn observe(&self, obs: &mut [f32]) {
        let (s, c) = self.theta.sin_cos();
        obs[0] = c as f32;
        obs[1] = s as f32;
        obs[2] = self.theta_dot as f32;
    }

    fn state(&self) -> Vec<f64> {
        vec![self.theta, self.theta_dot]
    }

    fn set_state(&mut self, state: &[f64]) -> Result<(), EnvError> {
        check_state("pendulum", state, 2)?;
        self.theta = state[0];
        self.theta_dot = state[1];
        Ok(())
    }
}
