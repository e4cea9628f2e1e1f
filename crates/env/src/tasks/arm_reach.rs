//! `arm-reach`: move a 7-joint Franka Panda's flange to a target with joint-velocity
//! commands. `arm-reach-moving`: the target sometimes moves while an action executes, as a
//! person moving the workpiece would: after the observation is taken, so the next action
//! is chosen on a stale target unless a re-check compares [`Env::context`] now with the
//! observed one.

use rand::Rng;

use super::panda::{flange_position, HOME, JOINTS, QD_MAX, Q_MAX, Q_MIN};
use super::{seed_from_state, seed_to_state, unit_interval};
use crate::{
    check_state, derive_seed, Env, EnvContext, EnvError, EnvRng, EnvSpec, Space, Transition,
};

/// Control period (s).
const DT: f64 = 0.05;
/// Success: the flange within this distance of the target (m).
pub const TOLERANCE: f64 = 0.05;
/// Targets are reached by the flange at the ready pose's joints moved by up to this (rad).
const TARGET_SPREAD: f64 = 0.6;
/// Start poses: the ready pose's joints moved by up to this (rad).
const START_SPREAD: f64 = 0.1;
/// Weight of the squared action in the reward.
const ACTION_COST: f64 = 0.005;
/// `arm-reach-moving`: the chance per step that the target moves, and how far (m).
const MOVE_CHANCE: f64 = 0.02;
const MOVE_DISTANCE: f64 = 0.08;
const OBS_DIM: usize = JOINTS + 9;
const STATE_LEN: usize = JOINTS + 3 + 3 + 3;

/// The arm-reach task. State: joint angles, target, and (moving variant) the episode's
/// seed for target moves and the step count.
#[derive(Clone, Debug)]
pub struct ArmReach {
    q: [f64; JOINTS],
    target: [f64; 3],
    /// The target as the last observation showed it.
    observed_target: [f64; 3],
    moving: bool,
    move_seed: u64,
    steps: u64,
}

impl ArmReach {
    /// A still target (`arm-reach`) or a moving one (`arm-reach-moving`).
    pub fn new(moving: bool) -> Self {
        ArmReach {
            q: HOME,
            target: flange_position(&HOME),
            observed_target: flange_position(&HOME),
            moving,
            move_seed: 0,
            steps: 0,
        }
    }

    /// The target where it is now (a re-check compares it with the observed one).
    pub fn target(&self) -> [f64; 3] {
        self.target
    }

    fn distance(&self) -> f64 {
        let p = flange_position(&self.q);
        (0..3)
            .map(|k| (p[k] - self.target[k]).powi(2))
            .sum::<f64>()
            .sqrt()
    }

    /// Moves the target (moving variant) with a chance drawn from the episode's seed and
    /// the step: deterministic, and restored with the state.
    fn maybe_move_target(&mut self) {
        let h = derive_seed(self.move_seed, self.steps);
        let u = unit_interval(h);
        if u >= MOVE_CHANCE {
            return;
        }
        let dir = [
            unit_interval(derive_seed(h, 1)) - 0.5,
            unit_interval(derive_seed(h, 2)) - 0.5,
            unit_interval(derive_seed(h, 3)) - 0.5,
        ];
        let norm = dir.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-9);
        for (t, d) in self.target.iter_mut().zip(dir) {
            *t += d / norm * MOVE_DISTANCE;
        }
    }
}

impl Default for ArmReach {
    fn default() -> Self {
        Self::new(false)
    }
}

impl Env for ArmReach {
    fn spec(&self) -> EnvSpec {
        let mut low = vec![-1.0f32; JOINTS];
        let mut high = vec![1.0f32; JOINTS];
        low.extend([-2.0f32; 9]);
        high.extend([2.0f32; 9]);
        EnvSpec {
            images: Vec::new(),
            name: if self.moving {
                "arm-reach-moving"
            } else {
                "arm-reach"
            }
            .into(),
            gymnasium_id: "none (Strata task: Franka Panda reach)".into(),
            observation_space: Space::Box { low, high },
            action_space: Space::uniform_box(JOINTS, -1.0, 1.0),
            max_episode_steps: 100,
            reward_threshold: -1.0,
        }
    }

