//! The learner and the wiring: rollout workers fill fragments in the experience buffer,
//! the learner consumes one fragment per worker per update in a fixed order, runs GAE and
//! the PPO update, and publishes the next policy version to the policy store.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use strata_algo::RolloutBuffer;
use strata_env::NormalizerStats;
use strata_nn::ActorCritic;

use crate::buffer::{ExperienceBuffer, SlotId, WorkerState};
use crate::config::Inference;
use crate::eval::{evaluate_model, EvalResult, PinnedVersion};
use crate::factory::initial_normalizer;
use crate::inference::{spawn_server, InferenceSlots, ServerSetup};
use crate::learner_core::{Correction, LearnerCore, RowSpan, SampleGroup};
use crate::ledger_link::LedgerLink;
use crate::live::{LearnerView, LedgerView, LiveHandle};
use crate::policy_store::{PolicyStore, PublishedPolicy};
use crate::records::{InvalidFragment, Progress, Summary, UpdateRecord};
use crate::telemetry::{Activity, Heartbeat, Watchdog};
use crate::wiring::{Central, Wiring};
use crate::worker::{WorkerCommand, WorkerEvent};
use crate::{RunConfig, RuntimeError};

/// PPO training: rollout worker threads feeding one learner.
pub struct Trainer {
    pub(crate) config: RunConfig,
    pub(crate) config_hash: String,
    /// Model, optimiser and update threads: admission, correction and the PPO update.
    pub(crate) core: LearnerCore,
    pub(crate) rollout: RolloutBuffer,
    pub(crate) progress: Progress,
    /// Normalisation statistics owned by the learner, published with every version.
    pub(crate) normalizer: NormalizerStats,
    /// Each worker's state after its last consumed fragment (for checkpoints).
    pub(crate) worker_states: Vec<Option<WorkerState>>,
    threshold: f64,
    wiring: Wiring,
    /// Fragments that arrived ahead of their turn: (fragment index, worker) -> slot.
    early: BTreeMap<(u64, usize), SlotId>,
    /// Set from outside (Ctrl-C) to stop the run at the next wait.
    stop: Arc<AtomicBool>,
    scratch_obs: Vec<f32>,
    scratch_values: Vec<f32>,
    final_rows: Vec<usize>,
    episode_lengths: Vec<u32>,
    lags: Vec<u64>,
    /// The fragments of the batch being assembled, for admission.
    fragments: Vec<SampleGroup>,
    /// The sample ledger, when the run keeps one.
    ledger: Option<LedgerLink>,
    /// What the live view shows of the learner, refreshed after every update.
    live: Arc<Mutex<LearnerView>>,
    /// Samples admission dropped, for the live view.
    dropped_samples: u64,
}

/// What a resumed run starts from.
pub(crate) struct ResumePoint {
    pub model_tensors: Vec<strata_nn::NamedTensor>,
    pub progress: Progress,
    pub normalizer: NormalizerStats,
    pub workers: Vec<WorkerState>,
    pub ppo_rng: rand_xoshiro::Xoshiro256PlusPlus,
    pub config_hash: String,
}

impl Trainer {
    /// A new run at step 0 with version-0 weights; starts the worker threads.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidConfig`] (naming the key) or an env error.
    pub fn new(config: RunConfig) -> Result<Self, RuntimeError> {
        Self::start(config, None)
    }

