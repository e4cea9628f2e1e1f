//! The training loop: collect a rollout from the vectorised env, compute advantages, run
//! the PPO update, publish the next policy version, record metrics.

use std::collections::VecDeque;
use std::time::Instant;

use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use strata_algo::{Ppo, RolloutBuffer, UpdateStats};
use strata_env::{derive_seed, make_vec_env, NormalizeObservation, ScaleReward, StepBatch, VecEnv};
use strata_nn::{ActorCritic, Head, MlpActorCritic, SampleRng};

use crate::{RunConfig, RuntimeError};

/// Where the time went, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBreakdown {
    /// Stepping environments (wrappers included).
    pub env_step: f64,
    /// Policy and value inference while collecting.
    pub inference: f64,
    /// PPO forward passes.
    pub forward: f64,
    /// PPO loss and backward passes.
    pub backward: f64,
    /// Optimiser steps.
    pub optimizer: f64,
    /// GAE and everything else in the loop.
    pub other: f64,
}

/// One line of the metrics file, written after every update.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateRecord {
    /// Update index (1-based).
    pub update: u64,
    /// Policy version published by this update.
    pub policy_version: u64,
    /// Env steps so far.
    pub global_step: u64,
    /// Seconds of training so far (across resumes).
    pub wall_seconds: f64,
    /// Env steps per second over the whole run.
    pub env_steps_per_sec: f64,
    /// Episodes finished so far.
    pub episodes: u64,
    /// Mean return of the last `solve_window` finished episodes (None before the first).
    pub mean_return: Option<f64>,
    /// Mean length of the episodes finished during this update's rollout.
    pub mean_episode_length: Option<f64>,
    /// The PPO statistics.
    #[serde(flatten)]
    pub ppo: UpdateStats,
}

/// The run summary (`--summary-json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Env name.
    pub env: String,
    /// Run seed.
    pub seed: u64,
    /// Env steps taken.
    pub total_steps: u64,
    /// Training seconds (across resumes).
    pub wall_seconds: f64,
    /// `total_steps / wall_seconds`.
    pub env_steps_per_sec: f64,
    /// Mean return of the last `solve_window` episodes.
    pub final_mean_return: Option<f64>,
    /// Whether that mean reached the env's threshold at some update.
    pub solved: bool,
    /// Env steps when first solved.
    pub steps_to_solve: Option<u64>,
    /// Training seconds when first solved.
    pub seconds_to_solve: Option<f64>,
    /// Config hash of the run.
    pub config_hash: String,
    /// Last published policy version.
    pub policy_version: u64,
    /// Where the time went.
    pub time: TimeBreakdown,
}

/// Counters and statistics that survive a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Env steps taken.
    pub global_step: u64,
    /// Updates done.
    pub updates: u64,
    /// Current policy version (0 = initial weights).
    pub policy_version: u64,
    /// Episodes finished.
    pub episodes: u64,
    /// Returns of the most recent finished episodes (up to the solve window).
    pub recent_returns: VecDeque<f64>,
    /// (steps, seconds) when first solved.
    pub solved_at: Option<(u64, f64)>,
    /// Training seconds before this process (resumes).
    pub wall_seconds: f64,
    /// Time breakdown so far.
    pub time: TimeBreakdown,
}

/// Single-learner PPO training over one vectorised env.
pub struct Trainer {
    pub(crate) config: RunConfig,
    pub(crate) config_hash: String,
    pub(crate) envs: Box<dyn VecEnv>,
    pub(crate) model: Box<dyn ActorCritic>,
    pub(crate) ppo: Ppo,
    pub(crate) rollout: RolloutBuffer,
    pub(crate) batch: StepBatch,
    /// The observation each env will act on next.
    pub(crate) obs: Vec<f32>,
    pub(crate) sample_rng: SampleRng,
    pub(crate) progress: Progress,
    /// Runs the PPO update; its thread count is `train.learner_threads`.
    learner_pool: rayon::ThreadPool,
    threshold: f64,
    final_rows: Vec<usize>,
    final_obs: Vec<f32>,
    final_values: Vec<f32>,
    episode_lengths: Vec<u32>,
}

/// Builds the vectorised env a config asks for, wrappers included.
///
/// # Errors
/// [`RuntimeError::Env`] for an unknown env.
pub fn build_envs(config: &RunConfig) -> Result<Box<dyn VecEnv>, RuntimeError> {
    let mut envs = make_vec_env(&config.env.name, config.env.num_envs)?;
    if config.env.normalize_obs {
        envs = Box::new(NormalizeObservation::new(envs));
    }
    if config.env.normalize_reward {
        envs = Box::new(ScaleReward::new(envs, config.ppo.gamma));
    }
    Ok(envs)
}

