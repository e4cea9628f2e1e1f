//! The trainer: the runtime's driver of the learner. Each update it has the collector
//! assemble one fragment per worker, bootstraps values, lets the [`LearnerCore`] correct,
//! admit and train, publishes the next policy version and keeps the run's counters. Here:
//! starting, resuming and snapshotting it, and what it tells; one update in `update`, the
//! attached ledger in `ledger`, the live view in `live`.

mod ledger;
mod live;
mod update;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use strata_algo::RolloutBuffer;
use strata_env::NormalizerStats;
use strata_nn::{ActorCritic, Memory};

use crate::buffer::WorkerState;
use crate::collector::{Books, Collector};
use crate::eval::{evaluate_model, EvalEnvs, EvalResult, PinnedVersion};
use crate::ledger_link::LedgerLink;
use crate::live::{LearnerView, LedgerView, LiveHandle};
use crate::records::{Progress, Summary, UpdateRecord};
use crate::wiring::Wiring;
use crate::{RunConfig, RuntimeError};
use strata_config::{env_spec, initial_normalizer, resolve_env};
use strata_learner::PublishedPolicy;
use strata_learner::{read_checkpoint, TrainerState};
use strata_learner::{Correction, LearnerCore};

/// PPO training: rollout worker threads feeding one learner.
pub struct Trainer {
    pub(crate) config: RunConfig,
    pub(crate) config_hash: String,
    /// The hash a resume that changed the config's identity continued from.
    pub(crate) continued_from: Option<String>,
    /// Model, optimiser and update threads: admission, correction and the PPO update.
    pub(crate) core: LearnerCore,
    pub(crate) rollout: RolloutBuffer,
    pub(crate) progress: Progress,
    /// Normalisation statistics owned by the learner, published with every version.
    pub(crate) normalizer: NormalizerStats,
    threshold: f64,
    /// The workers and the batch they last filled.
    pub(crate) collector: Collector,
    scratch_obs: Vec<f32>,
    scratch_values: Vec<f32>,
    /// Recurrent states and episode-start flags for the bootstrap values.
    scratch_state: Vec<f32>,
    scratch_starts: Vec<bool>,
    /// The sample ledger, when the run keeps one.
    ledger: Option<LedgerLink>,
    /// What the live view shows of the learner, refreshed after every update.
    live: Arc<Mutex<LearnerView>>,
    /// Samples admission dropped, for the live view.
    dropped_samples: u64,
    /// The envs evaluations run on, kept between them.
    eval_envs: EvalEnvs,
}

impl Trainer {
    /// A new run at step 0 with version-0 weights; starts the worker threads.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidConfig`] (naming the key) or an env error.
    pub fn new(config: RunConfig) -> Result<Self, RuntimeError> {
        Self::start(config, None, crate::transport::local())
    }

    /// A run whose workers `launcher` starts (worker processes behind a transport, say),
    /// fresh or from a checkpointed `resume` state.
    ///
    /// # Errors
    /// As [`Trainer::new`] and [`Trainer::from_state`].
    pub fn with_workers(
        config: RunConfig,
        resume: Option<TrainerState>,
        launcher: std::sync::Arc<dyn crate::transport::WorkerLauncher>,
    ) -> Result<Self, RuntimeError> {
        Self::start(config, resume, launcher)
    }

    /// Continues a run from a checkpoint exactly where it stopped. `config`, when given,
    /// replaces run-control settings (budget, stopping, checkpointing, runtime timeouts);
    /// the policy-defining parts must match the checkpoint's.
    ///
    /// # Errors
    /// A checkpoint error, or [`RuntimeError::Config`] when `config` changes what defines
    /// the policy.
    pub fn resume(path: &Path, config: Option<RunConfig>) -> Result<Self, RuntimeError> {
        let mut state = read_checkpoint(path)?.into_state();
        if let Some(wanted) = config {
            if let Some(note) = state.continue_with(wanted)? {
                tracing::info!(component = "trainer", "{note}");
            }
        }
        Self::from_state(state)
    }

