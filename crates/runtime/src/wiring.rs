//! All wiring in one place: the worker threads, the central inference thread and every
//! queue between them and the learner, each with its capacity and who sends what to whom.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::buffer::{ExperienceBuffer, RowWidths, SlotId, WorkerState};
use crate::host::{slots_per_worker, versions_kept, HostedOn, Incarnation, WorkerHost};
use crate::inference::{
    spawn_server, InferenceClient, InferenceSlots, ReplyQueues, Request, ServerSetup,
};
use crate::telemetry::{Activity, Heartbeat, Watchdog};
use crate::transport::WorkerLauncher;
use crate::worker::WorkerEvent;
use crate::{RunConfig, RuntimeError};
use strata_config::Inference;
use strata_learner::{MemoryPolicyStore, PublishedPolicy};

/// One running worker: its host (queues, pulse, thread) and the learner's books on it.
pub(crate) struct WorkerHandle {
    pub(crate) host: WorkerHost,
    pub(crate) incarnation: u64,
    pub(crate) restarts: u32,
    /// Its faults, against the run's budget (carried over to a replacement).
    pub(crate) faults: FaultBudget,
    /// The next fragment number expected from it.
    pub(crate) next_fragment: u64,
}

/// One worker's faults against `runtime.max_consecutive_failures` (a crash loop: failures
/// with no fragment finished between them) and `runtime.max_faults_per_window` (a rate).
/// A long run with sporadic faults spends neither; a crash loop spends the first within
/// seconds.
#[derive(Clone, Debug, Default)]
pub(crate) struct FaultBudget {
    /// Faults since the worker last finished a fragment.
    consecutive: u32,
    /// When its recent faults happened (those within the window).
    recent: std::collections::VecDeque<Instant>,
}

impl FaultBudget {
    /// A fragment was finished: the failures before it were not a loop.
    pub(crate) fn fragment_finished(&mut self) {
        self.consecutive = 0;
    }

    /// Counts one more fault; returns what was spent when this one is past the budget
    /// (or past `max_worker_restarts`, given `restarts` so far).
    pub(crate) fn charge(
        &mut self,
        runtime: &crate::RuntimeConfig,
        restarts: u32,
    ) -> Option<String> {
        let now = Instant::now();
        let window = Duration::from_secs_f64(runtime.fault_window_secs);
        while self
            .recent
            .front()
            .is_some_and(|at| now.duration_since(*at) > window)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        self.consecutive += 1;
        if self.consecutive >= runtime.max_consecutive_failures {
            return Some(format!(
                "{} failures in a row without a finished fragment: a crash loop \
                 (runtime.max_consecutive_failures = {})",
                self.consecutive, runtime.max_consecutive_failures
            ));
        }
        if self.recent.len() > runtime.max_faults_per_window as usize {
            return Some(format!(
                "{} faults within {:?} (runtime.max_faults_per_window = {})",
                self.recent.len(),
                window,
                runtime.max_faults_per_window
            ));
        }
        if let Some(cap) = runtime.max_worker_restarts.filter(|cap| restarts >= *cap) {
            return Some(format!(
                "after {restarts} restarts (runtime.max_worker_restarts = {cap})"
            ));
        }
        None
    }
}

/// The threads and queues. Every queue is created here or in [`Wiring::spawn_worker`].
pub(crate) struct Wiring {
    pub(crate) config: Arc<RunConfig>,
    pub(crate) buffer: Arc<ExperienceBuffer>,
    pub(crate) store: Arc<MemoryPolicyStore>,
    /// Workers -> learner: completed or abandoned fragments and failures (capacity: all
    /// slots, and every event carries or frees a slot, so no send blocks).
    pub(crate) events: Receiver<WorkerEvent>,
    pub(crate) event_tx: SyncSender<WorkerEvent>,
    pub(crate) workers: Vec<WorkerHandle>,
    /// Replaced workers that may still be finishing (a hung env wakes up later).
    pub(crate) retired: Vec<WorkerHost>,
    /// Slots still held by replaced workers; they return through events.
    pub(crate) quarantined: Vec<SlotId>,
    /// Heartbeats the watchdog reads: one per worker, then the learner's.
    pub(crate) beats: Arc<Mutex<Vec<Arc<Heartbeat>>>>,
    pub(crate) learner_beat: Arc<Heartbeat>,
    pub(crate) _watchdog: Watchdog,
    pub(crate) epoch: Instant,
    pub(crate) lag: u64,
    pub(crate) wait_timeout: Duration,
    /// The inference thread and its queues, with `runtime.inference = "central"`.
    pub(crate) central: Option<Central>,
    /// Where workers run: threads here, or processes reached through a transport.
    pub(crate) launcher: Arc<dyn WorkerLauncher>,
}

/// The central inference thread's side of the wiring.
pub(crate) struct Central {
    pub(crate) slots: Arc<InferenceSlots>,
    /// Workers -> inference thread (capacity: one request per group of every worker).
    pub(crate) requests: SyncSender<Request>,
    /// Inference thread -> each worker (capacity: its groups); replaced on restart.
    pub(crate) replies: ReplyQueues,
    pub(crate) handle: JoinHandle<()>,
}

