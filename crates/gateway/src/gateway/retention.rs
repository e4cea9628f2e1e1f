//! Which policy versions stay on disk. A gateway whose learner publishes several versions
//! a second would otherwise keep every one of them (about 50 GB a day of CartPole-sized
//! versions); most were never served, replaced while they waited out the cooldown.

use super::*;

/// The newest versions always kept, whatever else holds: rollback and promote targets,
/// the learner's base.
pub const KEEP_RECENT: u64 = 64;

/// The rule, in words (also in refusals of a version that was let go).
pub(crate) const RULE: &str = "the gateway keeps every version an episode ran (its samples \
refer to it), every version an operator published, promoted or rolled back to, the stable \
and candidate versions and those waiting out their cooldown, the starting version 0 and \
the newest 64; the rest are removed";

impl Gateway {
    /// Applies the retention rule to the versions not decided yet, up to the newest
    /// [`KEEP_RECENT`]: each is kept for good or removed. Returns how many were removed.
    ///
    /// # Errors
    /// A version file that cannot be removed, or the journal's failure (the sweep is
    /// retried from the same version next time).
    pub fn sweep_versions(&self) -> Result<u64, RequestError> {
        let mut state = self.state.lock();
        state.release.refresh(now_ns());
        let horizon = state.release.latest.saturating_sub(KEEP_RECENT);
        let first = state.release.retention.decided_upto + 1;
        if horizon < first {
            return Ok(0);
        }
        let mut removed = 0;
        for version in first..=horizon {
            if !state.release.keeps(version)
                && self
                    .policies
                    .remove(version)
                    .map_err(|e| RequestError::unavailable(e.to_string()))?
            {
                removed += 1;
            }
        }
        // Removed first, decided after: a crash in between sweeps the same versions again.
        state.release.retention.decide_upto(horizon);
        self.journal_release(&state)?;
        self.counters
            .versions_removed
            .fetch_add(removed, Ordering::Relaxed);
        Ok(removed)
    }
}
