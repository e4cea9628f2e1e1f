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

pub use crate::buffer::{ExperienceBuffer, Fragment, SlotId, StepProvenance, WorkerState};
pub use crate::host::{HostSpec, HostStop, HostedExit, HostedWorker, WorkerHost};
pub use crate::launcher::{local, run_worker, LocalThreads, WorkerLauncher};
pub use crate::telemetry::{Activity, Heartbeat};
pub use crate::worker::{Holding, WorkerCommand, WorkerError, WorkerEvent, WorkerSetup};
pub use strata_algo::ObsRows;
pub use strata_learner::MemoryPolicyStore;
