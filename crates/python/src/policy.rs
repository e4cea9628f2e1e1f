//! `strata.load` and `Policy.predict`: a checkpointed policy acting on numpy arrays.

use std::path::PathBuf;

use numpy::{
    AllowTypeChange, PyArrayLikeDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods,
};
use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rand::SeedableRng;
use strata_env::gym::{GymLayout, ImageReorder};
use strata_env::Space;
use strata_nn::{Memory, SampleRng};

use crate::runtime_error;

/// What `predict` keeps between calls: the model and its scratch rows.
struct Acting {
    policy: strata_runtime::Policy,
    rng: SampleRng,
    obs: Vec<f32>,
    /// Observations in the env's own image layout, before they are put channels-last.
    env_order: Vec<f32>,
    actions: Vec<f32>,
    log_probs: Vec<f32>,
    values: Vec<f32>,
}

/// A trained policy, pinned to one version of one run: `predict(obs)` gives its actions.
///
/// Observations are normalised with the statistics the version was trained with; Box
/// actions are clipped to the action space, as the env applies them.
#[pyclass(module = "strata", frozen)]
pub(crate) struct Policy {
    acting: Mutex<Acting>,
    obs_dim: usize,
    /// An env whose observation is one image: how to take it as the env gives it.
    image: Option<ImageReorder>,
    action_space: Space,
    #[pyo3(get)]
    policy_version: u64,
    #[pyo3(get)]
    config_hash: String,
    #[pyo3(get)]
    env: String,
    config_toml: String,
}

impl Policy {
    fn new(policy: strata_runtime::Policy) -> PyResult<Self> {
        let spec = strata_runtime::env_spec(&policy.config).map_err(runtime_error)?;
        let image = policy
            .config
            .env
            .gym
            .layout
            .as_ref()
            .and_then(GymLayout::image_reorder);
        Ok(Policy {
            obs_dim: spec.obs_dim(),
            image,
            action_space: spec.action_space,
            policy_version: policy.policy_version,
            config_hash: policy.config_hash.clone(),
            env: policy.config.env.name.clone(),
            config_toml: policy.config.to_toml(),
            acting: Mutex::new(Acting {
                rng: SampleRng::seed_from_u64(policy.config.train.seed),
                policy,
                obs: Vec::new(),
                env_order: Vec::new(),
                actions: Vec::new(),
                log_probs: Vec::new(),
                values: Vec::new(),
            }),
        })
    }

    /// Values per action.
    fn action_dim(&self) -> usize {
        self.action_space.flat_dim()
    }

    /// Copies `obs` (any numeric or boolean dtype) into `acting.obs`; the number of rows,
    /// and whether the input was one observation. An image env's observations may come as
    /// the env gives them (`(4, 84, 84)`, or a batch `(n, 4, 84, 84)`), as well as flat.
    fn take_obs(&self, obs: &Bound<'_, PyAny>, acting: &mut Acting) -> PyResult<(usize, bool)> {
        let d = self.obs_dim;
        let image = self.image.as_ref();
        let shape_error = |shape: &[usize]| {
            let env_shape = image.map_or_else(String::new, |image| {
                let dims: Vec<String> = image.env_shape.iter().map(usize::to_string).collect();
                format!(", the env's ({0}) or (n, {0})", dims.join(", "))
            });
            PyValueError::new_err(format!(
                "observation of shape {shape:?}: this policy expects ({d},) or (n, {d}){env_shape}"
            ))
        };
        let Acting {
            obs: out,
            env_order,
            ..
        } = acting;
        let mut fill = |shape: &[usize], values: &mut dyn Iterator<Item = f32>| {
            let flat = match shape {
                [n] if *n == d => Some((1, true)),
                [rows, n] if *n == d => Some((*rows, false)),
                _ => None,
            };
            if let Some(found) = flat {
                out.clear();
                out.extend(values);
                return Ok(found);
            }
            // The env's own image layout: each row put channels-last.
            let Some((image, rows)) = image.and_then(|i| Some((i, i.rows(shape)?))) else {
                return Err(shape_error(shape));
            };
            env_order.clear();
            env_order.extend(values);
            out.clear();
            out.resize(env_order.len(), 0.0);
            image.apply(env_order, out);
            Ok((rows, rows == 1 && shape.len() == image.env_shape.len()))
        };
        // The common dtypes read in place; anything else (lists, ints) is converted.
        let (rows, single) = if let Ok(a) = obs.extract::<PyReadonlyArrayDyn<'_, f32>>() {
            let shape = a.shape().to_vec();
            match a.as_slice() {
                Ok(s) => fill(&shape, &mut s.iter().copied())?,
                Err(_) => fill(&shape, &mut a.as_array().iter().copied())?,
            }
        } else if let Ok(a) = obs.extract::<PyReadonlyArrayDyn<'_, f64>>() {
            let shape = a.shape().to_vec();
            fill(&shape, &mut a.as_array().iter().map(|&v| v as f32))?
        } else {
            let a: PyArrayLikeDyn<'_, f32, AllowTypeChange> = obs.extract()?;
            let shape = a.shape().to_vec();
            fill(&shape, &mut a.as_array().iter().copied())?
        };
        if let Some(i) = acting.obs.iter().position(|v| !v.is_finite()) {
            return Err(PyValueError::new_err(format!(
                "observation value {i} is {} (not finite)",
                acting.obs[i]
            )));
        }
        if let Some(rms) = &acting.policy.normalizer.obs {
            rms.normalize(&mut acting.obs);
        }
        Ok((rows, single))
    }
}

