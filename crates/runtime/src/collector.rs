//! The collector: assembles each update's batch from the workers' fragments. It waits for
//! one fragment per worker in a fixed order (keeping early ones for their turn), restarts
//! failed or silent workers (recording their fragment invalid), copies the fragments into
//! the rollout and hands the ledger their provenance.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_algo::{RolloutBuffer, StepColumns};
use strata_env::NormalizerStats;

use crate::buffer::{SlotId, WorkerState};
use crate::ledger_link::LedgerLink;
use crate::records::{InvalidFragment, Progress};
use crate::telemetry::Activity;
use crate::wiring::Wiring;
use crate::worker::WorkerEvent;
use crate::RuntimeError;
use strata_learner::{RowSpan, SampleGroup};

/// What collecting updates besides the rollout: the run's counters and the ledger.
pub(crate) struct Books<'a> {
    pub(crate) progress: &'a mut Progress,
    pub(crate) ledger: &'a mut Option<LedgerLink>,
}

/// The workers, their queues, and what the last batch held.
pub(crate) struct Collector {
    pub(crate) wiring: Wiring,
    /// Fragments that arrived ahead of their turn: (fragment index, worker) -> slot.
    early: BTreeMap<(u64, usize), SlotId>,
    /// Set from outside (Ctrl-C) to stop the run at the next wait.
    pub(crate) stop: Arc<AtomicBool>,
    /// Each worker's state after its last consumed fragment (for checkpoints).
    pub(crate) worker_states: Vec<Option<WorkerState>>,
    /// Rollout rows of truncated (not terminated) steps, and their final observations.
    pub(crate) final_rows: Vec<usize>,
    pub(crate) final_obs: Vec<f32>,
    /// A recurrent policy's state after each of those steps (empty without one).
    pub(crate) final_states: Vec<f32>,
    /// Lengths of the episodes that ended in the batch.
    pub(crate) episode_lengths: Vec<u32>,
    /// Policy lag of each worker's fragment.
    pub(crate) lags: Vec<u64>,
    /// Each fragment of the batch as a sample group, for admission.
    pub(crate) fragments: Vec<SampleGroup>,
}

impl Collector {
    /// Collects from the workers `wiring` started.
    pub(crate) fn new(wiring: Wiring) -> Self {
        let workers = wiring.config.runtime.workers;
        Collector {
            early: BTreeMap::new(),
            stop: Arc::new(AtomicBool::new(false)),
            worker_states: vec![None; workers],
            final_rows: Vec::with_capacity(wiring.config.env.num_envs),
            final_obs: Vec::new(),
            final_states: Vec::new(),
            episode_lengths: Vec::new(),
            lags: Vec::with_capacity(workers),
            fragments: Vec::with_capacity(workers),
            wiring,
        }
    }

    /// Fragments waiting for their turn.
    pub(crate) fn early_fragments(&self) -> usize {
        self.early.len()
    }

