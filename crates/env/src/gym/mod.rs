//! Gymnasium environments in Python worker processes, as a [`VecEnv`](crate::VecEnv).
//!
//! [`GymVecEnv`] runs `num_envs` envs in processes of `envs_per_process` each. Every
//! process steps all its envs per wake-up and exchanges actions, observations, rewards,
//! flags, final observations and env clocks with Rust through a shared-memory region of
//! its own; a step is a sequence number each way in the region, which the other side spins
//! on briefly, and a wake-up byte on a Unix socket. Nothing is pickled on the hot path.
//! [`describe`] asks Python what an env looks like ([`GymLayout`]: how its observation is
//! flattened, its action space, time limit and solve threshold).
//!
//! Faults are contained: an env that raises, returns NaN, crashes its process or hangs
//! makes the vector fail with an error naming the process and what happened; its process
//! group is killed and reaped, and the caller (a rollout worker) starts fresh envs. The
//! processes die with the trainer (a parent-death signal) and the regions are anonymous
//! memory files, so a killed trainer leaves neither processes nor shared memory behind.
//!
//! # Terminology
//!
//! - **target**: what to make: a Gymnasium id (`HalfCheetah-v5`, or `module:Env-v0`,
//!   which imports `module` first) or a factory `module:callable`, with keyword arguments.
//! - **layout**: how one env's observation is flattened into f32 values (Box as is,
//!   discrete values one-hot, Dict in key order, images channels-last: [`GymImage`]) and
//!   its action space. It is part of a run's config hash: a run resumed or evaluated
//!   against an env whose layout changed is refused.
//! - **image**: a Box of bytes or booleans with 2 axes (one channel), 3 (channels-last or
//!   channels-first: the smallest axis is the channels) or 4 (a frame stack of those, as
//!   Gymnasium's `FrameStackObservation` makes, its frames' channels stacked), alone or
//!   inside a Dict or Tuple.

mod process;
mod protocol;
mod region;
mod rows;
mod vec_env;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::{EnvSpec, ImageSpan, Space};
use process::{EnvProcess, Launch};

pub use vec_env::{spin_budget, GymOptions, GymVecEnv};

/// The prefix that marks an env name as a Gymnasium target (`gym:HalfCheetah-v5`).
pub const GYM_PREFIX: &str = "gym:";

/// The target of a `gym:` env name, if it is one.
pub fn gym_target(name: &str) -> Option<&str> {
    name.strip_prefix(GYM_PREFIX).filter(|t| !t.is_empty())
}

/// The interpreter env processes run when none is configured: `$STRATA_PYTHON`, else
/// `python3` on the `PATH` (an activated virtual environment's).
pub fn default_python() -> PathBuf {
    std::env::var_os("STRATA_PYTHON")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("python3"), PathBuf::from)
}

/// What went wrong with a Gymnasium env process.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum GymError {
    /// The interpreter could not be started.
    #[error("could not start Python `{python}`: {reason}")]
    Spawn {
        /// The interpreter.
        python: String,
        /// Why.
        reason: String,
    },
    /// The env (or making it) raised a Python exception.
    #[error("the env raised in Python:\n{traceback}")]
    Raised {
        /// Python's traceback.
        traceback: String,
    },
    /// The interpreter cannot make the env: a package or the factory's module is missing.
    /// The worker program says which interpreter, what it lacks and the fixes.
    #[error("{0}")]
    Setup(String),
    /// The process died (a crash in the simulator, a kill).
    #[error("its process (pid {pid}) {status}")]
    Exited {
        /// Its process id.
        pid: u32,
        /// How it ended.
        status: String,
    },
    /// The process did not answer in time; it was killed.
    #[error("its process (pid {pid}) did not answer within {waited:.1?}; killed")]
    Hung {
        /// Its process id.
        pid: u32,
        /// How long it was waited for.
        waited: Duration,
    },
    /// The process answered something the protocol does not allow.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The shared-memory region could not be made.
    #[error("shared memory: {0}")]
    Region(String),
}

