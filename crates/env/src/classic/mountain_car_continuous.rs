//! MountainCarContinuous-v0, step for step as Gymnasium computes it.

use rand::Rng;

use crate::{check_state, Env, EnvError, EnvRng, EnvSpec, Space, Transition};

const MIN_ACTION: f32 = -1.0;
const MAX_ACTION: f32 = 1.0;
const MIN_POSITION: f64 = -1.2;
const MAX_POSITION: f64 = 0.6;
const MAX_SPEED: f64 = 0.07;
const GOAL_POSITION: f64 = 0.45;
const GOAL_VELOCITY: f64 = 0.0;
const POWER: f64 = 0.0015;

/// MountainCarContinuous-v0: drive an underpowered car up a hill.
///
/// Gymnasium stores this env's state as f32 after every step but as f64 right after reset,
/// and mixes f32 scalars with Python floats; under NumPy 2's promotion rules (NEP 50) a
/// Python float meeting an f32 scalar is rounded to f32 first. We reproduce those roundings
/// so trajectories match the reference to the last f32 bit.
#[derive(Clone, Debug, Default)]
pub struct MountainCarContinuous {
    position: f64,
    velocity: f64,
    /// True once a step has stored the state as f32 (false right after reset / set_state).
    stored_as_f32: bool,
}

impl Env for MountainCarContinuous {
    /// Success: the car reached the flag.
    fn success(&self, terminated: bool) -> Option<bool> {
        Some(terminated)
    }

    fn spec(&self) -> EnvSpec {
        EnvSpec {
            images: Vec::new(),
            name: "mountaincar-continuous".into(),
            gymnasium_id: "MountainCarContinuous-v0".into(),
            observation_space: Space::Box {
                low: vec![MIN_POSITION as f32, -MAX_SPEED as f32],
                high: vec![MAX_POSITION as f32, MAX_SPEED as f32],
            },
            action_space: Space::uniform_box(1, MIN_ACTION, MAX_ACTION),
            max_episode_steps: 999,
            reward_threshold: 90.0,
        }
    }

    fn reset(&mut self, rng: &mut EnvRng, obs: &mut [f32]) {
        self.position = rng.random_range(-0.6..-0.4);
        self.velocity = 0.0;
        self.stored_as_f32 = false;
        self.observe(obs);
    }

    #[inline]
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Transition {
        let raw = action[0];
        let clipped = !(MIN_ACTION..=MAX_ACTION).contains(&raw);
        // `min(max(a, -1.0), 1.0)` yields a Python float when it clips, an f32 otherwise.
        let force_term = if clipped {
            f64::from(raw.clamp(MIN_ACTION, MAX_ACTION)) * POWER
        } else {
            f64::from(raw * POWER as f32)
        };
        let hill_arg = if self.stored_as_f32 {
            f64::from(3.0_f32 * self.position as f32)
        } else {
            3.0 * self.position
        };
        let hill = 0.0025 * hill_arg.cos();
        let delta = if clipped {
            force_term - hill
        } else {
            f64::from(force_term as f32 - hill as f32)
        };
        let mut velocity = if self.stored_as_f32 {
            f64::from(self.velocity as f32 + delta as f32)
        } else {
            self.velocity + delta
        };
        velocity = velocity.clamp(-MAX_SPEED, MAX_SPEED);
        let mut position = if self.stored_as_f32 {
            f64::from(self.position as f32 + velocity as f32)
        } else {
            self.position + velocity
        };
        position = position.clamp(MIN_POSITION, MAX_POSITION);
        if position == MIN_POSITION && velocity < 0.0 {
            velocity = 0.0;
        }
        let goal = if self.stored_as_f32 {
            f64::from(GOAL_POSITION as f32)
        } else {
            GOAL_POSITION
        };
        let terminated = position >= goal && velocity >= GOAL_VELOCITY;
        let mut reward = if terminated { 100.0 } else { 0.0 };
        reward -= f64::from(raw).powi(2) * 0.1;
        self.position = f64::from(position as f32);
        self.velocity = f64::from(velocity as f32);
        self.stored_as_f32 = true;
        self.observe(obs);
        Transition { reward, terminated }
    }

    #[inline]
    fn render(&self) -> Option<crate::Frame> {
        Some(crate::render::mountain_car(&self.state()))
    }

    fn observe(&self, obs: &mut [f32]) {
        obs[0] = self.position as f32;
        obs[1] = self.velocity as f32;
    }

    fn state(&self) -> Vec<f64> {
        vec![self.position, self.velocity]
    }

    fn set_state(&mut self, state: &[f64]) -> Result<(), EnvError> {
        check_state("mountaincar-continuous", state, 2)?;
        self.position = state[0];
        self.velocity = state[1];
        self.stored_as_f32 = false;
        Ok(())
    }

    fn save(&self) -> Vec<f64> {
        vec![
            self.position,
            self.velocity,
            f64::from(u8::from(self.stored_as_f32)),
        ]
    }

    fn load(&mut self, saved: &[f64]) -> Result<(), EnvError> {
        check_state("mountaincar-continuous", saved, 3)?;
        self.set_state(&saved[..2])?;
        self.stored_as_f32 = saved[2] != 0.0;
        Ok(())
    }
}
