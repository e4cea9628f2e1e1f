//! What a transport needs to run rollout workers outside the learner's process.
//!
//! The learner sees every worker through the same queues and slots (the wiring): it hands
//! a worker free slots, reads `WorkerEvent`s, watches its heartbeat, and restarts it as a
//! new incarnation when it fails or falls silent. A [`WorkerLauncher`] decides what runs
//! behind them: [`LocalThreads`] starts the rollout worker itself as a thread (the default,
//! one process); a transport (`strata-cluster`, over NATS JetStream) starts a proxy that
//! fills the slots with fragments collected by worker processes elsewhere and turns their
//! reports into the same events. A worker process, for its part, runs the unchanged
//! rollout worker ([`run_worker`]) against a buffer and policy store of its own.

use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::buffer::{ExperienceBuffer, Fragment, SlotId, StepProvenance, WorkerState};
pub use crate::policy_store::MemoryPolicyStore;
pub use crate::telemetry::{Activity, Heartbeat};
pub use crate::worker::{Holding, WorkerCommand, WorkerError, WorkerEvent, WorkerSetup};

/// Starts what stands behind one logical worker of a run.
pub trait WorkerLauncher: Send + Sync {
    /// Starts incarnation `setup.incarnation` of worker `setup.id`: it must fill the slots
    /// it receives on `setup.free_slots` with fragments numbered from
    /// `setup.first_fragment` (or from `setup.start`'s count), report each on
    /// `setup.events`, keep `setup.heartbeat` beating, and stop on `WorkerCommand::Exit`.
    ///
    /// # Errors
    /// When its thread cannot be started.
    fn launch(&self, setup: WorkerSetup) -> std::io::Result<JoinHandle<()>>;

    /// Every fragment consumed by the first `updates` updates is now durable in a
    /// checkpoint (called after each one is written): a transport may acknowledge them.
    fn durable(&self, _updates: u64) {}

    /// The run is over and every worker it launched has stopped (the policy store is
    /// closed): finish what the transport still owes, within a bounded wait, and join its
    /// threads. Called once the workers are joined, possibly more than once.
    fn finish(&self) {}
}

/// Rollout workers as threads of the learner's process.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalThreads;

impl WorkerLauncher for LocalThreads {
    fn launch(&self, setup: WorkerSetup) -> std::io::Result<JoinHandle<()>> {
        run_worker(setup)
    }
}

/// The launcher of a run in one process.
pub fn local() -> Arc<dyn WorkerLauncher> {
    Arc::new(LocalThreads)
}

/// Runs the rollout worker for `setup` on a thread of this process (a worker process's
/// threads are these too).
///
/// # Errors
/// When the OS cannot start a thread.
pub fn run_worker(setup: WorkerSetup) -> std::io::Result<JoinHandle<()>> {
    crate::worker::spawn(setup)
}

/// What a host needs to run one logical worker of a run.
pub struct HostSpec<'a> {
    /// The logical worker's id.
    pub id: usize,
    /// The run's config (its lag, sizes, timeouts and `runtime.debug_buffer`).
    pub config: &'a crate::RunConfig,
    /// The version to start with.
    pub initial: crate::PublishedPolicy,
    /// Where to start (a checkpointed worker state), or fresh envs.
    pub start: Option<WorkerState>,
    /// Which incarnation of the worker this is.
    pub incarnation: u64,
    /// The number of its first fragment (a replacement continues the count).
    pub first_fragment: u64,
    /// Apply the configured fault injection.
    pub with_fault: bool,
}

/// How a hosted worker ended when it was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostStop {
    /// Its thread ended and was joined.
    Joined,
    /// Its thread did not end within `runtime.wait_timeout_secs` (stuck inside an env);
    /// it is left to end with the process.
    StillRunning,
}

