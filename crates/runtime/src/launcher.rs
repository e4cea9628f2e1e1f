//! The seam between the learner's wiring and whatever runs its rollout workers: threads of
//! this process ([`LocalThreads`]), or proxies of worker processes that a transport starts.
//! Its own module, below both the wiring and the worker host.

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::worker::WorkerSetup;

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