    /// Wires the buffer, policy store, queues and workers, from scratch or a resume point.
    pub(crate) fn start(
        config: RunConfig,
        resume: Option<ResumePoint>,
    ) -> Result<Self, RuntimeError> {
        config.validate()?;
        // The update's threads are pinned after the workers' CPUs.
        let mut core = LearnerCore::new(&config, config.runtime.workers)?;
        let spec = strata_env::spec_for(&config.env.name)?;
        let (workers, n) = (config.runtime.workers, config.env.num_envs);
        let per_worker_envs = n / workers;
        let lag = config.effective_lag();
        let mut progress = Progress::default();
        let mut normalizer = initial_normalizer(&config, spec.obs_dim());
        let mut config_hash = config.config_hash();
        let mut starts: Vec<Option<WorkerState>> = vec![None; workers];
        if let Some(r) = resume {
            core.model_mut().load_tensors(&r.model_tensors)?;
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
            starts = r.workers.into_iter().map(Some).collect();
        }
        let initial = PublishedPolicy::new(
            progress.policy_version,
            core.params().to_vec(),
            normalizer.clone(),
        );
        // Enough history for a worker `lag` versions behind to find its exact version.
        let store = Arc::new(
            PolicyStore::new(initial, workers, lag as usize + 2)
                .map_err(|e| RuntimeError::Config(e.to_string()))?,
        );
        // One slot per fragment a worker may have in flight: the current one plus `lag`.
        let slots_per_worker = lag as usize + 1;
        let buffer = Arc::new(ExperienceBuffer::new(
            workers,
            slots_per_worker,
            config.ppo.n_steps,
            per_worker_envs,
            spec.obs_dim(),
            spec.action_dim(),
            config.runtime.debug_buffer,
        ));
        let wait_timeout = Duration::from_secs_f64(config.runtime.wait_timeout_secs);
        let (event_tx, events) = sync_channel(workers * slots_per_worker);
        let epoch = Instant::now();
        let learner_beat = Heartbeat::new("learner", epoch);
        let beats = Arc::new(Mutex::new(vec![Arc::clone(&learner_beat)]));
        let watchdog = Watchdog::start(
            Arc::clone(&beats),
            Duration::from_secs_f64(config.runtime.silent_after_secs),
        )
        .map_err(|e| RuntimeError::Config(format!("cannot start the watchdog: {e}")))?;
        let central = if config.runtime.inference == Inference::Central {
            let groups = config.groups_per_worker();
            let slots = Arc::new(InferenceSlots::new(
                workers,
                groups,
                per_worker_envs / groups,
                spec.obs_dim(),
                spec.action_dim(),
            ));
            let (requests, requests_rx) = sync_channel(workers * groups);
            let replies = Arc::new(Mutex::new(Vec::with_capacity(workers)));
            let exit = Arc::new(AtomicBool::new(false));
            let heartbeat = Heartbeat::new("inference", epoch);
            beats
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(0, Arc::clone(&heartbeat));
            let handle = spawn_server(ServerSetup {
                config: Arc::new(config.clone()),
                slots: Arc::clone(&slots),
                store: Arc::clone(&store),
                requests: requests_rx,
                replies: Arc::clone(&replies),
                exit: Arc::clone(&exit),
                heartbeat,
                wait_timeout,
                versions_kept: lag as usize + 2,
            })
            .map_err(|e| RuntimeError::Config(format!("cannot start the inference thread: {e}")))?;
            Some(Central {
                slots,
                requests,
                replies,
                exit,
                handle: Some(handle),
            })
        } else {
            None
        };
        let mut wiring = Wiring {
            central,
            config: Arc::new(config.clone()),
            buffer: Arc::clone(&buffer),
            store: Arc::clone(&store),
            events,
            event_tx,
            workers: Vec::with_capacity(workers),
            retired: Vec::new(),
            quarantined: Vec::new(),
            beats,
            learner_beat,
            _watchdog: watchdog,
            epoch,
            lag,
            wait_timeout,
        };
        for (id, start) in starts.into_iter().enumerate() {
            let slots: Vec<SlotId> = buffer.owned_by(id).collect();
            let handle = wiring.spawn_worker(id, 0, start, 0, &slots)?;
            wiring.workers.push(handle);
        }
        let mut trainer = Trainer {
            config_hash,
            rollout: RolloutBuffer::new(n, config.ppo.n_steps, spec.obs_dim(), spec.action_dim()),
            core,
            threshold: spec.reward_threshold,
            progress,
            normalizer,
            worker_states: vec![None; workers],
            wiring,
            early: BTreeMap::new(),
            stop: Arc::new(AtomicBool::new(false)),
            scratch_obs: Vec::new(),
            scratch_values: Vec::new(),
            final_rows: Vec::with_capacity(n),
            episode_lengths: Vec::new(),
            lags: Vec::with_capacity(workers),
            fragments: Vec::with_capacity(workers),
            ledger: None,
            live: Arc::new(Mutex::new(LearnerView::default())),
            dropped_samples: 0,
            config,
        };
        trainer.publish_live(false);
        Ok(trainer)
    }