    /// Continues from a saved state (a checkpoint read with [`read_checkpoint`]).
    ///
    /// # Errors
    /// As [`Trainer::new`], or when the state does not fit its config.
    pub fn from_state(state: TrainerState) -> Result<Self, RuntimeError> {
        Self::start(state.config.clone(), Some(state), crate::transport::local())
    }

    /// The state a checkpoint saves: weights, optimiser, counters, normaliser and every
    /// worker's envs after its last consumed fragment.
    ///
    /// # Errors
    /// [`RuntimeError::NothingToSave`] before the first update.
    pub fn state(&self) -> Result<TrainerState, RuntimeError> {
        let workers = self
            .collector
            .worker_states
            .iter()
            .cloned()
            .collect::<Option<Vec<_>>>()
            .ok_or(RuntimeError::NothingToSave)?;
        Ok(TrainerState {
            config: self.config.clone(),
            config_hash: self.config_hash.clone(),
            continued_from: None,
            progress: self.progress.clone(),
            normalizer: self.normalizer.clone(),
            workers,
            ppo_rng: self.core.ppo().rng().clone(),
            tensors: self.core.model().tensors(),
        })
    }

    /// Wires the buffer, policy store, queues and workers, from scratch or a saved state.
    pub(super) fn start(
        mut config: RunConfig,
        resume: Option<TrainerState>,
        launcher: std::sync::Arc<dyn crate::transport::WorkerLauncher>,
    ) -> Result<Self, RuntimeError> {
        config.validate()?;
        // A gym: env's layout is recorded (a fresh run) or checked (a resumed one) before
        // the config is hashed.
        resolve_env(&mut config)?;
        // The update's threads are pinned after the workers' CPUs.
        let mut core = LearnerCore::new(&config, config.runtime.workers)?;
        let spec = env_spec(&config)?;
        let (workers, n) = (config.runtime.workers, config.env.num_envs);
        let mut progress = Progress::default();
        let mut normalizer = initial_normalizer(&config, spec.obs_dim());
        let mut config_hash = config.config_hash();
        let mut continued_from = None;
        let mut starts: Vec<Option<WorkerState>> = vec![None; workers];
        if let Some(r) = resume {
            core.model_mut().load_tensors(&r.tensors)?;
            if r.workers.len() != workers {
                return Err(RuntimeError::Config(format!(
                    "the checkpoint has {} worker states, the config {workers} workers",
                    r.workers.len()
                )));
            }
            progress = r.progress;
            normalizer = r.normalizer;
            core.ppo_mut().set_rng(r.ppo_rng);
            config_hash = r.config_hash;
            continued_from = r.continued_from;
            starts = r.workers.into_iter().map(Some).collect();
        }
        let initial = PublishedPolicy::new(
            progress.policy_version,
            core.params().to_vec(),
            normalizer.clone(),
        );
        let wiring = Wiring::start(&config, initial, starts, launcher)?;
        let mut trainer = Trainer {
            config_hash,
            continued_from,
            rollout: RolloutBuffer::with_byte_spans(
                n,
                config.ppo.n_steps,
                spec.obs_dim(),
                spec.action_dim(),
                &spec.image_ranges(),
            )
            .with_memory(config.network.state_len()),
            core,
            threshold: spec.reward_threshold,
            progress,
            normalizer,
            collector: Collector::new(wiring),
            scratch_obs: Vec::new(),
            scratch_values: Vec::new(),
            scratch_state: Vec::new(),
            scratch_starts: Vec::new(),
            ledger: None,
            live: Arc::new(Mutex::new(LearnerView::default())),
            dropped_samples: 0,
            eval_envs: EvalEnvs::default(),
            config,
        };
        trainer.publish_live(false);
        Ok(trainer)
    }

