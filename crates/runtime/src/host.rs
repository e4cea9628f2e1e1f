//! Hosting one logical worker: the one way the runtime starts, feeds and stops a worker,
//! whether it runs as a thread of the learner's process or in a worker process.
//!
//! A [`WorkerHost`] owns what is the worker's own: the queue of free slots handed to it,
//! its command queue, its pulse, the slot it is writing, and its thread (or, behind a
//! transport's launcher, the proxy standing for it), with the lifecycle around them: an
//! `Exit` message, a join bounded in time, and a typed outcome ([`HostStop`]). What it
//! runs on is given: the learner's own store, buffer and event queue for a local worker
//! (the wiring), or a store, buffer and event queue of its own in a worker process
//! ([`HostedWorker`]), which the transport feeds with versions and drains of fragments.
//! Both size them by one rule ([`versions_kept`], [`slots_per_worker`]).

use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::buffer::{ExperienceBuffer, RowWidths, SlotId, WorkerState};
use crate::inference::InferenceClient;
use crate::launcher::WorkerLauncher;
use crate::telemetry::Heartbeat;
use crate::worker::{Holding, WorkerCommand, WorkerEvent, WorkerSetup};
use crate::{RunConfig, RuntimeError};
use strata_learner::{MemoryPolicyStore, PublishedPolicy};

/// Versions a policy store keeps: enough history for a worker `lag` versions behind to
/// find its exact version.
pub(crate) fn versions_kept(config: &RunConfig) -> usize {
    config.effective_lag() as usize + 2
}

/// Buffer slots per worker: one per fragment it may have in flight, the current one plus
/// `lag`.
pub(crate) fn slots_per_worker(config: &RunConfig) -> usize {
    config.effective_lag() as usize + 1
}

/// How a hosted worker ended when it was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostStop {
    /// Its thread ended and was joined.
    Joined,
    /// Its thread did not end within the wait (stuck inside an env); it is left to end
    /// with the process.
    StillRunning,
}

/// What a worker is hosted on: the run's config, the store it adopts versions from, the
/// buffer its slots are in, and where its events go.
pub(crate) struct HostedOn {
    pub(crate) config: Arc<RunConfig>,
    pub(crate) store: Arc<MemoryPolicyStore>,
    pub(crate) buffer: Arc<ExperienceBuffer>,
    pub(crate) events: SyncSender<WorkerEvent>,
    /// The clock its heartbeat counts from.
    pub(crate) epoch: Instant,
}

/// One incarnation of a logical worker to start.
pub(crate) struct Incarnation {
    pub(crate) id: usize,
    pub(crate) incarnation: u64,
    /// Where to start (resume); fresh envs when `None`.
    pub(crate) start: Option<WorkerState>,
    /// The number of its first fragment (a replacement continues the count).
    pub(crate) first_fragment: u64,
    /// The slots it owns now, handed to it at once.
    pub(crate) slots: Vec<SlotId>,
    /// Central inference, when configured.
    pub(crate) inference: Option<InferenceClient>,
    /// Apply the configured fault injection (a first incarnation's, for tests).
    pub(crate) with_fault: bool,
}

/// One logical worker, started: its own queues, pulse and thread, and its lifecycle.
pub struct WorkerHost {
    id: usize,
    to_worker: Arc<ToWorker>,
    handle: JoinHandle<()>,
    heartbeat: Arc<Heartbeat>,
    holding: Arc<Holding>,
}

impl WorkerHost {
    /// Starts `what` on `on` through `launcher` (a thread here, or a transport's proxy).
    ///
    /// # Errors
    /// [`RuntimeError::Thread`] when its thread cannot start.
    pub(crate) fn start(
        on: &HostedOn,
        launcher: &dyn WorkerLauncher,
        what: Incarnation,
    ) -> Result<WorkerHost, RuntimeError> {
        let config = &on.config;
        let (slot_tx, slot_rx) = sync_channel(slots_per_worker(config));
        for slot in &what.slots {
            slot_tx
                .try_send(*slot)
                .expect("a worker never owns more slots than its queue holds");
        }
        let (cmd_tx, cmd_rx) = sync_channel(1);
        let heartbeat = Heartbeat::new(format!("worker-{}", what.id), on.epoch);
        let holding = Arc::new(Holding::default());
        let handle = launcher
            .launch(WorkerSetup {
                id: what.id,
                config: Arc::clone(config),
                buffer: Arc::clone(&on.buffer),
                store: Arc::clone(&on.store),
                free_slots: slot_rx,
                events: on.events.clone(),
                commands: cmd_rx,
                with_fault: what.with_fault,
                start: what.start,
                max_lag: config.sampling_lag(),
                exact: config.exact_versions(),
                wait_timeout: Duration::from_secs_f64(config.runtime.wait_timeout_secs),
                incarnation: what.incarnation,
                heartbeat: Arc::clone(&heartbeat),
                holding: Arc::clone(&holding),
                first_fragment: what.first_fragment,
                inference: what.inference,
            })
            .map_err(|e| RuntimeError::thread(format!("worker {}", what.id), e))?;
        Ok(WorkerHost {
            id: what.id,
            to_worker: Arc::new(ToWorker {
                free_slots: parking_lot::Mutex::new(Some(slot_tx)),
                commands: cmd_tx,
            }),
            handle,
            heartbeat,
            holding,
        })
    }

