//! How the ledger's threads are scheduled: the writer keeps its full share without
//! preempting the threads it answers; background compaction yields to everyone.

/// The writer thread keeps its full share of the CPU but does not preempt the threads it
/// wakes up for (Linux's `SCHED_BATCH`). It wakes for every durable append; at normal
/// scheduling each wake-up took a core from a request handler mid-request, which then
/// held the gateway's locks while descheduled. Elsewhere, nothing changes.
pub(crate) fn batch_scheduling() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid `sched_param`; pid 0 is the calling thread.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
        if rc != 0 {
            tracing::debug!(
                component = "ledger",
                "could not set the writer thread's batch scheduling"
            );
        }
    }
}

/// Background compaction can wait; the learner and workers cannot. On Linux the calling
/// thread yields the CPU to them (nice 10); elsewhere it runs at normal priority. Only for
/// work nobody waits on: a thread at nice 10 on a busy machine gets a few percent of a core.
pub(crate) fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // On Linux a thread id names one thread: only the calling thread's priority changes.
        let tid = rustix::thread::gettid();
        if rustix::process::setpriority_process(Some(tid), 10).is_err() {
            tracing::debug!(
                component = "ledger",
                "could not lower a background thread's priority"
            );
        }
    }
}