/// What to run and where: the env target, its keyword arguments and the interpreter.
#[derive(Clone, Debug, PartialEq)]
pub struct GymTarget {
    /// A Gymnasium id (`HalfCheetah-v5`, `gymnasium_robotics:FetchReachDense-v4`) or a
    /// factory `module:callable`.
    pub id: String,
    /// Keyword arguments for `gym.make` or the factory.
    pub kwargs: serde_json::Map<String, serde_json::Value>,
    /// The Python interpreter (a virtual environment's `bin/python`, say).
    pub python: PathBuf,
    /// Directories put first on the processes' `sys.path` (where a factory's module is).
    pub python_path: Vec<PathBuf>,
    /// Named wrapper stacks applied to each env made, in order ([`WRAPPERS`]).
    pub wrappers: Vec<String>,
}

/// The wrapper stacks `GymTarget::wrappers` names (defined in the worker program's
/// `strata_gym_wrappers.py`): `atari` is CleanRL's `ppo_atari` preprocessing (no-op reset,
/// frame skip 4 with max-pool, 84x84 grey, an episode per life with the game's raw score
/// counted, FIRE at reset, rewards clipped to their sign, 4 frames stacked).
pub const WRAPPERS: &[&str] = &["atari"];

impl GymTarget {
    /// `id` with no keyword arguments, run by `python`.
    pub fn new(id: &str, python: impl Into<PathBuf>) -> Self {
        GymTarget {
            id: id.to_string(),
            kwargs: serde_json::Map::new(),
            python: python.into(),
            python_path: Vec::new(),
            wrappers: Vec::new(),
        }
    }

    /// The worker program's arguments that say what to make.
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--target".to_string(),
            self.id.clone(),
            "--kwargs".to_string(),
            serde_json::Value::Object(self.kwargs.clone()).to_string(),
        ];
        for p in &self.python_path {
            args.extend(["--path".to_string(), p.display().to_string()]);
        }
        if !self.wrappers.is_empty() {
            args.extend([
                "--wrappers".to_string(),
                serde_json::to_string(&self.wrappers).expect("names serialise"),
            ]);
        }
        args
    }

    fn launch(&self, extra: Vec<String>) -> Launch {
        let mut args = self.args();
        args.extend(extra);
        Launch {
            python: self.python.clone(),
            args,
        }
    }
}

/// What one env looks like to Strata: its flattened observation and its action space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GymLayout {
    /// The env's registered id (or the factory's name).
    pub id: String,
    /// How the observation is flattened: `Box(17,)`,
    /// `Dict(achieved_goal=Box(3,), desired_goal=Box(3,), observation=Box(10,))`.
    pub observation: String,
    /// Values in a flattened observation.
    pub obs_dim: usize,
    /// The action space (infinite Box bounds stored as f32's largest value).
    pub action: Space,
    /// The env's time limit, if it has one.
    pub max_episode_steps: Option<u32>,
    /// The registered solve threshold, if any.
    pub reward_threshold: Option<f64>,
    /// The images in the flattened observation, in order (none for vector observations,
    /// whose layouts leave the key out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<GymImage>,
}

/// An image inside a flattened observation: written channels-last (`height x width x
/// channels`) from `offset`, whatever order the env gives it in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GymImage {
    /// Where it starts in the flattened observation.
    pub offset: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// Values per pixel (a frame stack's frames times their channels).
    pub channels: usize,
    /// How the env lays it out.
    pub order: ChannelOrder,
    /// What its values mean.
    pub scale: ImageScale,
    /// Its shape as the env gives it (`[4, 84, 84]` for a frame stack of grey frames).
    pub shape: Vec<usize>,
}