    /// Its pulse.
    pub fn heartbeat(&self) -> &Arc<Heartbeat> {
        &self.heartbeat
    }

    /// The slot it is writing now, if any.
    pub fn holding(&self) -> Option<SlotId> {
        self.holding.get(self.id)
    }

    /// Hands `slot` back to the worker (the caller marked it free).
    ///
    /// # Errors
    /// The slot, when the queue is full or closed: slot accounting broke.
    pub fn hand_back(&self, slot: SlotId) -> Result<(), SlotId> {
        match &*self.to_worker.free_slots.lock() {
            Some(queue) => queue.try_send(slot).map_err(|e| match e {
                std::sync::mpsc::TrySendError::Full(s)
                | std::sync::mpsc::TrySendError::Disconnected(s) => s,
            }),
            None => Err(slot),
        }
    }

    /// Asks the worker to stop (abandoning a fragment in progress); [`WorkerHost::join`]
    /// waits for it.
    pub fn request_exit(&self) {
        self.to_worker.request_exit();
    }

    /// Waits up to `wait` for the worker's thread to end (after [`WorkerHost::request_exit`],
    /// and with its store closed, which wakes a worker waiting on either) and joins it.
    pub fn join(self, wait: Duration) -> HostStop {
        let WorkerHost {
            handle,
            heartbeat,
            to_worker,
            ..
        } = self;
        // A closed slot queue wakes a worker waiting for a slot at once.
        to_worker.request_exit();
        let deadline = Instant::now() + wait;
        while !handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if !handle.is_finished() {
            tracing::error!(component = "learner", thread = %heartbeat.name, waited = ?wait, "thread did not stop; left to end with the process");
            return HostStop::StillRunning;
        }
        if handle.join().is_err() {
            tracing::error!(component = "learner", thread = %heartbeat.name, "thread panicked outside its guard");
        }
        HostStop::Joined
    }
}

/// The host's queues to its worker. Requesting an exit also closes the slot queue, so a
/// worker (or a transport's proxy) waiting for a slot hears it at once, not at the end of
/// its wait; an exiting incarnation is handed no more slots (its replacement is).
struct ToWorker {
    /// Slots handed back (capacity: the worker's slots); `None` once exit is requested.
    free_slots: parking_lot::Mutex<Option<SyncSender<SlotId>>>,
    /// Commands (capacity 1: only `Exit`).
    commands: SyncSender<WorkerCommand>,
}

impl ToWorker {
    fn request_exit(&self) {
        let _ = self.commands.try_send(WorkerCommand::Exit);
        self.free_slots.lock().take();
    }
}

/// Stops a [`HostedWorker`] from another thread (a transport's stop): its worker is asked
/// to exit and its store closed, which wakes it whatever it waits on; its end then shows
/// in [`HostedWorker::next_event`] as `Disconnected`.
#[derive(Clone)]
pub struct HostedExit {
    to_worker: Arc<ToWorker>,
    store: Arc<MemoryPolicyStore>,
}

impl HostedExit {
    /// Asks the worker to exit now.
    pub fn request(&self) {
        self.to_worker.request_exit();
        self.store.close();
    }
}

/// What a worker process needs to host one logical worker of a run.
pub struct HostSpec<'a> {
    /// The logical worker's id.
    pub id: usize,
    /// The run's config (its lag, sizes, timeouts and `runtime.debug_buffer`).
    pub config: &'a RunConfig,
    /// The version to start with.
    pub initial: PublishedPolicy,
    /// Where to start (a checkpointed worker state), or fresh envs.
    pub start: Option<WorkerState>,
    /// Which incarnation of the worker this is.
    pub incarnation: u64,
    /// The number of its first fragment (a replacement continues the count).
    pub first_fragment: u64,
}

