//! Where and how a ledger writes.

use std::time::Duration;

/// Where and how a ledger writes.
#[derive(Clone, Debug)]
pub struct LedgerConfig {
    /// A directory or an object-store URL.
    pub location: String,
    /// Flush when this many rows are buffered.
    pub flush_rows: usize,
    /// Flush when the oldest buffered row is this old.
    pub flush_interval: Duration,
    /// Messages the writer's queue holds.
    pub queue: usize,
    /// How long an append waits for room in the queue.
    pub send_timeout: Duration,
    /// Recover when opening: remove staged leftovers and compact sample log files left by
    /// an interrupted run. Only one process
    /// may compact a ledger at a time: leave this off for a second handle (an operator's
    /// invalidation) while a run is writing.
    pub compact_on_open: bool,
    /// With `compact_on_open`, compact the sample log this often while writing (a thread
    /// of the ledger's own), so that closing or reopening a ledger written for hours or
    /// weeks compacts only the last stretch: an hour of CartPole training (49M samples)
    /// left a sample log whose compaction at close outlasted the close's wait. `None`:
    /// only when closed or opened.
    pub compact_every: Option<Duration>,
    /// The first sample id an empty ledger hands out (ids stay above it after). Gateways
    /// that feed one learner number their samples from disjoint ranges, so an id names one
    /// sample across all their ledgers.
    pub first_sample_id: u64,
}

impl LedgerConfig {
    /// Defaults for `location`: flush every 64 Ki rows or 1 s.
    pub fn new(location: impl Into<String>) -> Self {
        LedgerConfig {
            location: location.into(),
            flush_rows: 64 * 1024,
            flush_interval: Duration::from_secs(1),
            queue: 256,
            send_timeout: Duration::from_secs(10),
            compact_on_open: true,
            compact_every: Some(Duration::from_secs(60)),
            first_sample_id: 0,
        }
    }
}