    /// A handle on the live view (for a metrics endpoint or a monitor on another thread).
    pub fn live_handle(&self) -> LiveHandle {
        LiveHandle {
            epoch: self.wiring.epoch,
            learner: Arc::clone(&self.live),
            beats: Arc::clone(&self.wiring.beats),
            store: Arc::clone(&self.wiring.store),
            buffer: Arc::clone(&self.wiring.buffer),
            workers: self.config.runtime.workers,
        }
    }

    /// Refreshes what the live view knows only from the learner: counters, rates, lag,
    /// restarts and the ledger's writer. A lock and a few copies: cheap per update.
    pub(crate) fn publish_live(&mut self, finished: bool) {
        let seconds = self.wiring.epoch.elapsed().as_secs_f64();
        let p = &self.progress;
        let mean_return = self.mean_return();
        let ledger = self.ledger_stats().map(|l| LedgerView {
            rows_received: l.rows_received,
            rows_written: l.rows_written,
            rows_buffered: l.rows_buffered,
            files_written: l.files_written,
            bytes_written: l.bytes_written,
        });
        let mut view = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let rate = view.rate(seconds, p.global_step);
        view.restarts = self.wiring.workers.iter().map(|w| w.restarts).collect();
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
            self.lags.iter().copied().min().unwrap_or(0),
            self.lags.iter().sum::<u64>() as f64 / self.lags.len().max(1) as f64,
            self.lags.iter().copied().max().unwrap_or(0),
        );
        s.max_policy_lag = self.wiring.lag;
        s.invalid_fragments = p.invalid_fragments.len();
        s.dropped_samples = self.dropped_samples;
        s.early_fragments = self.early.len();
        s.ledger = ledger;
        s.finished = finished;
    }

    /// Records an evaluation in the live view.
    pub(crate) fn publish_eval(&self, version: u64, mean_return: f64) {
        let mut view = self.live.lock().unwrap_or_else(|e| e.into_inner());
        view.snapshot.last_eval = Some((version, mean_return));
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
        self.core.model()
    }

    /// The policy version each worker has adopted.
    pub fn worker_versions(&self) -> Vec<u64> {
        self.wiring.store.worker_versions()
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
        Arc::clone(&self.stop)
    }

    /// Waits for worker `w`'s fragment number `index`. Handles what arrives meanwhile:
    /// fragments of other workers are kept for their turn, stale incarnations' slots are
    /// recycled, failed or silent workers are restarted. Every wait is bounded and logged.
    fn wait_fragment(&mut self, worker: usize, index: u64) -> Result<SlotId, RuntimeError> {
        let started = Instant::now();
        let poll = self.wiring.wait_timeout.min(Duration::from_millis(200));
        let restart_after = Duration::from_secs_f64(self.config.runtime.restart_after_secs);
        let mut next_report = self.wiring.wait_timeout;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(RuntimeError::Interrupted);
            }
            if let Some(slot) = self.early.remove(&(index, worker)) {
                return Ok(slot);
            }
            self.wiring.learner_beat.beat(Activity::WaitingForFragments);
            match self.wiring.events.recv_timeout(poll) {
                Ok(WorkerEvent::FragmentReady {
                    slot,
                    index: i,
                    generation,
                }) => {
                    let w = &mut self.wiring.workers[slot.worker];
                    if generation == w.generation {
                        w.next_fragment = i + 1;
                        self.early.insert((i, slot.worker), slot);
                    } else {
                        self.wiring.give_back(slot)?;
                    }
                }
                Ok(WorkerEvent::Abandoned { slot, .. }) => self.wiring.give_back(slot)?,
                Ok(WorkerEvent::Failed {
                    worker: w,
                    generation,
                    error,
                    holding,
                }) => {
                    if generation == self.wiring.workers[w].generation {
                        self.restart_worker(w, &error, true)?;
                    } else if let Some(slot) = holding {
                        self.wiring.give_back(slot)?;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let (silence, activity) = self.wiring.workers[worker].heartbeat.silence();
                    // Only a worker stuck in its own work is restarted; one waiting for a
                    // policy or a slot waits on the learner.
                    let working = matches!(activity, Activity::Collecting | Activity::Starting);
                    if silence > restart_after && working {
                        let reason =
                            format!("silent for {silence:.1?} while {}", activity.describe());
                        self.restart_worker(worker, &reason, false)?;
                    } else if started.elapsed() >= next_report {
                        tracing::warn!(
                            component = "learner",
                            worker,
                            fragment = index,
                            waited = ?started.elapsed(),
                            worker_activity = activity.describe(),
                            "still waiting for a fragment"
                        );
                        next_report += self.wiring.wait_timeout;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(RuntimeError::Worker {
                        worker,
                        error: "all workers are gone".into(),
                    });
                }
            }
        }
    }

    /// Replaces worker `w` after a failure (`failed`) or silence: the fragment it was writing is
    /// recorded invalid (never silently dropped), a new incarnation starts on fresh envs and
    /// continues the fragment numbering. Stops the run after too many restarts.
    fn restart_worker(&mut self, w: usize, reason: &str, failed: bool) -> Result<(), RuntimeError> {
        let old = &self.wiring.workers[w];
        if old.restarts >= self.config.runtime.max_worker_restarts {
            return Err(RuntimeError::Worker {
                worker: w,
                error: format!("{reason} (after {} restarts)", old.restarts),
            });
        }
        let fragment = old.next_fragment;
        let version = self.wiring.store.worker_versions()[w];
        tracing::error!(
            component = "learner",
            worker = w,
            generation = old.generation,
            fragment,
            reason,
            "restarting worker; its fragment in progress is recorded invalid"
        );
        self.progress.invalid_fragments.push(InvalidFragment {
            worker: w,
            generation: old.generation,
            fragment,
            policy_version: version,
            reason: reason.to_string(),
            at_step: self.progress.global_step,
        });
        let _ = old.commands.try_send(WorkerCommand::Exit);
        // Slots the old incarnation cannot give back now: one it still writes (if alive),
        // those holding finished fragments awaiting their turn.
        if !failed {
            // A stuck worker still holds its slot; it comes back in an `Abandoned` (or
            // stale) event when the thread wakes. A failed one has released it already.
            self.wiring.quarantined.extend(old.holding.get(w));
        }
        let pending: Vec<SlotId> = self
            .early
            .iter()
            .filter(|((_, ww), _)| *ww == w)
            .map(|(_, s)| *s)
            .collect();
        let quarantined = &self.wiring.quarantined;
        let slots: Vec<SlotId> = self
            .wiring
            .buffer
            .owned_by(w)
            .filter(|s| !pending.contains(s) && !quarantined.contains(s))
            .collect();
        let (generation, restarts) = (old.generation + 1, old.restarts + 1);
        if let Some(link) = self.ledger.as_mut() {
            let m = self.config.env.num_envs / self.config.runtime.workers;
            link.abandon(w * m..(w + 1) * m);
        }
        let mut replacement = self
            .wiring
            .spawn_worker(w, generation, None, fragment, &slots)?;
        replacement.restarts = restarts;
        let old = std::mem::replace(&mut self.wiring.workers[w], replacement);
        self.wiring.retired.push(old.handle);
        Ok(())
    }

    /// Consumes one fragment from every worker, in worker order, into the rollout.
    fn collect(&mut self) -> Result<(), RuntimeError> {
        let (n, od, ad) = (
            self.config.env.num_envs,
            self.rollout.obs_dim,
            self.rollout.action_dim,
        );
        let m = n / self.config.runtime.workers;
        let index = self.progress.updates;
        let version = self.progress.policy_version;
        self.episode_lengths.clear();
        self.lags.clear();
        self.final_rows.clear();
        self.scratch_obs.clear();
        self.fragments.clear();
        self.rollout.weights.fill(1.0);
        let mut delta = NormalizerStats::default();
        let mut waited = Duration::ZERO;
        for w in 0..self.config.runtime.workers {
            let t0 = Instant::now();
            let slot = self.wait_fragment(w, index)?;
            waited += t0.elapsed();
            let buffer = Arc::clone(&self.wiring.buffer);
            let mut f = buffer.lock(slot);
            let r = &mut self.rollout;
            for t in 0..f.steps {
                let (src, dst) = (t * m, t * n + w * m);
                r.obs[dst * od..(dst + m) * od].copy_from_slice(&f.obs[src * od..(src + m) * od]);
                r.actions[dst * ad..(dst + m) * ad]
                    .copy_from_slice(&f.actions[src * ad..(src + m) * ad]);
                r.log_probs[dst..dst + m].copy_from_slice(&f.log_probs[src..src + m]);
                r.values[dst..dst + m].copy_from_slice(&f.values[src..src + m]);
                r.rewards[dst..dst + m].copy_from_slice(&f.rewards[src..src + m]);
                r.terminated[dst..dst + m].copy_from_slice(&f.terminated[src..src + m]);
                r.truncated[dst..dst + m].copy_from_slice(&f.truncated[src..src + m]);
                for i in 0..m {
                    if f.truncated[src + i] && !f.terminated[src + i] {
                        self.final_rows.push(dst + i);
                        self.scratch_obs
                            .extend_from_slice(&f.final_obs[(src + i) * od..(src + i + 1) * od]);
                    }
                }
            }
            for ep in &f.episodes {
                self.progress.episodes += 1;
                self.progress.recent_returns.push_back(ep.episode_return);
                if self.progress.recent_returns.len() > self.config.train.solve_window {
                    self.progress.recent_returns.pop_front();
                }
                self.episode_lengths.push(ep.length);
            }
            self.lags.push(version - f.version);
            let first_sample = self.ledger.as_mut().map(|l| l.add_fragment(&f, w));
            let samples = (f.steps * m) as u64;
            self.fragments.push(SampleGroup {
                rows: RowSpan {
                    first: w * m,
                    width: m,
                    stride: n,
                    count: f.steps,
                },
                version: f.version,
                bucket: self.config.ledger.bucket.clone(),
                sample_runs: first_sample
                    .map(|first| (first, first + samples - 1))
                    .into_iter()
                    .collect(),
                completed_ns: f.provenance.completed_ns.iter().copied().max().unwrap_or(0),
            });
            if w == 0 {
                delta = f.stats_delta.clone();
            } else {
                delta.merge(&f.stats_delta);
            }
            self.progress.time.env_step += f.env_seconds;
            self.progress.time.inference += f.inference_seconds;
            self.worker_states[w] = f.end_state.take();
            drop(f);
            // The worker holds at most its other slots: this hand-back cannot block.
            self.wiring.give_back(slot)?;
        }
        self.progress.time.buffer_wait += waited.as_secs_f64();
        self.normalizer.merge(&delta);
        self.progress.global_step += (self.rollout.n_steps * n) as u64;
        Ok(())
    }

    /// Records every sample, decision and published version in `ledger` from now on.
    ///
    /// # Errors
    /// [`RuntimeError::Ledger`] when the rules cannot be registered or bound.
    pub fn attach_ledger(&mut self, ledger: strata_ledger::Ledger) -> Result<(), RuntimeError> {
        let obs_dim = self.rollout.obs_dim;
        let link = LedgerLink::attach(
            ledger,
            &self.config,
            &self.config_hash,
            &self.progress,
            obs_dim,
        )
        .map_err(|e| RuntimeError::Ledger(e.to_string()))?;
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
            Some(l) => l.flush().map_err(|e| RuntimeError::Ledger(e.to_string())),
            None => Ok(()),
        }
    }

    /// Flushes and closes the ledger; returns what it wrote.
    ///
    /// # Errors
    /// [`RuntimeError::Ledger`] when the final flush fails.
    pub fn close_ledger(&mut self) -> Result<Option<strata_ledger::WriterStats>, RuntimeError> {
        match self.ledger.take() {
            Some(l) => l
                .close()
                .map(Some)
                .map_err(|e| RuntimeError::Ledger(e.to_string())),
            None => Ok(None),
        }
    }

    /// Bootstrap values: V(final observation) of truncated steps and V(next observation)
    /// after the rollout, from the learner's model.
    fn bootstrap_values(&mut self) {
        let (n, od) = (self.config.env.num_envs, self.rollout.obs_dim);
        let m = n / self.config.runtime.workers;
        if !self.final_rows.is_empty() {
            self.scratch_values.resize(self.final_rows.len(), 0.0);
            self.core
                .model_mut()
                .values(&self.scratch_obs, &mut self.scratch_values);
            for (k, &row) in self.final_rows.iter().enumerate() {
                self.rollout.final_values[row] = self.scratch_values[k];
            }
        }
        self.scratch_obs.clear();
        for w in 0..self.config.runtime.workers {
            let state = self.worker_states[w]
                .as_ref()
                .expect("set when the fragment was consumed");
            self.scratch_obs.extend_from_slice(&state.obs[..m * od]);
        }
        self.core
            .model_mut()
            .values(&self.scratch_obs, &mut self.rollout.last_values);
        self.scratch_obs.clear();
    }

    /// One iteration: consume a fragment per worker, bootstrap, (correct for lag), GAE,
    /// PPO update, publish version v+1. Returns the record for the metrics file.
    ///
    /// # Errors
    /// A worker's failure (env NaN, panic) with the worker named.
    pub fn iterate(&mut self) -> Result<UpdateRecord, RuntimeError> {
        let started = Instant::now();
        let progress_remaining =
            1.0 - self.progress.global_step as f32 / self.config.train.total_steps as f32;
        self.collect()?;
        let t0 = Instant::now();
        self.bootstrap_values();
        let lagged = self.lags.iter().any(|l| *l > 0);
        let correction = if lagged {
            Correction::Configured
        } else {
            Correction::None
        };
        self.core.prepare(&mut self.rollout, correction);
        let versioned = self.ledger.as_ref().map(LedgerLink::rules);
        let admitted = self.core.admit(
            &mut self.rollout,
            &self.fragments,
            &self.config.admission,
            versioned,
            self.progress.policy_version,
            self.progress.updates + 1,
        );
        let stats = self.core.train(&self.rollout, progress_remaining.max(0.0));
        let t1 = Instant::now();
        let next = self.progress.policy_version + 1;
        self.wiring
            .store
            .publish(PublishedPolicy::new(
                next,
                self.core.params().to_vec(),
                self.normalizer.clone(),
            ))
            .map_err(|e| RuntimeError::Config(format!("publishing policy version {next}: {e}")))?;
        if let Some(link) = self.ledger.as_mut() {
            link.finish_update(admitted.decisions, next)
                .map_err(|e| RuntimeError::Ledger(e.to_string()))?;
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
        if p.solved_at.is_none()
            && p.recent_returns.len() >= self.config.train.solve_window
            && mean_return.is_some_and(|m| m >= self.threshold)
        {
            p.solved_at = Some((p.global_step, p.wall_seconds));
        }
        self.dropped_samples += admitted.counts.dropped;
        self.publish_live(false);
        let p = &self.progress;
        let lengths = &self.episode_lengths;
        let lags = &self.lags;
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
            invalid_fragments: p.invalid_fragments.len(),
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
        let mut result = evaluate_model(self.core.model_mut(), &pinned, episodes, seed, true)?;
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

    /// Stops every worker (abandoning fragments in progress) and joins them, each within
    /// `runtime.wait_timeout_secs`; a thread stuck inside an env beyond that is reported
    /// and left to end with the process.
    pub fn shutdown(&mut self) {
        for w in &self.wiring.workers {
            let _ = w.commands.try_send(WorkerCommand::Exit);
        }
        // Closing the store and the slot queues wakes every waiting worker at once.
        self.wiring.store.close();
        let handles: Vec<(String, JoinHandle<()>)> = self
            .wiring
            .workers
            .drain(..)
            .map(|w| (w.heartbeat.name.clone(), w.handle))
            .chain(
                self.wiring
                    .retired
                    .drain(..)
                    .map(|h| ("retired worker".to_string(), h)),
            )
            .collect();
        for (name, handle) in handles {
            let deadline = Instant::now() + self.wiring.wait_timeout;
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if handle.is_finished() {
                if handle.join().is_err() {
                    tracing::error!(component = "learner", thread = %name, "thread panicked outside its guard");
                }
            } else {
                tracing::error!(component = "learner", thread = %name, waited = ?self.wiring.wait_timeout, "thread did not stop; left to end with the process");
            }
        }
        if let Some(c) = &mut self.wiring.central {
            c.exit.store(true, Ordering::Relaxed);
            if let Some(handle) = c.handle.take() {
                if handle.join().is_err() {
                    tracing::error!(component = "learner", "the inference thread panicked");
                }
            }
        }
        self.wiring.learner_beat.beat(Activity::Stopped);
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