#[pymethods]
impl Policy {
    /// The actions for `obs`, one observation `(obs_dim,)` or a batch `(n, obs_dim)`
    /// (for an env whose observation is one image, also as the env gives it: `(4, 84, 84)`
    /// or `(n, 4, 84, 84)`): the most likely ones (`deterministic=True`) or sampled. Returns `(actions, None)`
    /// as Stable-Baselines3's `predict` does: int64 indices for a Discrete space, float32
    /// values clipped to a Box space.
    ///
    /// A recurrent policy (`network.core`) also takes and returns its memory, with
    /// Stable-Baselines3's signature: `state` is what the last call returned for these
    /// envs (`None` at first: zero states), a float32 array with a row per observation;
    /// `episode_start` marks the observations that begin an episode (their state is
    /// zeroed first). It returns `(actions, state)`, the state to pass with the next
    /// observations. A feed-forward policy returns `None` for the state.
    #[pyo3(signature = (obs, state=None, episode_start=None, deterministic=true))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        obs: &Bound<'py, PyAny>,
        state: Option<&Bound<'py, PyAny>>,
        episode_start: Option<&Bound<'py, PyAny>>,
        deterministic: bool,
    ) -> PyResult<(Bound<'py, PyAny>, Option<Py<PyAny>>)> {
        let mut guard = loop {
            if let Some(guard) = self.acting.try_lock() {
                break guard;
            }
            // An evaluation may hold the policy for seconds: wait for it without the GIL,
            // so every other Python thread runs meanwhile.
            py.detach(|| drop(self.acting.lock()));
        };
        let acting = &mut *guard;
        let (rows, single) = self.take_obs(obs, acting)?;
        let ad = self.action_dim();
        acting.actions.resize(rows * ad, 0.0);
        let model = acting.policy.model.as_mut();
        let width = model.state_len();
        let mut memory_state = Vec::new();
        let mut starts = Vec::new();
        if width > 0 {
            memory_state = match state {
                None => vec![0.0; rows * width],
                Some(s) if s.is_none() => vec![0.0; rows * width],
                Some(s) => {
                    let a: PyArrayLikeDyn<'_, f32, AllowTypeChange> = s.extract()?;
                    let values = a.as_array().iter().copied().collect::<Vec<f32>>();
                    if values.len() != rows * width {
                        return Err(PyValueError::new_err(format!(
                            "state has {} values; this policy keeps {width} per observation, \
                             {} for these {rows} (pass what the last predict returned, or None)",
                            values.len(),
                            rows * width
                        )));
                    }
                    values
                }
            };
            starts = match episode_start {
                None => vec![false; rows],
                Some(e) if e.is_none() => vec![false; rows],
                Some(e) => {
                    let a: PyArrayLikeDyn<'_, bool, AllowTypeChange> = e.extract()?;
                    let flags = a.as_array().iter().copied().collect::<Vec<bool>>();
                    if flags.len() != rows {
                        return Err(PyValueError::new_err(format!(
                            "episode_start has {} flags for {rows} observations",
                            flags.len()
                        )));
                    }
                    flags
                }
            };
        }
        let memory = Memory {
            state: &mut memory_state,
            starts: &starts,
        };
        if deterministic {
            model.act_greedy(&acting.obs, memory, &mut acting.actions);
        } else {
            acting.log_probs.resize(rows, 0.0);
            acting.values.resize(rows, 0.0);
            model.act(
                &acting.obs,
                memory,
                &mut acting.rng,
                &[],
                &mut acting.actions,
                &mut acting.log_probs,
                &mut acting.values,
            );
        }
        let out = match &self.action_space {
            Space::Discrete { .. } => {
                let indices: Vec<i64> = acting.actions.iter().map(|&a| a as i64).collect();
                let array = numpy::PyArray1::from_vec(py, indices);
                if single {
                    array.reshape(Vec::<usize>::new())?.into_any()
                } else {
                    array.into_any()
                }
            }
            Space::Box { .. } => {
                for row in acting.actions.chunks_exact_mut(ad) {
                    self.action_space.clip(row);
                }
                let array = numpy::PyArray1::from_slice(py, &acting.actions);
                if single {
                    array.into_any()
                } else {
                    array.reshape([rows, ad])?.into_any()
                }
            }
        };
        if width == 0 {
            return Ok((out, None));
        }
        let array = numpy::PyArray1::from_vec(py, memory_state);
        let state = if single {
            array.into_any()
        } else {
            array.reshape([rows, width])?.into_any()
        };
        Ok((out, Some(state.unbind())))
    }

    /// Observation width.
    #[getter]
    fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    /// `("discrete", n)` or `("box", low, high)`.
    #[getter]
    fn action_space<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match &self.action_space {
            Space::Discrete { n } => ("discrete", *n).into_pyobject(py)?.into_any(),
            Space::Box { low, high } => ("box", low.clone(), high.clone())
                .into_pyobject(py)?
                .into_any(),
        })
    }

    /// The run's config, as TOML.
    #[getter]
    fn config(&self) -> &str {
        &self.config_toml
    }

    fn __repr__(&self) -> String {
        format!(
            "Policy(env={:?}, version={}, config_hash={:?})",
            self.env, self.policy_version, self.config_hash
        )
    }
}