/// Builds a freshly initialised model for a config.
///
/// # Errors
/// [`RuntimeError::Env`] for an unknown env.
pub fn build_model(config: &RunConfig) -> Result<Box<dyn ActorCritic>, RuntimeError> {
    let spec = strata_env::spec_for(&config.env.name)?;
    let head = match spec.action_space {
        strata_env::Space::Discrete { n } => Head::Categorical { n },
        strata_env::Space::Box { ref low, .. } => Head::Gaussian { dim: low.len() },
    };
    let mut rng = SampleRng::seed_from_u64(derive_seed(config.train.seed, 1));
    Ok(Box::new(MlpActorCritic::new(
        spec.obs_dim(),
        head,
        &config.network,
        &mut rng,
    )))
}

impl Trainer {
    /// A new run at step 0 with version-0 weights.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidConfig`] (naming the key) or an env error.
    pub fn new(config: RunConfig) -> Result<Self, RuntimeError> {
        config.validate()?;
        let mut envs = build_envs(&config)?;
        let model = build_model(&config)?;
        let spec = envs.spec().clone();
        let n = config.env.num_envs;
        let mut batch = StepBatch::new(&spec, n);
        envs.reset(derive_seed(config.train.seed, 0), &mut batch.obs);
        let obs = batch.obs.clone();
        let learner_pool = rayon::ThreadPoolBuilder::new()
            .num_threads(config.train.learner_threads)
            .thread_name(|i| format!("strata-learner-{i}"))
            .build()
            .map_err(|e| RuntimeError::Config(format!("cannot start the learner threads: {e}")))?;
        Ok(Trainer {
            learner_pool,
            config_hash: config.config_hash(),
            rollout: RolloutBuffer::new(n, config.ppo.n_steps, spec.obs_dim(), spec.action_dim()),
            ppo: Ppo::new(config.ppo.clone(), derive_seed(config.train.seed, 3)),
            sample_rng: SampleRng::seed_from_u64(derive_seed(config.train.seed, 2)),
            threshold: spec.reward_threshold,
            envs,
            model,
            batch,
            obs,
            progress: Progress::default(),
            final_rows: Vec::with_capacity(n),
            final_obs: Vec::new(),
            final_values: Vec::new(),
            episode_lengths: Vec::new(),
            config,
        })
    }

    /// The run's config.
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// The run's config hash.
    pub fn config_hash(&self) -> &str {
        &self.config_hash
    }

    /// Counters so far.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The model being trained.
    pub fn model(&self) -> &dyn ActorCritic {
        self.model.as_ref()
    }

    /// Whether the budget is spent or (with `stop_when_solved`) the task is solved.
    pub fn finished(&self) -> bool {
        self.progress.global_step >= self.config.train.total_steps
            || (self.config.train.stop_when_solved && self.progress.solved_at.is_some())
    }

    /// Mean of the recent episode returns.
    pub fn mean_return(&self) -> Option<f64> {
        let r = &self.progress.recent_returns;
        (!r.is_empty()).then(|| r.iter().sum::<f64>() / r.len() as f64)
    }

    /// Collects one rollout of `n_steps` steps from every env.
    fn collect(&mut self) -> Result<(), RuntimeError> {
        let (n, od, ad) = (
            self.config.env.num_envs,
            self.rollout.obs_dim,
            self.rollout.action_dim,
        );
        self.episode_lengths.clear();
        for t in 0..self.config.ppo.n_steps {
            let (rows, r) = (t * n..(t + 1) * n, &mut self.rollout);
            let t0 = Instant::now();
            r.obs[t * n * od..(t + 1) * n * od].copy_from_slice(&self.obs);
            self.model.act(
                &self.obs,
                &mut self.sample_rng,
                &mut r.actions[t * n * ad..(t + 1) * n * ad],
                &mut r.log_probs[rows.clone()],
                &mut r.values[rows.clone()],
            );
            let t1 = Instant::now();
            self.envs
                .step(&r.actions[t * n * ad..(t + 1) * n * ad], &mut self.batch)?;
            let t2 = Instant::now();
            r.rewards[rows.clone()].copy_from_slice(&self.batch.rewards);
            r.terminated[rows.clone()].copy_from_slice(&self.batch.terminated);
            r.truncated[rows.clone()].copy_from_slice(&self.batch.truncated);
            // Truncated episodes bootstrap from V(final observation).
            self.final_rows.clear();
            self.final_obs.clear();
            for i in 0..n {
                if self.batch.truncated[i] && !self.batch.terminated[i] {
                    self.final_rows.push(i);
                    self.final_obs
                        .extend_from_slice(&self.batch.final_obs[i * od..(i + 1) * od]);
                }
            }
            if !self.final_rows.is_empty() {
                self.final_values.resize(self.final_rows.len(), 0.0);
                self.model.values(&self.final_obs, &mut self.final_values);
                for (k, &i) in self.final_rows.iter().enumerate() {
                    r.final_values[t * n + i] = self.final_values[k];
                }
            }
            for ep in &self.batch.episodes {
                self.progress.episodes += 1;
                self.progress.recent_returns.push_back(ep.episode_return);
                if self.progress.recent_returns.len() > self.config.train.solve_window {
                    self.progress.recent_returns.pop_front();
                }
                self.episode_lengths.push(ep.length);
            }
            self.obs.copy_from_slice(&self.batch.obs);
            self.progress.global_step += n as u64;
            let t3 = Instant::now();
            self.progress.time.inference += (t1 - t0 + (t3 - t2)).as_secs_f64();
            self.progress.time.env_step += (t2 - t1).as_secs_f64();
        }
        let t0 = Instant::now();
        self.model.values(&self.obs, &mut self.rollout.last_values);
        self.progress.time.inference += t0.elapsed().as_secs_f64();
        Ok(())
    }

