//! Evaluation of a checkpointed policy on fresh episodes.

use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use strata_env::{NormalizerStats, StepBatch, Stream, VecEnv};
use strata_nn::{ActorCritic, Memory, SampleRng};

use crate::video::GifWriter;
use crate::{RunConfig, RuntimeError};
use strata_config::{build_eval_envs, build_eval_envs_recording};
use strata_learner::Policy;

/// Returns of the evaluation episodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    /// Env name.
    pub env: String,
    /// Policy version evaluated.
    pub policy_version: u64,
    /// Config hash of the policy.
    pub config_hash: String,
    /// Env steps trained when a running training evaluated it (none for `strata eval`).
    #[serde(default)]
    pub global_step: Option<u64>,
    /// Most likely actions (true) or sampled ones.
    #[serde(default)]
    pub greedy: bool,
    /// Seed of the episodes.
    #[serde(default)]
    pub seed: u64,
    /// Episodes run.
    pub episodes: usize,
    /// Mean undiscounted return.
    pub mean_return: f64,
    /// Population std of the returns.
    pub std_return: f64,
    /// Mean episode length.
    pub mean_length: f64,
    /// Every episode's return, in completion order per env.
    pub returns: Vec<f64>,
    /// Fraction of episodes that succeeded, for tasks that define success.
    pub success_rate: Option<f64>,
}

/// Runs `episodes` episodes (seeded by `seed`) with the policy's most likely action
/// (`greedy`) or sampled actions. Each env runs a fixed quota of episodes, so short
/// episodes are not over-represented.
///
/// # Errors
/// An env error (e.g. NaN), or [`RuntimeError::Config`] for zero episodes.
pub fn evaluate(
    policy: &mut Policy,
    episodes: usize,
    seed: u64,
    greedy: bool,
) -> Result<EvalResult, RuntimeError> {
    let pinned = PinnedVersion {
        config: &policy.config,
        config_hash: &policy.config_hash,
        policy_version: policy.policy_version,
        normalizer: &policy.normalizer,
    };
    let mut envs = EvalEnvs::default();
    evaluate_model(
        policy.model.as_mut(),
        &pinned,
        episodes,
        seed,
        greedy,
        &mut envs,
    )
}

/// What [`evaluate_recorded`] wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// The animated GIF.
    pub path: std::path::PathBuf,
    /// Pictures in it.
    pub frames: usize,
    /// Episodes it shows (env 0's of the evaluation).
    pub episodes: usize,
}

/// As [`evaluate`], also writing the episodes of the evaluation's first env as an animated
/// GIF at `gif` (one picture a step). Every env that draws itself can be recorded: the
/// built-in classic-control envs, and a `gym:` env that renders `rgb_array` (made with
/// `render_mode="rgb_array"` for this).
///
/// # Errors
/// As [`evaluate`]; [`strata_env::EnvError::NoPictures`] for an env that does not draw
/// itself; [`RuntimeError::Io`] when the GIF cannot be written.
pub fn evaluate_recorded(
    policy: &mut Policy,
    episodes: usize,
    seed: u64,
    greedy: bool,
    gif: &std::path::Path,
) -> Result<(EvalResult, Recording), RuntimeError> {
    let n = eval_env_count(episodes)?;
    let pinned = PinnedVersion {
        config: &policy.config,
        config_hash: &policy.config_hash,
        policy_version: policy.policy_version,
        normalizer: &policy.normalizer,
    };
    // A `gym:` env's process appends its pictures here; read as they come, then removed.
    let frames_file = gif.with_extension("frames.tmp");
    let _ = std::fs::remove_file(&frames_file);
    let outcome = (|| {
        let mut envs =
            build_eval_envs_recording(pinned.config, n, pinned.normalizer, Some(&frames_file))?;
        let mut video = Video {
            gif: GifWriter::create(gif)?,
            episodes: 0,
        };
        let result = run_episodes(
            policy.model.as_mut(),
            &pinned,
            envs.as_mut(),
            (episodes, seed, greedy),
            Some(&mut video),
        )?;
        drop(envs);
        let frames = video.gif.finish()?;
        let recording = Recording {
            path: gif.to_path_buf(),
            frames,
            episodes: video.episodes,
        };
        Ok((result, recording))
    })();
    let _ = std::fs::remove_file(&frames_file);
    if outcome.is_err() {
        let _ = std::fs::remove_file(gif);
    }
    outcome
}

/// The GIF being written and env 0's episodes in it.
struct Video {
    gif: GifWriter,
    episodes: usize,
}

/// The envs of evaluations, kept from one to the next (a `gym:` env's processes start
/// once per training, not once per evaluation); every evaluation resets them with its seed.
#[derive(Default)]
pub(crate) struct EvalEnvs(Option<Box<dyn VecEnv>>);

