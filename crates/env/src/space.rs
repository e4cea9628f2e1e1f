use serde::{Deserialize, Serialize};

/// An observation or action space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Space {
    /// `n` choices, `0..n`; carried as one f32 holding the index.
    Discrete { n: usize },
    /// A box of f32 values with per-dimension bounds (may be infinite).
    Box { low: Vec<f32>, high: Vec<f32> },
}

impl Space {
    /// A box with the same bounds in every dimension.
    pub fn uniform_box(dim: usize, low: f32, high: f32) -> Self {
        Space::Box {
            low: vec![low; dim],
            high: vec![high; dim],
        }
    }

    /// Values per element: 1 for Discrete (the index), the dimension for Box.
    pub fn flat_dim(&self) -> usize {
        match self {
            Space::Discrete { .. } => 1,
            Space::Box { low, .. } => low.len(),
        }
    }

    /// Clips one element's values to a Box space's bounds, in place (a Discrete index is
    /// left as it is): what an env applies, and what a policy's caller gets.
    pub fn clip(&self, values: &mut [f32]) {
        if let Space::Box { low, high } = self {
            for ((v, lo), hi) in values.iter_mut().zip(low).zip(high) {
                *v = v.clamp(*lo, *hi);
            }
        }
    }

    /// Whether this is a Discrete space.
    pub fn is_discrete(&self) -> bool {
        matches!(self, Space::Discrete { .. })
    }
}

/// Static description of an environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnvSpec {
    /// Registered name (`cartpole`).
    pub name: String,
    /// The Gymnasium id it reproduces (`CartPole-v1`).
    pub gymnasium_id: String,
    /// Observation space (always a Box).
    pub observation_space: Space,
    /// Action space.
    pub action_space: Space,
    /// Time limit: an episode is truncated after this many steps.
    pub max_episode_steps: u32,
    /// Mean return over recent episodes at which the task counts as solved.
    pub reward_threshold: f64,
}

impl EnvSpec {
    /// Observation dimension.
    pub fn obs_dim(&self) -> usize {
        self.observation_space.flat_dim()
    }
    /// Values per action.
    pub fn action_dim(&self) -> usize {
        self.action_space.flat_dim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_bounds_box_values_and_leaves_discrete_indices() {
        let space = Space::Box {
            low: vec![-1.0, 0.0],
            high: vec![1.0, f32::INFINITY],
        };
        let mut values = [-3.0, 7.5];
        space.clip(&mut values);
        assert_eq!(values, [-1.0, 7.5]);
        let mut index = [4.0];
        Space::Discrete { n: 2 }.clip(&mut index);
        assert_eq!(index, [4.0]);
    }
}