impl GymImage {
    /// Values in the image.
    pub fn len(&self) -> usize {
        self.height * self.width * self.channels
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where each value of the env's array lands in the channels-last image: entry `i`
    /// is the channels-last index of the env array's `i`-th value (row-major).
    pub fn channels_last_index(&self) -> Vec<usize> {
        let (h, w, c) = (self.height, self.width, self.channels);
        let mut to = vec![0; self.len()];
        let mut i = 0;
        let mut put = |y: usize, x: usize, k: usize| {
            to[i] = (y * w + x) * c + k;
            i += 1;
        };
        match self.order {
            ChannelOrder::Hw | ChannelOrder::Hwc => (0..self.len()).for_each(|j| {
                to[j] = j;
            }),
            ChannelOrder::Chw => {
                for k in 0..c {
                    for y in 0..h {
                        for x in 0..w {
                            put(y, x, k);
                        }
                    }
                }
            }
            ChannelOrder::StackHwc | ChannelOrder::StackChw => {
                let frames = self.shape.first().copied().unwrap_or(1).max(1);
                let per = c / frames;
                for s in 0..frames {
                    if self.order == ChannelOrder::StackHwc {
                        for y in 0..h {
                            for x in 0..w {
                                for k in 0..per {
                                    put(y, x, s * per + k);
                                }
                            }
                        }
                    } else {
                        for k in 0..per {
                            for y in 0..h {
                                for x in 0..w {
                                    put(y, x, s * per + k);
                                }
                            }
                        }
                    }
                }
            }
        }
        to
    }
}

/// How to put the observations of an env whose observation is one image, given as the
/// env gives them (`[4, 84, 84]`), into Strata's channels-last rows: what `predict` and
/// the gateway accept beside flat rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageReorder {
    /// The image's shape as the env gives it.
    pub env_shape: Vec<usize>,
    /// Entry `i`: where the env array's `i`-th value lands in a row.
    index: Vec<usize>,
}

impl ImageReorder {
    /// The number of observations in an array of `shape` in the env's layout (`Some(1)`
    /// for one, `Some(n)` for a batch `[n, ..env_shape]`), or `None`.
    pub fn rows(&self, shape: &[usize]) -> Option<usize> {
        if shape == self.env_shape.as_slice() {
            Some(1)
        } else if shape.len() == self.env_shape.len() + 1 && shape[1..] == self.env_shape[..] {
            Some(shape[0])
        } else {
            None
        }
    }

    /// Writes observations in the env's layout (`values`, whole observations) as rows
    /// into `out` (the same length).
    ///
    /// # Panics
    /// When the lengths differ or are not whole observations.
    pub fn apply(&self, values: &[f32], out: &mut [f32]) {
        let d = self.index.len();
        assert!(
            values.len() == out.len() && values.len().is_multiple_of(d),
            "whole observations"
        );
        for (row, src) in out.chunks_exact_mut(d).zip(values.chunks_exact(d)) {
            for (v, &to) in src.iter().zip(&self.index) {
                row[to] = *v;
            }
        }
    }
}

impl GymLayout {
    /// How to reorder observations given as the env gives them, when the observation is
    /// one image (and nothing else).
    pub fn image_reorder(&self) -> Option<ImageReorder> {
        match &self.images[..] {
            [image] if image.len() == self.obs_dim => Some(ImageReorder {
                env_shape: image.shape.clone(),
                index: image.channels_last_index(),
            }),
            _ => None,
        }
    }
}

/// How an env lays out an image's axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChannelOrder {
    /// `(height, width)`: one channel.
    #[serde(rename = "hw")]
    Hw,
    /// `(height, width, channels)`, as Gymnasium's image envs give them.
    #[serde(rename = "hwc")]
    Hwc,
    /// `(channels, height, width)`, as after a transpose for PyTorch.
    #[serde(rename = "chw")]
    Chw,
    /// `(stack, height, width, channels)`: a frame stack of channels-last frames.
    #[serde(rename = "stack-hwc")]
    StackHwc,
    /// `(stack, channels, height, width)`: a frame stack of channels-first frames.
    #[serde(rename = "stack-chw")]
    StackChw,
}

/// What an image's values mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageScale {
    /// Bytes 0..=255 (divided by 255 in the model).
    Byte,
    /// Values in [0, 1] (booleans, or bytes bounded by 1), used as they are.
    Unit,
}

impl GymLayout {
    /// The [`EnvSpec`] of an env named `name` with this layout.
    pub fn spec(&self, name: &str) -> EnvSpec {
        EnvSpec {
            name: name.to_string(),
            gymnasium_id: self.id.clone(),
            observation_space: Space::uniform_box(self.obs_dim, f32::NEG_INFINITY, f32::INFINITY),
            action_space: self.action.clone(),
            max_episode_steps: self.max_episode_steps.unwrap_or(u32::MAX),
            reward_threshold: self.reward_threshold.unwrap_or(f64::INFINITY),
            images: self
                .images
                .iter()
                .map(|i| ImageSpan {
                    offset: i.offset,
                    height: i.height,
                    width: i.width,
                    channels: i.channels,
                })
                .collect(),
        }
    }
}

