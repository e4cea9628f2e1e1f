//! What the learner takes from the deployed stream: segments to wait for an update,
//! invalidations in force from then on, and what it leaves out.

use std::time::Duration;

use super::{DeployedLearner, Waiting, FETCH};
use crate::deployed::message::{decode_invalidation, decode_segment};
use crate::names::segment_id;
use crate::ClusterError;

impl DeployedLearner<'_> {
    /// While fewer than two batches of rows wait, what one fetch of segments brings
    /// (waiting at most `wait`); how many messages. Invalidations are taken before each
    /// update ([`DeployedLearner::drain`]).
    pub(super) fn take(&mut self, wait: Duration) -> Result<usize, ClusterError> {
        let batch = self.config.ppo.n_steps * self.config.env.num_envs;
        if self.rows_waiting < 2 * batch {
            return self.take_segments(wait);
        }
        Ok(0)
    }

    /// Invalidations of one fetch: in force from now on, acknowledged with the next
    /// checkpoint (which keeps them).
    fn take_invalidations(&mut self, wait: Duration) -> Result<usize, ClusterError> {
        let delivered = self
            .link
            .fetch_deployed(&self.invalidations, FETCH, wait, self.stop)?;
        let n = delivered.len();
        for d in delivered {
            match decode_invalidation(&d.payload) {
                Ok(relayed) => {
                    self.side.invalid.add(relayed.target);
                    self.report.invalidations += 1;
                }
                Err(e) => self.unreadable(&e),
            }
            self.settled.push(d.acker);
        }
        Ok(n)
    }

    /// Segments of one fetch: each waits for an update, or is acknowledged at once when it
    /// will never be trained (unreadable, trained before, or invalidated; what invalidated
    /// it is in the next checkpoint).
    fn take_segments(&mut self, wait: Duration) -> Result<usize, ClusterError> {
        let delivered = self
            .link
            .fetch_deployed(&self.segments, FETCH, wait, self.stop)?;
        let n = delivered.len();
        let mut done = Vec::new();
        for d in delivered {
            let arrived = match decode_segment(&d.payload, &self.config_hash, &self.byte_spans) {
                Ok(a) => a,
                Err(e) => {
                    self.unreadable(&e);
                    done.push(d.acker);
                    continue;
                }
            };
            let Some(&first) = arrived.segment.sample_ids.first() else {
                done.push(d.acker);
                continue;
            };
            let id = segment_id(arrived.gateway, first);
            let trained_before = self.side.trained.iter().any(|(_, ids)| ids.contains(&id))
                || self.waiting.iter().any(|w| w.id == id);
            if trained_before {
                self.report.segments_already_trained += 1;
                done.push(d.acker);
                continue;
            }
            let seg = arrived.segment;
            if self.side.invalid.covers(seg.trajectory, &seg.sample_ids) {
                self.left_out(seg.len());
                done.push(d.acker);
                continue;
            }
            self.rows_waiting += seg.len();
            self.waiting.push(Waiting {
                segment: seg,
                gateway: arrived.gateway,
                id,
                ack: d.acker,
            });
        }
        if !done.is_empty() {
            self.link.ack_all(&done)?;
        }
        Ok(n)
    }

    pub(super) fn unreadable(&mut self, e: &ClusterError) {
        self.report.unreadable += 1;
        tracing::warn!(component = "learner", error = %e, "a deployed message left out");
    }

    pub(super) fn left_out(&mut self, rows: usize) {
        self.report.segments_invalidated += 1;
        self.skipped_since_update += rows as u64;
    }

    /// Takes invalidations until their consumer has delivered every one stored: one
    /// look at the consumer when none is waiting (the usual case), no wait for a fetch.
    pub(super) fn drain(&mut self) -> Result<(), ClusterError> {
        while self.link.undelivered(&mut self.invalidations)? > 0 {
            self.take_invalidations(Duration::from_millis(20))?;
        }
        Ok(())
    }

    pub(super) fn leave_out_invalidated(&mut self) {
        let waiting = std::mem::take(&mut self.waiting);
        for w in waiting {
            if self
                .side
                .invalid
                .covers(w.segment.trajectory, &w.segment.sample_ids)
            {
                self.rows_waiting -= w.segment.len();
                self.left_out(w.segment.len());
                self.settled.push(w.ack);
            } else {
                self.waiting.push(w);
            }
        }
    }
}