/// The policy of a checkpoint or run directory (its final checkpoint), or of the run's
/// checkpoint holding policy `version`.
#[pyfunction]
#[pyo3(signature = (path, version=None, best=false))]
pub(crate) fn load(
    py: Python<'_>,
    path: PathBuf,
    version: Option<u64>,
    best: bool,
) -> PyResult<Policy> {
    strata_env::gym::forget_layouts();
    let pick = match (version, best) {
        (Some(_), true) => {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "give version or best, not both",
            ))
        }
        (Some(v), false) => strata_runtime::PolicyPick::Version(v),
        (None, true) => strata_runtime::PolicyPick::Best,
        (None, false) => strata_runtime::PolicyPick::Final,
    };
    let policy = py
        .detach(|| {
            let (dir, _) = strata_runtime::pick_checkpoint(&path, pick)?;
            strata_runtime::load_policy(&dir)
        })
        .map_err(runtime_error)?;
    Policy::new(policy)
}

/// Runs `episodes` fresh episodes (seeded by `seed`) with `policy`, a [`Policy`] or a
/// checkpoint path; returns the evaluation as JSON.
#[pyfunction]
#[pyo3(signature = (policy, episodes=10, seed=12345, deterministic=true))]
pub(crate) fn evaluate(
    py: Python<'_>,
    policy: &Bound<'_, PyAny>,
    episodes: usize,
    seed: u64,
    deterministic: bool,
) -> PyResult<String> {
    let result = if let Ok(p) = policy.cast::<Policy>() {
        let p = p.get();
        py.detach(|| {
            let mut acting = p.acting.lock();
            strata_runtime::evaluate(&mut acting.policy, episodes, seed, deterministic)
        })
    } else {
        let path: PathBuf = policy.extract()?;
        py.detach(|| {
            let mut loaded = strata_runtime::load_policy(&path)?;
            strata_runtime::evaluate(&mut loaded, episodes, seed, deterministic)
        })
    }
    .map_err(runtime_error)?;
    Ok(serde_json::to_string(&result).expect("an evaluation serialises"))
}