impl Wiring {
    /// Creates the buffer, the policy store (holding `initial`), every queue, the watchdog
    /// and (with central inference) the inference thread, then starts one worker per entry
    /// of `starts` (from its saved state, or fresh) through `launcher`.
    ///
    /// # Errors
    /// An env error, or [`RuntimeError::Config`] when a thread cannot start.
    pub(crate) fn start(
        config: &RunConfig,
        initial: PublishedPolicy,
        starts: Vec<Option<WorkerState>>,
        launcher: Arc<dyn WorkerLauncher>,
    ) -> Result<Wiring, RuntimeError> {
        let spec = strata_config::env_spec(config)?;
        let workers = config.runtime.workers;
        let per_worker_envs = config.env.num_envs / workers;
        let lag = config.effective_lag();
        let store = Arc::new(MemoryPolicyStore::new(
            initial,
            workers,
            versions_kept(config),
        )?);
        let slots_per_worker = slots_per_worker(config);
        let buffer = Arc::new(ExperienceBuffer::new(
            workers,
            slots_per_worker,
            config.ppo.n_steps,
            per_worker_envs,
            RowWidths {
                state: config.network.state_len(),
                ..RowWidths::of(&spec)
            },
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
        .map_err(|e| RuntimeError::thread("the watchdog", e))?;
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
            let heartbeat = Heartbeat::new("inference", epoch);
            beats.lock().insert(0, Arc::clone(&heartbeat));
            let handle = spawn_server(ServerSetup {
                config: Arc::new(config.clone()),
                slots: Arc::clone(&slots),
                store: Arc::clone(&store),
                requests: requests_rx,
                replies: Arc::clone(&replies),
                heartbeat,
                wait_timeout,
                versions_kept: versions_kept(config),
            })
            .map_err(|e| RuntimeError::thread("the inference thread", e))?;
            Some(Central {
                slots,
                requests,
                replies,
                handle,
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
            launcher,
        };
        for (id, start) in starts.into_iter().enumerate() {
            let slots: Vec<SlotId> = buffer.owned_by(id).collect();
            let handle = wiring.spawn_worker(id, 0, start, 0, &slots)?;
            wiring.workers.push(handle);
        }
        Ok(wiring)
    }

    /// Starts incarnation `incarnation` of worker `id` (0 first, +1 per restart) owning `slots`,
    /// hosted on the learner's store, buffer and event queue.
    pub(crate) fn spawn_worker(
        &self,
        id: usize,
        incarnation: u64,
        start: Option<WorkerState>,
        first_fragment: u64,
        slots: &[SlotId],
    ) -> Result<WorkerHandle, RuntimeError> {
        let next_fragment = start.as_ref().map_or(first_fragment, |s| s.fragments);
        let inference = self.central.as_ref().map(|c| {
            let (reply_tx, reply_rx) = sync_channel(self.config.groups_per_worker());
            let mut replies = c.replies.lock();
            if id < replies.len() {
                replies[id] = reply_tx;
            } else {
                replies.push(reply_tx);
            }
            InferenceClient {
                worker: id,
                incarnation,
                slots: Arc::clone(&c.slots),
                requests: c.requests.clone(),
                replies: reply_rx,
                early: std::cell::Cell::new(0),
                outstanding: std::cell::Cell::new(0),
            }
        });
        let on = HostedOn {
            config: Arc::clone(&self.config),
            store: Arc::clone(&self.store),
            buffer: Arc::clone(&self.buffer),
            events: self.event_tx.clone(),
            epoch: self.epoch,
        };
        let host = WorkerHost::start(
            &on,
            self.launcher.as_ref(),
            Incarnation {
                id,
                incarnation,
                start,
                first_fragment,
                slots: slots.to_vec(),
                inference,
                with_fault: incarnation == 0 && id == self.config.env.fault_worker,
            },
        )?;
        {
            // Workers' heartbeats come first, in worker order.
            let mut beats = self.beats.lock();
            let heartbeat = Arc::clone(host.heartbeat());
            if incarnation == 0 {
                beats.insert(id, heartbeat);
            } else {
                beats[id] = heartbeat;
            }
        }
        Ok(WorkerHandle {
            host,
            incarnation,
            restarts: 0,
            faults: FaultBudget::default(),
            next_fragment,
        })
    }

    /// Hands a free slot to its worker's current incarnation.
    pub(crate) fn give_back(&mut self, slot: SlotId) -> Result<(), RuntimeError> {
        self.quarantined.retain(|s| *s != slot);
        self.buffer.mark_free(slot);
        self.workers[slot.worker]
            .host
            .hand_back(slot)
            .map_err(|_| RuntimeError::Worker {
                worker: slot.worker,
                error: "its slot queue is full or closed (slot accounting broke)".into(),
            })
    }

    /// Stops every worker (abandoning fragments in progress) and joins them, each within
    /// `runtime.wait_timeout_secs`; a thread stuck inside an env beyond that is reported
    /// and left to end with the process.
    pub(crate) fn shutdown(&mut self) {
        for w in &self.workers {
            w.host.request_exit();
        }
        // Closing the store (and, as each is joined, the slot queues) wakes every waiting
        // worker at once.
        self.store.close();
        let hosts = self
            .workers
            .drain(..)
            .map(|w| w.host)
            .chain(self.retired.drain(..));
        for host in hosts.collect::<Vec<_>>() {
            host.join(self.wait_timeout);
        }
        if let Some(central) = self.central.take() {
            // The workers' copies are gone with them: dropping the last sender closes the
            // request queue, which stops the inference thread.
            let Central {
                requests, handle, ..
            } = central;
            drop(requests);
            join_within(handle, "inference", self.wait_timeout);
        }
        self.launcher.finish();
        self.learner_beat.beat(Activity::Stopped);
    }
}

/// Joins `handle` if its thread ends within `wait`; else reports it and leaves it to end
/// with the process (a thread stuck inside an env cannot be stopped from outside).
fn join_within(handle: JoinHandle<()>, name: &str, wait: Duration) {
    let deadline = Instant::now() + wait;
    while !handle.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    if !handle.is_finished() {
        tracing::error!(component = "learner", thread = %name, waited = ?wait, "thread did not stop; left to end with the process");
    } else if handle.join().is_err() {
        tracing::error!(component = "learner", thread = %name, "thread panicked outside its guard");
    }
}