    /// Bytes the observations of one update take: in the rollout PPO trains on, and in
    /// the experience buffer's fragment slots (observations and final observations).
    /// Images are kept as bytes in both.
    pub fn obs_memory_bytes(&self) -> (usize, usize) {
        (
            self.rollout.obs.memory_bytes(),
            self.collector.wiring.buffer.obs_memory_bytes(),
        )
    }

    /// The run's config.
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// The run's config hash.
    pub fn config_hash(&self) -> &str {
        &self.config_hash
    }

    /// The config hash this run had before its resume changed the config's identity.
    pub fn continued_from(&self) -> Option<&str> {
        self.continued_from.as_deref()
    }

    /// Counters so far.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The model being trained.
    pub fn model(&self) -> &dyn ActorCritic {
        self.core.model()
    }

    /// The policy version each worker has adopted.
    pub fn worker_versions(&self) -> Vec<u64> {
        self.collector.wiring.store.worker_versions()
    }

    /// Why the run stopped, or would stop now: the budget, the solve, or else a request.
    pub fn stop_reason(&self) -> crate::StopReason {
        if self.progress.global_step >= self.config.train.total_steps {
            crate::StopReason::Budget
        } else if self.config.train.stop_when_solved && self.progress.solved_at.is_some() {
            crate::StopReason::Solved
        } else {
            crate::StopReason::Interrupted
        }
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

    /// A handle to stop the run from another thread (Ctrl-C): the learner notices within a
    /// fraction of a second and [`Trainer::iterate`] returns [`RuntimeError::Interrupted`].
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.collector.stop)
    }

    /// Evaluates the current policy version on the run's fixed evaluation episodes
    /// (`report.eval_episodes` greedy episodes seeded by `report.eval_seed`), between
    /// updates. Its time counts in the breakdown (`eval`) and the training seconds.
    ///
    /// # Errors
    /// An env error, or a config asking for zero episodes.
    pub fn evaluate_current(&mut self) -> Result<EvalResult, RuntimeError> {
        let started = Instant::now();
        let report = &self.config.report;
        let (episodes, seed) = (
            report.eval_episodes,
            report.eval_seed(self.config.train.seed),
        );
        let pinned = PinnedVersion {
            config: &self.config,
            config_hash: &self.config_hash,
            policy_version: self.progress.policy_version,
            normalizer: &self.normalizer,
        };
        let mut result = evaluate_model(
            self.core.model_mut(),
            &pinned,
            episodes,
            seed,
            true,
            &mut self.eval_envs,
        )?;
        result.global_step = Some(self.progress.global_step);
        let seconds = started.elapsed().as_secs_f64();
        self.progress.time.eval += seconds;
        self.progress.wall_seconds += seconds;
        Ok(result)
    }

    /// The summary of the run so far.
    pub fn summary(&self) -> Summary {
        let p = &self.progress;
        Summary {
            stop: self.stop_reason(),
            budget_steps: self.config.train.total_steps,
            worker_faults: p.worker_faults,
            env: self.config.env.name.clone(),
            seed: self.config.train.seed,
            total_steps: p.global_step,
            wall_seconds: p.wall_seconds,
            env_steps_per_sec: p.global_step as f64 / p.wall_seconds.max(1e-9),
            train_steps_per_sec: p.global_step as f64 / (p.wall_seconds - p.time.eval).max(1e-9),
            final_mean_return: self.mean_return(),
            solved: p.solved_at.is_some(),
            steps_to_solve: p.solved_at.map(|s| s.0),
            steps_to_solve_trained: p.solved_trained,
            seconds_to_solve: p.solved_at.map(|s| s.1),
            config_hash: self.config_hash.clone(),
            policy_version: p.policy_version,
            time: p.time,
        }
    }

    /// Stops every worker (abandoning fragments in progress) and joins them, each within
    /// `runtime.wait_timeout_secs`; a thread stuck inside an env beyond that is reported
    /// and left to end with the process.
    pub fn shutdown(&mut self) {
        self.collector.wiring.shutdown();
    }
}

impl Drop for Trainer {
    fn drop(&mut self) {
        self.shutdown();
    }
}