    /// Consumes one fragment from every worker, in worker order, into the rollout.
    pub(crate) fn collect(
        &mut self,
        rollout: &mut RolloutBuffer,
        normalizer: &mut NormalizerStats,
        books: &mut Books<'_>,
    ) -> Result<(), RuntimeError> {
        let config = Arc::clone(&self.wiring.config);
        let (n, od, ad) = (config.env.num_envs, rollout.obs_dim, rollout.action_dim);
        let m = n / config.runtime.workers;
        let index = books.progress.updates;
        let version = books.progress.policy_version;
        self.episode_lengths.clear();
        self.lags.clear();
        self.final_rows.clear();
        self.final_obs.clear();
        self.final_states.clear();
        self.fragments.clear();
        rollout.weights.fill(1.0);
        let mut delta = NormalizerStats::default();
        let mut waited = Duration::ZERO;
        for w in 0..config.runtime.workers {
            let t0 = Instant::now();
            let slot = self.wait_fragment(w, index, books)?;
            let taken = Instant::now();
            waited += taken - t0;
            let buffer = Arc::clone(&self.wiring.buffer);
            let mut f = buffer.lock(slot);
            let r = &mut *rollout;
            for t in 0..f.steps {
                let (src, dst) = (t * m, t * n + w * m);
                r.steps_mut().copy_from(dst, f.steps(), src, m, (od, ad));
                r.terminated[dst..dst + m].copy_from_slice(&f.terminated[src..src + m]);
                r.truncated[dst..dst + m].copy_from_slice(&f.truncated[src..src + m]);
                let s = r.state_len;
                if s > 0 {
                    r.states[dst * s..(dst + m) * s]
                        .copy_from_slice(&f.states[src * s..(src + m) * s]);
                    r.starts[dst..dst + m].copy_from_slice(&f.starts[src..src + m]);
                }
                for i in 0..m {
                    if f.truncated[src + i] && !f.terminated[src + i] {
                        self.final_rows.push(dst + i);
                        f.final_obs
                            .extend_into(src + i..src + i + 1, &mut self.final_obs);
                        if s > 0 {
                            // The state after this step: what the next step stored before
                            // its reset, or the worker's carried state after the last.
                            let after = if t + 1 < f.steps {
                                &f.states[(src + m + i) * s..(src + m + i + 1) * s]
                            } else {
                                let end = f.end_state.as_ref().expect("a complete fragment");
                                &end.memory[i * s..(i + 1) * s]
                            };
                            self.final_states.extend_from_slice(after);
                        }
                    }
                }
            }
            for ep in f.episodes.iter().filter(|e| e.counted) {
                books.progress.episodes += 1;
                books.progress.recent_returns.push_back(ep.episode_return);
                if books.progress.recent_returns.len() > config.train.solve_window {
                    books.progress.recent_returns.pop_front();
                }
                self.episode_lengths.push(ep.length);
            }
            self.lags.push(version - f.version);
            let first_sample = books.ledger.as_mut().map(|l| l.add_fragment(&f, w));
            let samples = (f.steps * m) as u64;
            self.fragments.push(SampleGroup {
                rows: RowSpan {
                    first: w * m,
                    width: m,
                    stride: n,
                    count: f.steps,
                },
                version: f.version,
                bucket: config.ledger.bucket.clone(),
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
            let (time, done) = (&mut books.progress.time, &f.time);
            time.env_step += done.env;
            time.frames += done.frames;
            time.summaries += done.summaries;
            time.inference += done.inference;
            time.copies += done.copies;
            time.provenance += done.provenance;
            time.startup += done.startup;
            self.worker_states[w] = f.end_state.take();
            drop(f);
            // The worker holds at most its other slots: this hand-back cannot block.
            self.wiring.give_back(slot)?;
            books.progress.time.rollout += taken.elapsed().as_secs_f64();
        }
        books.progress.time.buffer_wait += waited.as_secs_f64();
        normalizer.merge(&delta);
        books.progress.global_step += (rollout.n_steps * n) as u64;
        Ok(())
    }

    /// Waits for worker `w`'s fragment number `index`. Handles what arrives meanwhile:
    /// fragments of other workers are kept for their turn, stale incarnations' slots are
    /// recycled, failed or silent workers are restarted. Every wait is bounded and logged.
    fn wait_fragment(
        &mut self,
        worker: usize,
        index: u64,
        books: &mut Books<'_>,
    ) -> Result<SlotId, RuntimeError> {
        let started = Instant::now();
        let poll = self.wiring.wait_timeout.min(Duration::from_millis(200));
        let restart_after = Duration::from_secs_f64(self.wiring.config.runtime.restart_after_secs);
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
                    incarnation,
                }) => {
                    let w = &mut self.wiring.workers[slot.worker];
                    if incarnation == w.incarnation {
                        w.next_fragment = i + 1;
                        w.faults.fragment_finished();
                        self.early.insert((i, slot.worker), slot);
                    } else {
                        self.wiring.give_back(slot)?;
                    }
                }
                Ok(WorkerEvent::Abandoned { slot, .. }) => self.wiring.give_back(slot)?,
                Ok(WorkerEvent::Lost {
                    worker: w,
                    slot,
                    index: i,
                    incarnation,
                    error,
                }) => {
                    self.wiring.give_back(slot)?;
                    if incarnation == self.wiring.workers[w].incarnation {
                        self.record_lost(w, i, &error.to_string(), books)?;
                    }
                }
                Ok(WorkerEvent::Failed {
                    worker: w,
                    incarnation,
                    error,
                    holding,
                }) => {
                    if incarnation == self.wiring.workers[w].incarnation {
                        self.restart_worker(w, &error.to_string(), true, books)?;
                    } else if let Some(slot) = holding {
                        self.wiring.give_back(slot)?;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let (silence, activity) =
                        self.wiring.workers[worker].host.heartbeat().silence();
                    // Only a worker stuck in its own work is restarted; one waiting for a
                    // policy or a slot waits on the learner.
                    let working = matches!(activity, Activity::Collecting | Activity::Starting);
                    if silence > restart_after && working {
                        let reason =
                            format!("silent for {silence:.1?} while {}", activity.describe());
                        self.restart_worker(worker, &reason, false, books)?;
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

    /// Counts a fault of worker `w` against its budget ([`FaultBudget`]), recording its
    /// fragment `fragment` invalid (never silently dropped).
    ///
    /// # Errors
    /// [`RuntimeError::Worker`] with the fault's error when the budget is spent.
    fn charge_fault(
        &mut self,
        w: usize,
        fragment: u64,
        reason: &str,
        books: &mut Books<'_>,
    ) -> Result<(), RuntimeError> {
        let handle = &mut self.wiring.workers[w];
        let runtime = &self.wiring.config.runtime;
        if let Some(spent) = handle.faults.charge(runtime, handle.restarts) {
            return Err(RuntimeError::Worker {
                worker: w,
                error: format!("{reason} ({spent})"),
            });
        }
        let incarnation = handle.incarnation;
        books.progress.record_fault(InvalidFragment {
            worker: w,
            incarnation,
            fragment,
            policy_version: self.wiring.store.worker_versions()[w],
            reason: reason.to_string(),
            at_step: books.progress.global_step,
        });
        if let Some(link) = books.ledger.as_mut() {
            // The worker's envs start fresh episodes: their trajectories end unfinished.
            let m = self.wiring.config.env.num_envs / self.wiring.config.runtime.workers;
            link.abandon(w * m..(w + 1) * m);
        }
        Ok(())
    }

    /// Worker `w` lost fragment `fragment` to an env process it restarted in place.
    fn record_lost(
        &mut self,
        w: usize,
        fragment: u64,
        reason: &str,
        books: &mut Books<'_>,
    ) -> Result<(), RuntimeError> {
        self.charge_fault(w, fragment, reason, books)?;
        tracing::warn!(
            component = "learner",
            worker = w,
            fragment,
            reason,
            "an env process failed and was restarted alone; its worker's fragment is recorded invalid"
        );
        Ok(())
    }

    /// Replaces worker `w` after a failure (`failed`) or silence: the fragment it was writing is
    /// recorded invalid (never silently dropped), a new incarnation starts on fresh envs and
    /// continues the fragment numbering. Stops the run when the fault budget is spent.
    fn restart_worker(
        &mut self,
        w: usize,
        reason: &str,
        failed: bool,
        books: &mut Books<'_>,
    ) -> Result<(), RuntimeError> {
        let fragment = self.wiring.workers[w].next_fragment;
        self.charge_fault(w, fragment, reason, books)?;
        let old = &self.wiring.workers[w];
        tracing::error!(
            component = "learner",
            worker = w,
            incarnation = old.incarnation,
            fragment,
            reason,
            "restarting worker; its fragment in progress is recorded invalid"
        );
        old.host.request_exit();
        // Slots the old incarnation cannot give back now: one it still writes (if alive),
        // those holding finished fragments awaiting their turn.
        if !failed {
            // A stuck worker still holds its slot; it comes back in an `Abandoned` (or
            // stale) event when the thread wakes. A failed one has released it already.
            self.wiring.quarantined.extend(old.host.holding());
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
        let (incarnation, restarts) = (old.incarnation + 1, old.restarts + 1);
        let faults = old.faults.clone();
        let mut replacement = self
            .wiring
            .spawn_worker(w, incarnation, None, fragment, &slots)?;
        replacement.restarts = restarts;
        replacement.faults = faults;
        let old = std::mem::replace(&mut self.wiring.workers[w], replacement);
        self.wiring.retired.push(old.host);
        Ok(())
    }
}