    fn reset(&mut self, rng: &mut EnvRng, obs: &mut [f32]) {
        let mut target_q = HOME;
        for j in 0..JOINTS {
            self.q[j] =
                (HOME[j] + rng.random_range(-START_SPREAD..START_SPREAD)).clamp(Q_MIN[j], Q_MAX[j]);
            target_q[j] = (HOME[j] + rng.random_range(-TARGET_SPREAD..TARGET_SPREAD))
                .clamp(Q_MIN[j], Q_MAX[j]);
        }
        self.target = flange_position(&target_q);
        self.observed_target = self.target;
        self.move_seed = rng.random();
        self.steps = 0;
        self.observe(obs);
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Transition {
        let mut effort = 0.0;
        for j in 0..JOINTS {
            let a = f64::from(action[j]).clamp(-1.0, 1.0);
            effort += a * a;
            self.q[j] = (self.q[j] + a * QD_MAX[j] * DT).clamp(Q_MIN[j], Q_MAX[j]);
        }
        self.steps += 1;
        let d = self.distance();
        self.observe(obs);
        self.observed_target = self.target;
        if self.moving && d >= TOLERANCE {
            self.maybe_move_target();
        }
        Transition {
            reward: -d - ACTION_COST * effort,
            terminated: d < TOLERANCE,
        }
    }

    fn observe(&self, obs: &mut [f32]) {
        for j in 0..JOINTS {
            // Joint angles scaled to [-1, 1] over their limits.
            obs[j] = (2.0 * (self.q[j] - Q_MIN[j]) / (Q_MAX[j] - Q_MIN[j]) - 1.0) as f32;
        }
        let p = flange_position(&self.q);
        for k in 0..3 {
            obs[JOINTS + k] = p[k] as f32;
            obs[JOINTS + 3 + k] = self.target[k] as f32;
            obs[JOINTS + 6 + k] = (self.target[k] - p[k]) as f32;
        }
        debug_assert_eq!(obs.len(), OBS_DIM);
    }

    fn state(&self) -> Vec<f64> {
        let mut s = self.q.to_vec();
        s.extend(self.target);
        s.extend(self.observed_target);
        s.extend(seed_to_state(self.move_seed));
        s.push(self.steps as f64);
        s
    }

    fn set_state(&mut self, state: &[f64]) -> Result<(), EnvError> {
        check_state("arm-reach", state, STATE_LEN)?;
        self.q.copy_from_slice(&state[..JOINTS]);
        self.target.copy_from_slice(&state[JOINTS..JOINTS + 3]);
        self.observed_target
            .copy_from_slice(&state[JOINTS + 3..JOINTS + 6]);
        self.move_seed = seed_from_state(&state[JOINTS + 6..]);
        self.steps = state[JOINTS + 8] as u64;
        Ok(())
    }

    fn success(&self, terminated: bool) -> Option<bool> {
        Some(terminated)
    }

    fn reobserve(&mut self, obs: &mut [f32]) {
        self.observed_target = self.target;
        self.observe(obs);
    }

    fn context(&self, current: bool) -> EnvContext {
        let t = if current {
            self.target
        } else {
            self.observed_target
        };
        EnvContext {
            target: Some(t.iter().map(|&x| x as f32).collect()),
            ui_top_level: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn reaching_the_target_terminates_with_success_and_limits_hold() {
        let mut env = ArmReach::new(false);
        let mut rng = EnvRng::seed_from_u64(3);
        let mut obs = vec![0.0; OBS_DIM];
        env.reset(&mut rng, &mut obs);
        // Saturated actions keep every joint inside its limits.
        for _ in 0..200 {
            env.step(&[1.0; JOINTS], &mut obs);
            for j in 0..JOINTS {
                assert!(env.q[j] >= Q_MIN[j] && env.q[j] <= Q_MAX[j]);
            }
            assert!(obs.iter().all(|x| x.is_finite()));
        }
        // Put the target at the flange: the next still step succeeds.
        env.target = flange_position(&env.q);
        let t = env.step(&[0.0; JOINTS], &mut obs);
        assert!(t.terminated);
        assert_eq!(env.success(t.terminated), Some(true));
        assert!(t.reward > -1e-9);
    }

    #[test]
    fn the_moving_target_moves_reproducibly_and_state_restores_it() {
        let mut env = ArmReach::new(true);
        let mut rng = EnvRng::seed_from_u64(5);
        let mut obs = vec![0.0; OBS_DIM];
        env.reset(&mut rng, &mut obs);
        let saved = env.state();
        let start = env.target();
        let mut moves = 0;
        let mut trace = Vec::new();
        for _ in 0..400 {
            let before = env.target();
            env.step(&[0.1; JOINTS], &mut obs);
            if env.target() != before {
                moves += 1;
                // It moved after the observation: the observation and the observed context
                // show the old target, the current context the new one.
                let old: Vec<f32> = before.iter().map(|&x| x as f32).collect();
                assert_eq!(&obs[JOINTS + 3..JOINTS + 6], old.as_slice());
                assert_eq!(env.context(false).target.unwrap(), old);
                assert_ne!(env.context(true).target.unwrap(), old);
            }
            trace.push(env.target());
        }
        assert!((2..=20).contains(&moves), "{moves} moves in 400 steps");
        let mut again = ArmReach::new(true);
        again.set_state(&saved).unwrap();
        assert_eq!(again.target(), start);
        for t in trace {
            again.step(&[0.1; JOINTS], &mut obs);
            assert_eq!(again.target(), t);
        }
    }
}
