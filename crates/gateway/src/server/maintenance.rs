//! The loops a serving gateway runs beside its requests: every second the idle-episode
//! reaper and journal compaction, every 30 s the version retention rule. Each runs its
//! work off the async workers; both end with the runtime.

use std::sync::Arc;
use std::time::Duration;

use crate::gateway::Gateway;

/// How often a serving gateway applies its version retention rule (its ledger compacts its
/// sample log on a thread of its own, every 30 s).
const RETENTION_EVERY: Duration = Duration::from_secs(30);

/// Starts the loops on the current runtime.
pub(super) fn spawn(gateway: Arc<Gateway>) {
    let reaping = gateway.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let g = reaping.clone();
            let _ = tokio::task::spawn_blocking(move || {
                g.reap_idle();
                if let Err(e) = g.compact_journal() {
                    tracing::error!(component = "gateway", error = %e, "journal compaction failed");
                }
            })
            .await;
        }
    });
    // The version retention rule, applied as versions come.
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RETENTION_EVERY);
        tick.tick().await; // the first tick is at once
        loop {
            tick.tick().await;
            let g = gateway.clone();
            let _ = tokio::task::spawn_blocking(move || match g.sweep_versions() {
                Ok(0) => {}
                Ok(removed) => {
                    tracing::debug!(component = "gateway", removed, "policy versions let go")
                }
                Err(e) => {
                    tracing::error!(component = "gateway", error = %e, "policy version sweep failed; retried later")
                }
            })
            .await;
        }
    });
}