/// One logical worker hosted in a worker process: a [`WorkerHost`] on a policy store,
/// buffer (checked with `runtime.debug_buffer`) and event queue of its own, sized as the
/// learner's wiring sizes them. The transport only moves bytes: fragments out of
/// [`HostedWorker::next_event`], versions into [`HostedWorker::store`].
pub struct HostedWorker {
    host: WorkerHost,
    store: Arc<MemoryPolicyStore>,
    buffer: Arc<ExperienceBuffer>,
    /// Worker -> host: fragments, losses, failures (capacity: its slots; every event
    /// carries or frees a slot, so no send blocks).
    events: Receiver<WorkerEvent>,
    wait_timeout: Duration,
}

impl HostedWorker {
    /// Builds the worker's store, buffer and event queue and starts it on a thread.
    ///
    /// # Errors
    /// [`RuntimeError`] when the store refuses the initial version or the thread cannot
    /// start.
    pub fn start(spec: HostSpec<'_>) -> Result<HostedWorker, RuntimeError> {
        let config = spec.config;
        let env = strata_config::env_spec(config)?;
        let slots = slots_per_worker(config);
        let store = Arc::new(MemoryPolicyStore::new(
            spec.initial,
            config.runtime.workers,
            versions_kept(config),
        )?);
        let buffer = Arc::new(ExperienceBuffer::for_worker(
            spec.id,
            slots,
            config.ppo.n_steps,
            config.env.num_envs / config.runtime.workers,
            RowWidths {
                state: config.network.state_len(),
                ..RowWidths::of(&env)
            },
            config.runtime.debug_buffer,
        ));
        let (events_tx, events) = sync_channel(slots);
        // A process's first incarnation of a fresh worker meets the configured fault.
        let with_fault =
            spec.incarnation == 0 && spec.start.is_none() && spec.id == config.env.fault_worker;
        let on = HostedOn {
            config: Arc::new(config.clone()),
            store: Arc::clone(&store),
            buffer: Arc::clone(&buffer),
            events: events_tx,
            epoch: Instant::now(),
        };
        let host = WorkerHost::start(
            &on,
            &crate::launcher::LocalThreads,
            Incarnation {
                id: spec.id,
                incarnation: spec.incarnation,
                start: spec.start,
                first_fragment: spec.first_fragment,
                slots: buffer.owned_by(spec.id).collect(),
                inference: None,
                with_fault,
            },
        )?;
        Ok(HostedWorker {
            host,
            store,
            buffer,
            events,
            wait_timeout: Duration::from_secs_f64(config.runtime.wait_timeout_secs),
        })
    }

    /// Its policy store: the transport publishes the learner's versions here.
    pub fn store(&self) -> &Arc<MemoryPolicyStore> {
        &self.store
    }

    /// Its buffer: a ready fragment is read from its slot before the slot is handed back.
    pub fn buffer(&self) -> &ExperienceBuffer {
        &self.buffer
    }

    /// Its pulse.
    pub fn heartbeat(&self) -> &Heartbeat {
        self.host.heartbeat()
    }

    /// The worker's next event, waiting at most `timeout`.
    ///
    /// # Errors
    /// `Timeout`, or `Disconnected` once the worker thread has ended.
    pub fn next_event(&self, timeout: Duration) -> Result<WorkerEvent, RecvTimeoutError> {
        self.events.recv_timeout(timeout)
    }

    /// Hands `slot` back to the worker once its fragment has been taken (or lost).
    pub fn hand_back(&self, slot: SlotId) {
        self.buffer.mark_free(slot);
        // The worker owns as many slots as the queue holds: this never fails.
        let _ = self.host.hand_back(slot);
    }

    /// A handle that stops the worker from another thread.
    pub fn exit_handle(&self) -> HostedExit {
        HostedExit {
            to_worker: Arc::clone(&self.host.to_worker),
            store: Arc::clone(&self.store),
        }
    }

    /// Stops the worker (abandoning a fragment in progress) and joins its thread within
    /// `runtime.wait_timeout_secs`.
    pub fn stop(self) -> HostStop {
        self.host.request_exit();
        // Closing the store wakes a worker waiting for a version.
        self.store.close();
        self.host.join(self.wait_timeout)
    }
}
