//! The trainer: the runtime's driver of the learner. Each update it has the collector
//! assemble one fragment per worker, bootstraps values, lets the [`LearnerCore`] correct,
//! admit and train, publishes the next policy version and keeps the run's counters.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use strata_algo::RolloutBuffer;
use strata_env::NormalizerStats;
use strata_nn::{ActorCritic, Memory};

use crate::buffer::WorkerState;
use crate::checkpoint::{read_checkpoint, TrainerState};
use crate::collector::{Books, Collector};
use crate::eval::{evaluate_model, EvalEnvs, EvalResult, PinnedVersion};
use crate::factory::{env_spec, initial_normalizer, resolve_env};
use crate::learner_core::{Correction, LearnerCore};
use crate::ledger_link::LedgerLink;
use crate::live::{LearnerView, LedgerView, LiveHandle};
use crate::policy_store::PublishedPolicy;
use crate::records::{Progress, Summary, UpdateRecord};
use crate::wiring::Wiring;
use crate::{RunConfig, RuntimeError};

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
    fn start(
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

    /// A handle on the live view (for a metrics endpoint or a monitor on another thread).
    pub fn live_handle(&self) -> LiveHandle {
        LiveHandle {
            epoch: self.collector.wiring.epoch,
            learner: Arc::clone(&self.live),
            beats: Arc::clone(&self.collector.wiring.beats),
            store: Arc::clone(&self.collector.wiring.store),
            buffer: Arc::clone(&self.collector.wiring.buffer),
            workers: self.config.runtime.workers,
        }
    }

    /// Refreshes what the live view knows only from the learner: counters, rates, lag,
    /// restarts and the ledger's writer. A lock and a few copies: cheap per update.
    pub(crate) fn publish_live(&mut self, finished: bool) {
        let seconds = self.collector.wiring.epoch.elapsed().as_secs_f64();
        let p = &self.progress;
        let mean_return = self.mean_return();
        let ledger = self.ledger_stats().map(|l| LedgerView {
            rows_received: l.rows_received,
            rows_written: l.rows_written,
            rows_buffered: l.rows_buffered,
            files_written: l.files_written,
            bytes_written: l.bytes_written,
        });
        let mut view = self.live.lock();
        let rate = view.rate(seconds, p.global_step);
        view.restarts = self
            .collector
            .wiring
            .workers
            .iter()
            .map(|w| w.restarts)
            .collect();
        let s = &mut view.snapshot;
        s.env.clone_from(&self.config.env.name);
        s.mode = format!("{:?}", self.config.runtime.mode).to_lowercase();
        s.config_hash.clone_from(&self.config_hash);
        s.global_step = p.global_step;
        s.total_steps = self.config.train.total_steps;
        s.updates = p.updates;
        s.policy_version = p.policy_version;
        s.env_steps_per_sec = rate;
        s.mean_return = mean_return;
        s.lag = (
            self.collector.lags.iter().copied().min().unwrap_or(0),
            self.collector.lags.iter().sum::<u64>() as f64
                / self.collector.lags.len().max(1) as f64,
            self.collector.lags.iter().copied().max().unwrap_or(0),
        );
        s.max_policy_lag = self.collector.wiring.lag;
        s.invalid_fragments = p.worker_faults as usize;
        s.dropped_samples = self.dropped_samples;
        s.early_fragments = self.collector.early_fragments();
        s.ledger = ledger;
        s.finished = finished;
    }

    /// Records an evaluation in the live view.
    pub(crate) fn publish_eval(&self, version: u64, mean_return: f64) {
        let mut view = self.live.lock();
        view.snapshot.last_eval = Some((version, mean_return));
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

    /// Consumes one fragment from every worker into the rollout.
    fn collect(&mut self) -> Result<(), RuntimeError> {
        let mut books = Books {
            progress: &mut self.progress,
            ledger: &mut self.ledger,
        };
        self.collector
            .collect(&mut self.rollout, &mut self.normalizer, &mut books)
    }

    /// Records every sample, decision and published version in `ledger` from now on.
    ///
    /// # Errors
    /// [`RuntimeError::Ledger`] when the rules cannot be registered or bound.
    pub fn attach_ledger(&mut self, ledger: strata_ledger::Ledger) -> Result<(), RuntimeError> {
        // A sample's observation summary: a value per observation value, one per image
        // channel.
        let summary_dim = crate::factory::env_spec(&self.config)?.summary_dim();
        let link = LedgerLink::attach(
            ledger,
            &self.config,
            &self.config_hash,
            &self.progress,
            summary_dim,
        )?;
        link.save_to(&mut self.progress);
        self.ledger = Some(link);
        Ok(())
    }

    /// Whether a ledger is attached, and where.
    pub fn ledger_location(&self) -> Option<&str> {
        self.ledger.as_ref().map(LedgerLink::location)
    }

    /// What the ledger's writer did so far.
    pub fn ledger_stats(&self) -> Option<strata_ledger::WriterStats> {
        self.ledger.as_ref().map(LedgerLink::stats)
    }

    /// Makes everything sent to the ledger durable (before a checkpoint).
    ///
    /// # Errors
    /// [`RuntimeError::Ledger`] when the storage fails.
    pub fn flush_ledger(&self) -> Result<(), RuntimeError> {
        match &self.ledger {
            Some(l) => l.flush().map_err(RuntimeError::from),
            None => Ok(()),
        }
    }

    /// Flushes and closes the ledger; returns what it wrote.
    ///
    /// # Errors
    /// [`RuntimeError::Ledger`] when the final flush fails.
    pub fn close_ledger(&mut self) -> Result<Option<strata_ledger::WriterStats>, RuntimeError> {
        match self.ledger.take() {
            Some(l) => l.close().map(Some).map_err(RuntimeError::from),
            None => Ok(None),
        }
    }

    /// Bootstrap values: V(final observation) of truncated steps and V(next observation)
    /// after the rollout, from the learner's model.
    fn bootstrap_values(&mut self) {
        let (n, od) = (self.config.env.num_envs, self.rollout.obs_dim);
        let m = n / self.config.runtime.workers;
        let c = &self.collector;
        if !c.final_rows.is_empty() {
            self.scratch_values.resize(c.final_rows.len(), 0.0);
            // A recurrent policy values a final observation with the state the env had
            // after its last step (a copy: the rollout keeps its states).
            self.scratch_state.clone_from(&c.final_states);
            self.scratch_starts.clear();
            self.scratch_starts.resize(
                if c.final_states.is_empty() {
                    0
                } else {
                    c.final_rows.len()
                },
                false,
            );
            let memory = Memory {
                state: &mut self.scratch_state,
                starts: &self.scratch_starts,
            };
            self.core
                .model_mut()
                .values(&c.final_obs, memory, &mut self.scratch_values);
            for (k, &row) in self.collector.final_rows.iter().enumerate() {
                self.rollout.final_values[row] = self.scratch_values[k];
            }
        }
        self.scratch_obs.clear();
        self.scratch_state.clear();
        self.scratch_starts.clear();
        for w in 0..self.config.runtime.workers {
            let state = self.collector.worker_states[w]
                .as_ref()
                .expect("set when the fragment was consumed");
            self.scratch_obs.extend_from_slice(&state.obs[..m * od]);
            self.scratch_state.extend_from_slice(&state.memory);
            self.scratch_starts.extend_from_slice(&state.starts);
        }
        let memory = Memory {
            state: &mut self.scratch_state,
            starts: &self.scratch_starts,
        };
        self.core
            .model_mut()
            .values(&self.scratch_obs, memory, &mut self.rollout.last_values);
        self.scratch_obs.clear();
    }

    /// One iteration: consume a fragment per worker, bootstrap, (correct for lag), GAE,
    /// PPO update, publish version v+1. Returns the record for the metrics file.
    ///
    /// # Errors
    /// A worker's failure (env NaN, panic) with the worker named.
    pub fn iterate(&mut self) -> Result<UpdateRecord, RuntimeError> {
        let started = Instant::now();
        let progress_remaining = self
            .progress
            .schedule_remaining(self.progress.global_step, self.config.train.total_steps);
        self.collect()?;
        let t0 = Instant::now();
        self.bootstrap_values();
        let lagged = self.collector.lags.iter().any(|l| *l > 0);
        let correction = if lagged {
            Correction::Configured
        } else {
            Correction::None
        };
        let is_weights = self.core.prepare(&mut self.rollout, correction);
        let versioned = self.ledger.as_ref().map(LedgerLink::rules);
        let admitted = self.core.admit(
            &mut self.rollout,
            &self.collector.fragments,
            &self.config.admission,
            versioned,
            self.progress.policy_version,
            self.progress.updates + 1,
        );
        let stats = self.core.train(&self.rollout, progress_remaining.max(0.0));
        let t1 = Instant::now();
        let next = self.progress.policy_version + 1;
        self.collector.wiring.store.publish(PublishedPolicy::new(
            next,
            self.core.params().to_vec(),
            self.normalizer.clone(),
        ))?;
        if let Some(link) = self.ledger.as_mut() {
            link.finish_update(admitted.decisions, next)?;
            link.save_to(&mut self.progress);
        }
        let publish = t1.elapsed().as_secs_f64();
        let learn = (t1 - t0).as_secs_f64();
        let p = &mut self.progress;
        p.time.forward += stats.forward_seconds;
        p.time.backward += stats.backward_seconds;
        p.time.optimizer += stats.optimizer_seconds;
        p.time.publish += publish;
        p.time.other +=
            learn - stats.forward_seconds - stats.backward_seconds - stats.optimizer_seconds;
        p.wall_seconds += started.elapsed().as_secs_f64();
        p.updates += 1;
        p.policy_version = next;
        let mean_return = self.mean_return();
        let p = &mut self.progress;
        let lags = &self.collector.lags;
        if p.solved_at.is_none()
            && p.recent_returns.len() >= self.config.train.solve_window
            && mean_return.is_some_and(|m| m >= self.threshold)
        {
            p.solved_at = Some((p.global_step, p.wall_seconds));
            // The newest collecting version: the learner's version before this update
            // minus the batch's smallest lag.
            let collected_by = (next - 1).saturating_sub(lags.iter().copied().min().unwrap_or(0));
            p.solved_trained = Some(p.steps_at_publish(collected_by));
        }
        p.note_publish(next, self.collector.wiring.lag);
        self.dropped_samples += admitted.counts.dropped;
        self.publish_live(false);
        let p = &self.progress;
        let lengths = &self.collector.episode_lengths;
        let lags = &self.collector.lags;
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
            policy_lag_min: lags.iter().copied().min().unwrap_or(0),
            policy_lag_avg: lags.iter().sum::<u64>() as f64 / lags.len().max(1) as f64,
            policy_lag_max: lags.iter().copied().max().unwrap_or(0),
            is_weights,
            invalid_fragments: p.worker_faults as usize,
            worker_faults: p.worker_faults,
            admission: admitted.counts,
            time: p.time,
            ppo: stats,
        })
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

    /// Tells the workers' launcher that everything consumed so far is in a checkpoint
    /// (called right after one is written).
    pub fn mark_durable(&self) {
        self.collector
            .wiring
            .launcher
            .durable(self.progress.updates);
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
        trainer.bootstrap_values();
        let r = &trainer.rollout;
        let last = 199 * 2;
        assert!(r.truncated[last] && r.truncated[last + 1]);
        assert!(r.final_values[last] != 0.0 && r.final_values[last + 1] != 0.0);
        assert!(r.truncated.iter().filter(|t| **t).count() == 2);
    }
}