/// Layouts [`describe`] found, by interpreter and target.
static LAYOUTS: OnceLock<Mutex<HashMap<String, GymLayout>>> = OnceLock::new();

/// Forgets every layout [`describe`] found, so the next asks Python again. A process that
/// lives across many runs (a Python session, where a user edits a factory env between
/// calls) calls this at the start of each, so a run never sees an env as it was before.
pub fn forget_layouts() {
    if let Some(cache) = LAYOUTS.get() {
        cache.lock().clear();
    }
}

/// Asks Python what `target` looks like, starting one process that makes one env (once
/// per target and process: later calls answer from a cache).
///
/// # Errors
/// [`GymError::Spawn`] without an interpreter, [`GymError::Raised`] when the env cannot
/// be made (gymnasium missing, an unknown id, a space that cannot be flattened), and
/// [`GymError::Hung`] after `timeout`.
pub fn describe(target: &GymTarget, timeout: Duration) -> Result<GymLayout, GymError> {
    let key = format!("{}\0{:?}", target.python.display(), target.args());
    let cache = LAYOUTS.get_or_init(Mutex::default);
    if let Some(layout) = cache.lock().get(&key) {
        return Ok(layout.clone());
    }
    let mut process = EnvProcess::start(&target.launch(vec!["--describe".into()]), None, timeout)?;
    let message = process.read_message(timeout)?;
    let described: protocol::Described = serde_json::from_slice(&message)
        .map_err(|e| GymError::Protocol(format!("unreadable description: {e}")))?;
    let layout = match described {
        protocol::Described::Layout(layout) => layout,
        protocol::Described::Error(traceback) => return Err(GymError::Raised { traceback }),
        protocol::Described::Setup(message) => return Err(GymError::Setup(message)),
    };
    cache.lock().insert(key, layout.clone());
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(order: ChannelOrder, shape: &[usize], channels: usize) -> GymImage {
        GymImage {
            offset: 0,
            height: 3,
            width: 4,
            channels,
            order,
            scale: ImageScale::Byte,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn env_arrays_map_onto_channels_last_images() {
        // (c, h, w) = (2, 3, 4): value (k, y, x) lands at (y * 4 + x) * 2 + k.
        let chw = image(ChannelOrder::Chw, &[2, 3, 4], 2).channels_last_index();
        assert_eq!(chw[0], 0);
        assert_eq!(chw[1], 2, "the next column, same channel");
        assert_eq!(chw[12], 1, "channel 1's first pixel");
        assert_eq!(chw[12 + 4 + 3], (4 + 3) * 2 + 1);
        // (s, c, h, w) = (2, 2, 3, 4): frame s's channel k is channel s * 2 + k.
        let stack = image(ChannelOrder::StackChw, &[2, 2, 3, 4], 4).channels_last_index();
        assert_eq!(stack[24 + 12 + 5], (4 + 1) * 4 + 3);
        // (s, h, w, c) = (2, 3, 4, 2).
        let stack = image(ChannelOrder::StackHwc, &[2, 3, 4, 2], 4).channels_last_index();
        assert_eq!(stack[24 + (4 + 1) * 2 + 1], (4 + 1) * 4 + 3);
        for order in [
            ChannelOrder::Chw,
            ChannelOrder::StackChw,
            ChannelOrder::StackHwc,
        ] {
            let shape = if order == ChannelOrder::Chw {
                vec![4, 3, 4]
            } else {
                vec![2, 2, 3, 4]
            };
            let mut seen = image(order, &shape, 4).channels_last_index();
            seen.sort_unstable();
            assert_eq!(
                seen,
                (0..48).collect::<Vec<_>>(),
                "{order:?}: a permutation"
            );
        }
        let hwc = image(ChannelOrder::Hwc, &[3, 4, 2], 2).channels_last_index();
        assert_eq!(hwc, (0..24).collect::<Vec<_>>());
    }
}
