//! What a rollout worker and its host say to each other: commands in, events out, the
//! slot it holds, and everything it is started with.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use crate::buffer::{ExperienceBuffer, SlotId, WorkerState};
use crate::inference::InferenceClient;
use crate::telemetry::Heartbeat;
use crate::RunConfig;
use strata_learner::{MemoryPolicyStore, StoreError};

/// Learner -> worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerCommand {
    /// Abandon the current fragment and stop.
    Exit,
}

/// Why a worker stopped; the learner restarts it and records its fragment invalid.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Its env failed (NaN, bad action).
    #[error(transparent)]
    Env(#[from] strata_env::EnvError),
    /// A policy version could not be adopted (corrupt, missing).
    #[error("policy: {0}")]
    Policy(#[from] StoreError),
    /// The model refused a version's parameters.
    #[error("model: {0}")]
    Model(#[from] strata_nn::NnError),
    /// Its envs or model could not be built from the config.
    #[error(transparent)]
    Runtime(#[from] crate::RuntimeError),
    /// A saved state that does not fit the config.
    #[error("{0}")]
    State(String),
    /// Central inference failed.
    #[error("inference: {0}")]
    Inference(#[from] crate::inference::InferenceError),
    /// It panicked.
    #[error("panicked: {0}")]
    Panic(String),
    /// It runs in another process, which failed or fell silent (what its transport says).
    #[error("worker process: {0}")]
    Remote(String),
}

impl From<strata_config::ConfigError> for WorkerError {
    /// A config that could not build what it asks for: as the run reports it.
    fn from(e: strata_config::ConfigError) -> Self {
        WorkerError::Runtime(e.into())
    }
}

/// Worker -> learner.
#[derive(Debug)]
pub enum WorkerEvent {
    /// A fragment is complete in `slot`.
    FragmentReady {
        /// Where it is.
        slot: SlotId,
        /// The worker's fragment counter for it.
        index: u64,
        /// Which incarnation of the worker wrote it (restarts increment it).
        incarnation: u64,
    },
    /// The worker stopped mid-fragment on `Exit`; the slot is free again.
    Abandoned {
        /// The slot it held.
        slot: SlotId,
        /// Its incarnation.
        incarnation: u64,
    },
    /// The fragment numbered `index` was lost to an env process that failed; the worker
    /// restarted that process alone, reset its envs and collects the same number again.
    /// The slot is free again.
    Lost {
        /// Which worker.
        worker: usize,
        /// The slot it was writing.
        slot: SlotId,
        /// The fragment number lost (and collected anew).
        index: u64,
        /// Its incarnation.
        incarnation: u64,
        /// What failed.
        error: WorkerError,
    },
    /// The worker stopped on an error (env NaN, panic, bad policy); the learner decides.
    Failed {
        /// Which worker.
        worker: usize,
        /// Its incarnation.
        incarnation: u64,
        /// What went wrong.
        error: WorkerError,
        /// The slot it was writing, now free.
        holding: Option<SlotId>,
    },
}

/// Which slot a worker is writing (`index + 1`, or 0), readable by the learner.
#[derive(Debug, Default)]
pub struct Holding(AtomicUsize);

impl Holding {
    /// Records the slot being written (none between fragments).
    pub fn set(&self, slot: Option<SlotId>) {
        self.0
            .store(slot.map_or(0, |s| s.index + 1), Ordering::Release);
    }

    /// The slot held, if any, for worker `worker`.
    pub fn get(&self, worker: usize) -> Option<SlotId> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            i => Some(SlotId {
                worker,
                index: i - 1,
            }),
        }
    }
}

/// Everything a worker thread is given; built in one place by the trainer.
pub struct WorkerSetup {
    /// Worker id (also fixes which envs it owns).
    pub id: usize,
    /// The run's config.
    pub config: Arc<RunConfig>,
    /// Shared fragment slots.
    pub buffer: Arc<ExperienceBuffer>,
    /// Published policies.
    pub store: Arc<MemoryPolicyStore>,
    /// Slots handed back by the learner (capacity: the worker's slot count).
    pub free_slots: Receiver<SlotId>,
    /// Completed fragments (capacity: all slots, so a send never blocks).
    pub events: SyncSender<WorkerEvent>,
    /// Commands from the learner.
    pub commands: Receiver<WorkerCommand>,
    /// Where to start (resume); fresh envs when `None`.
    pub start: Option<WorkerState>,
    /// Fragment `u` is collected with a version of at least `u - max_lag`.
    pub max_lag: u64,
    /// Adopt exactly version `u - max_lag` (deterministic mode) rather than the newest
    /// published once a slot is in hand.
    pub exact: bool,
    /// How long a blocking wait lasts before it is logged.
    pub wait_timeout: Duration,
    /// Incarnation: 0 at start, +1 per restart.
    pub incarnation: u64,
    /// Apply the configured fault injection (never for a restarted worker).
    pub with_fault: bool,
    /// This worker's pulse.
    pub heartbeat: Arc<Heartbeat>,
    /// The slot being written, for recovery after a failure.
    pub holding: Arc<Holding>,
    /// Number of the first fragment to produce (a replacement continues the count).
    pub first_fragment: u64,
    /// Central inference, when configured; otherwise the worker runs its own model copy.
    pub inference: Option<InferenceClient>,
}