    /// One iteration: collect, GAE, PPO update, publish version v+1. Returns the record
    /// for the metrics file.
    ///
    /// # Errors
    /// An env error (bad action, NaN) stops the run with the env's message.
    pub fn iterate(&mut self) -> Result<UpdateRecord, RuntimeError> {
        let started = Instant::now();
        let progress_remaining =
            1.0 - self.progress.global_step as f32 / self.config.train.total_steps as f32;
        self.collect()?;
        let t0 = Instant::now();
        self.rollout.compute_advantages(
            self.config.ppo.gamma as f32,
            self.config.ppo.gae_lambda as f32,
        );
        let (ppo, model, rollout) = (&mut self.ppo, self.model.as_mut(), &self.rollout);
        let stats = self
            .learner_pool
            .install(|| ppo.update(model, rollout, progress_remaining.max(0.0)));
        let elapsed = started.elapsed().as_secs_f64();
        let p = &mut self.progress;
        p.time.forward += stats.forward_seconds;
        p.time.backward += stats.backward_seconds;
        p.time.optimizer += stats.optimizer_seconds;
        p.time.other += t0.elapsed().as_secs_f64()
            - stats.forward_seconds
            - stats.backward_seconds
            - stats.optimizer_seconds;
        p.wall_seconds += elapsed;
        p.updates += 1;
        p.policy_version += 1;
        let mean_return = self.mean_return();
        let p = &mut self.progress;
        if p.solved_at.is_none()
            && p.recent_returns.len() >= self.config.train.solve_window
            && mean_return.is_some_and(|m| m >= self.threshold)
        {
            p.solved_at = Some((p.global_step, p.wall_seconds));
        }
        let lengths = &self.episode_lengths;
        Ok(UpdateRecord {
            update: p.updates,
            policy_version: p.policy_version,
            global_step: p.global_step,
            wall_seconds: p.wall_seconds,
            env_steps_per_sec: p.global_step as f64 / p.wall_seconds.max(1e-9),
            episodes: p.episodes,
            mean_return,
            mean_episode_length: (!lengths.is_empty())
                .then(|| lengths.iter().map(|l| f64::from(*l)).sum::<f64>() / lengths.len() as f64),
            ppo: stats,
        })
    }

    /// The summary of the run so far.
    pub fn summary(&self) -> Summary {
        let p = &self.progress;
        Summary {
            env: self.config.env.name.clone(),
            seed: self.config.train.seed,
            total_steps: p.global_step,
            wall_seconds: p.wall_seconds,
            env_steps_per_sec: p.global_step as f64 / p.wall_seconds.max(1e-9),
            final_mean_return: self.mean_return(),
            solved: p.solved_at.is_some(),
            steps_to_solve: p.solved_at.map(|s| s.0),
            seconds_to_solve: p.solved_at.map(|s| s.1),
            config_hash: self.config_hash.clone(),
            policy_version: p.policy_version,
            time: p.time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollouts_store_the_unclipped_sampled_actions() {
        let mut config = crate::preset("pendulum").unwrap();
        config.network.log_std_init = 1.5; // std ~4.5, far beyond the +-2 torque bound
        config.ppo.n_steps = 64;
        let mut trainer = Trainer::new(config).unwrap();
        trainer.collect().unwrap();
        let beyond = trainer
            .rollout
            .actions
            .iter()
            .filter(|a| a.abs() > 2.0)
            .count();
        assert!(beyond > 50, "only {beyond} stored actions exceed the bound");
        // Rewards stayed within what a clipped torque allows (cost <= pi^2 + 0.1*64 + 0.001*4).
        assert!(trainer.rollout.rewards.iter().all(|r| *r >= -16.3));
    }

    #[test]
    fn truncated_steps_get_the_value_of_their_final_observation() {
        let mut config = crate::preset("pendulum").unwrap();
        config.env.num_envs = 2;
        config.ppo.n_steps = 200; // exactly one episode: the last step is truncated
        config.ppo.batch_size = 64;
        let mut trainer = Trainer::new(config).unwrap();
        trainer.collect().unwrap();
        let r = &trainer.rollout;
        let last = 199 * 2;
        assert!(r.truncated[last] && r.truncated[last + 1]);
        assert!(r.final_values[last] != 0.0 && r.final_values[last + 1] != 0.0);
        assert!(r.truncated.iter().filter(|t| **t).count() == 2);
    }
}