/// One logical worker hosted in this process, wired as the learner's wiring wires a local
/// worker: a policy store keeping the versions a lagging worker may need, one buffer slot
/// per fragment it may have in flight (checked with `runtime.debug_buffer`), bounded queues
/// for slots, events and commands, and the rollout worker on them. A worker process hosts
/// each logical worker it claims this way, so the transport only moves bytes: fragments
/// out of [`HostedWorker::next_event`], versions into [`HostedWorker::store`].
pub struct HostedWorker {
    store: Arc<MemoryPolicyStore>,
    buffer: Arc<ExperienceBuffer>,
    heartbeat: Arc<Heartbeat>,
    /// Host -> worker: slots handed back (capacity: its slots).
    free_slots: SyncSender<SlotId>,
    /// Worker -> host: fragments, losses, failures (capacity: its slots; every event
    /// carries or frees a slot, so no send blocks).
    events: Receiver<WorkerEvent>,
    /// Host -> worker: `Exit` (capacity 1).
    commands: SyncSender<WorkerCommand>,
    handle: JoinHandle<()>,
    wait_timeout: Duration,
}

impl HostedWorker {
    /// Builds the worker's store, buffer and queues and starts it.
    ///
    /// # Errors
    /// [`crate::RuntimeError`] when the store refuses the initial version or the thread
    /// cannot start.
    pub fn start(spec: HostSpec<'_>) -> Result<HostedWorker, crate::RuntimeError> {
        let config = spec.config;
        let env = crate::factory::env_spec(config)?;
        let lag = config.effective_lag();
        let slots = crate::wiring::slots_per_worker(config);
        let store = Arc::new(MemoryPolicyStore::new(
            spec.initial,
            config.runtime.workers,
            crate::wiring::versions_kept(config),
        )?);
        let buffer = Arc::new(ExperienceBuffer::for_worker(
            spec.id,
            slots,
            config.ppo.n_steps,
            config.env.num_envs / config.runtime.workers,
            env.obs_dim(),
            env.action_dim(),
            config.runtime.debug_buffer,
        ));
        let (slot_tx, slot_rx) = sync_channel(slots);
        for slot in buffer.owned_by(spec.id) {
            slot_tx.try_send(slot).expect("room for every slot");
        }
        let (event_tx, events) = sync_channel(slots);
        let (command_tx, commands) = sync_channel(1);
        let heartbeat = Heartbeat::new(format!("worker-{}", spec.id), Instant::now());
        let wait_timeout = Duration::from_secs_f64(config.runtime.wait_timeout_secs);
        let handle = run_worker(WorkerSetup {
            id: spec.id,
            config: Arc::new(config.clone()),
            buffer: Arc::clone(&buffer),
            store: Arc::clone(&store),
            free_slots: slot_rx,
            events: event_tx,
            commands,
            start: spec.start,
            max_lag: lag,
            exact: config.exact_versions(),
            wait_timeout,
            incarnation: spec.incarnation,
            with_fault: spec.with_fault,
            heartbeat: Arc::clone(&heartbeat),
            holding: Arc::new(Holding::default()),
            first_fragment: spec.first_fragment,
            inference: None,
        })
        .map_err(|e| crate::RuntimeError::thread(format!("worker {}", spec.id), e))?;
        Ok(HostedWorker {
            store,
            buffer,
            heartbeat,
            free_slots: slot_tx,
            events,
            commands: command_tx,
            handle,
            wait_timeout,
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
        &self.heartbeat
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
        // The worker owns as many slots as the queue holds: this never blocks.
        let _ = self.free_slots.try_send(slot);
    }

    /// Stops the worker (abandoning a fragment in progress) and joins its thread within
    /// `runtime.wait_timeout_secs`.
    pub fn stop(self) -> HostStop {
        let _ = self.commands.try_send(WorkerCommand::Exit);
        // Closing the store and the slot queue wakes a worker waiting on either.
        self.store.close();
        drop(self.free_slots);
        let deadline = Instant::now() + self.wait_timeout;
        while !self.handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if self.handle.is_finished() {
            let _ = self.handle.join();
            HostStop::Joined
        } else {
            tracing::error!(component = "worker", waited = ?self.wait_timeout, "a hosted worker did not stop; left to end with the process");
            HostStop::StillRunning
        }
    }
}