impl EvalEnvs {
    /// `n` envs for `pinned`'s config with its normalisation statistics.
    fn get(
        &mut self,
        pinned: &PinnedVersion<'_>,
        n: usize,
    ) -> Result<&mut Box<dyn VecEnv>, RuntimeError> {
        match &mut self.0 {
            Some(envs) if envs.num_envs() == n => envs.set_normalizer(pinned.normalizer)?,
            _ => self.0 = Some(build_eval_envs(pinned.config, n, pinned.normalizer)?),
        }
        Ok(self.0.as_mut().expect("just set"))
    }
}

/// Envs an evaluation of `episodes` episodes runs: one an episode, at most 16.
fn eval_env_count(episodes: usize) -> Result<usize, RuntimeError> {
    if episodes == 0 {
        return Err(RuntimeError::Config("--episodes must be at least 1".into()));
    }
    Ok(episodes.min(16))
}

/// The version an evaluation is pinned to: what defines it besides the weights.
pub(crate) struct PinnedVersion<'a> {
    pub(crate) config: &'a RunConfig,
    pub(crate) config_hash: &'a str,
    pub(crate) policy_version: u64,
    pub(crate) normalizer: &'a NormalizerStats,
}

/// [`evaluate`] on a model in memory (the learner's, between updates), on `cache`'s envs.
/// Envs that failed are not kept.
pub(crate) fn evaluate_model(
    model: &mut dyn ActorCritic,
    pinned: &PinnedVersion<'_>,
    episodes: usize,
    seed: u64,
    greedy: bool,
    cache: &mut EvalEnvs,
) -> Result<EvalResult, RuntimeError> {
    let n = eval_env_count(episodes)?;
    let envs = cache.get(pinned, n)?;
    let outcome = run_episodes(model, pinned, envs.as_mut(), (episodes, seed, greedy), None);
    if outcome.is_err() {
        cache.0 = None;
    }
    outcome
}

/// Runs `episodes` episodes seeded by `seed` (greedy or sampled actions) on `envs`, env 0's
/// pictures into `video` until its quota of episodes is done.
fn run_episodes(
    model: &mut dyn ActorCritic,
    pinned: &PinnedVersion<'_>,
    envs: &mut dyn VecEnv,
    (episodes, seed, greedy): (usize, u64, bool),
    mut video: Option<&mut Video>,
) -> Result<EvalResult, RuntimeError> {
    let n = envs.num_envs();
    let spec = envs.spec().clone();
    let mut batch = StepBatch::new(&spec, n);
    envs.reset(seed, &mut batch.obs)?;
    let mut obs = batch.obs.clone();
    let quota: Vec<usize> = (0..n)
        .map(|i| episodes / n + usize::from(i < episodes % n))
        .collect();
    let mut done = vec![0usize; n];
    let (mut returns, mut lengths) = (Vec::with_capacity(episodes), Vec::with_capacity(episodes));
    let mut successes: Vec<bool> = Vec::new();
    let mut rng = SampleRng::seed_from_u64(Stream::EvaluationActions.seed(seed));
    let ad = spec.action_dim();
    let (mut actions, mut log_probs, mut values) = (vec![0.0; n * ad], vec![0.0; n], vec![0.0; n]);
    // A recurrent policy's state per env, zeroed where an episode starts.
    let mut state = vec![0.0; n * model.state_len()];
    let mut starts = vec![true; n];
    if let Some(v) = video.as_deref_mut() {
        v.gif.push(envs.take_frames()?)?;
    }
    while returns.len() < episodes {
        let memory = Memory {
            state: &mut state,
            starts: &starts,
        };
        if greedy {
            model.act_greedy(&obs, memory, &mut actions);
        } else {
            model.act(
                &obs,
                memory,
                &mut rng,
                &[],
                &mut actions,
                &mut log_probs,
                &mut values,
            );
        }
        envs.step(&actions, &mut batch)?;
        let recording = done[0] < quota[0];
        for ep in batch.episodes.iter().filter(|e| e.counted) {
            if done[ep.env] < quota[ep.env] {
                done[ep.env] += 1;
                returns.push(ep.episode_return);
                lengths.push(f64::from(ep.length));
                successes.extend(ep.success);
            }
        }
        if let Some(v) = video.as_deref_mut() {
            let frames = envs.take_frames()?;
            if recording {
                v.gif.push(frames)?;
                v.episodes = done[0];
            }
        }
        obs.copy_from_slice(&batch.obs);
        for (i, start) in starts.iter_mut().enumerate() {
            *start = batch.terminated[i] || batch.truncated[i];
        }
    }
    let k = returns.len() as f64;
    let mean = returns.iter().sum::<f64>() / k;
    let std = (returns.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / k).sqrt();
    Ok(EvalResult {
        env: spec.name,
        policy_version: pinned.policy_version,
        config_hash: pinned.config_hash.to_string(),
        global_step: None,
        greedy,
        seed,
        episodes,
        mean_return: mean,
        std_return: std,
        mean_length: lengths.iter().sum::<f64>() / k,
        returns,
        success_rate: (!successes.is_empty())
            .then(|| successes.iter().filter(|&&s| s).count() as f64 / successes.len() as f64),
    })
}
