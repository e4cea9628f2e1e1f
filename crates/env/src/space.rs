//! Observation and action spaces, and an environment's static description.

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

/// As Gymnasium writes spaces: `Discrete(2)`, `Box(-2.0, 2.0, (1,))` when every dimension
/// has the same bounds, `Box((3,))` with bounds per dimension otherwise.
impl std::fmt::Display for Space {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Space::Discrete { n } => format!("Discrete({n})"),
            Space::Box { low, high } => {
                let same = |v: &[f32]| v.windows(2).all(|w| w[0] == w[1]);
                match (low.first(), high.first()) {
                    (Some(lo), Some(hi)) if same(low) && same(high) => {
                        format!("Box({lo:?}, {hi:?}, ({},))", low.len())
                    }
                    _ => format!("Box(({},))", low.len()),
                }
            }
        };
        f.pad(&text)
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
    /// The images inside an observation row, in order (none for vector observations).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageSpan>,
}

/// Where an image lies in an observation row: `height x width x channels` values,
/// channels-last, from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageSpan {
    /// Its first value's index in the row.
    pub offset: usize,
    /// Rows of pixels.
    pub height: usize,
    /// Pixels per row.
    pub width: usize,
    /// Values per pixel.
    pub channels: usize,
}

impl ImageSpan {
    /// Values in the image.
    pub fn len(&self) -> usize {
        self.height * self.width * self.channels
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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

    /// Values in an observation summary ([`crate::ExecSummary`]): one per observation value
    /// outside images, one per image channel (a sample's provenance stays small however
    /// large its pictures).
    pub fn summary_dim(&self) -> usize {
        let pixels: usize = self.images.iter().map(ImageSpan::len).sum();
        let channels: usize = self.images.iter().map(|i| i.channels).sum();
        self.obs_dim() - pixels + channels
    }

    /// Where the images lie in an observation row: the values that are whole bytes, which
    /// buffers and the shared region keep as such.
    pub fn image_ranges(&self) -> Vec<std::ops::Range<usize>> {
        self.images
            .iter()
            .map(|i| i.offset..i.offset + i.len())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_are_written_as_gymnasium_writes_them() {
        assert_eq!(Space::Discrete { n: 2 }.to_string(), "Discrete(2)");
        assert_eq!(
            Space::uniform_box(1, -2.0, 2.0).to_string(),
            "Box(-2.0, 2.0, (1,))"
        );
        let open = Space::uniform_box(3, f32::NEG_INFINITY, f32::INFINITY);
        assert_eq!(open.to_string(), "Box(-inf, inf, (3,))");
        let mixed = Space::Box {
            low: vec![-1.0, 0.0],
            high: vec![1.0, 1.0],
        };
        assert_eq!(mixed.to_string(), "Box((2,))");
        assert_eq!(
            format!("{:<12}|", Space::Discrete { n: 3 }),
            "Discrete(3) |"
        );
    }

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
