//! What the writer thread and the ledger handle share: the writer's counters, its last
//! failure, and the one-at-a-time hold on compaction.

use std::sync::atomic::{AtomicBool, AtomicU64};

use parking_lot::Mutex;

use crate::storage::Storage;
use crate::LedgerError;

/// Counters of what the writer did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WriterStats {
    /// Sample rows received.
    pub rows_received: u64,
    /// Sample rows in files.
    pub rows_written: u64,
    /// Repeats of a known idempotency key (not stored as samples).
    pub duplicates: u64,
    /// Invalidations recorded (sent and detected).
    pub invalidations: u64,
    /// Files written.
    pub files_written: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Seconds encoding Parquet.
    pub encode_seconds: f64,
    /// Seconds writing to storage.
    pub write_seconds: f64,
    /// Rows buffered, not yet in files.
    pub rows_buffered: u64,
}

/// State shared between the writer thread and the ledger handle.
#[derive(Default)]
pub(crate) struct Shared {
    pub stats: Mutex<WriterStats>,
    /// The last storage failure, cleared by a successful flush.
    pub failure: Mutex<Option<LedgerError>>,
    /// Rules version stamped on invalidations the writer detects.
    pub rules_version: AtomicU64,
    /// Held by a compaction of the sample log: one at a time (the owner's background
    /// compactions and the one at close); see [`Shared::compact`].
    pub compacting: Mutex<()>,
    /// Raised when the ledger closes: a background compaction gives up between steps
    /// instead of holding up the close (it runs at low priority and may be starved).
    pub background_stop: AtomicBool,
}

impl Shared {
    /// Compacts `storage`'s sample log, one compaction at a time; the rows moved.
    pub(crate) fn compact(&self, storage: &Storage) -> Result<u64, LedgerError> {
        let _one_at_a_time = self.compacting.lock();
        crate::compact::compact(storage)
    }

    /// As [`Shared::compact`], for the background compactor: gives up between steps once
    /// [`Shared::background_stop`] is raised.
    pub(crate) fn compact_in_background(&self, storage: &Storage) -> Result<u64, LedgerError> {
        let _one_at_a_time = self.compacting.lock();
        crate::compact::compact_unless(storage, &self.background_stop)
    }
}
