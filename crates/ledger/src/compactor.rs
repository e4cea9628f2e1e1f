//! Background compaction of an open ledger's sample log: a thread at low priority that
//! compacts every `compact_every` while the writer goes on, and stops between partitions
//! when asked.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{sched, Ledger, LedgerError};

impl Ledger {
    /// Compacts the sample log written so far into generation partitions while the
    /// writer goes on (it only adds log files; compaction takes those it finds), so that
    /// closing or reopening a ledger written for days compacts only the last stretch. For
    /// the ledger's owner: a gateway calls it every half minute. Returns the rows moved.
    ///
    /// # Errors
    /// As [`compact()`]; the log files stay and a later compaction retries them.
    pub fn compact_log(&self) -> Result<u64, LedgerError> {
        self.shared.compact(&self.storage)
    }

    /// Starts the thread that compacts the sample log every `every` until its queue closes.
    pub(crate) fn start_compactor(
        &self,
        every: Duration,
    ) -> Result<(std::sync::mpsc::SyncSender<()>, JoinHandle<()>), LedgerError> {
        let (stop, stopped) = std::sync::mpsc::sync_channel::<()>(0);
        let (storage, shared) = (Arc::clone(&self.storage), Arc::clone(&self.shared));
        let handle = std::thread::Builder::new()
            .name("strata-ledger-compactor".into())
            .spawn(move || {
                sched::lower_priority();
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every)
                {
                    if let Err(e) = shared.compact_in_background(&storage) {
                        tracing::warn!(component = "ledger", error = %e, "compaction failed; retried later");
                    }
                }
            })
            .map_err(|e| LedgerError::Writer(format!("cannot start the compactor thread: {e}")))?;
        Ok((stop, handle))
    }

    /// Stops the compactor thread (after the compaction it may be in).
    pub(crate) fn stop_compactor(&mut self) {
        if let Some((stop, handle)) = self.compactor.take() {
            self.shared.background_stop.store(true, Ordering::Relaxed);
            drop(stop);
            let _ = handle.join();
        }
    }
}
