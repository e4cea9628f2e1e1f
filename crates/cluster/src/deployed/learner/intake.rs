//! What the learner takes from the deployed stream: segments to wait for an update,
//! invalidations in force from then on, and what it leaves out.

use std::time::Duration;

use super::{DeployedLearner, Waiting, FETCH};
use crate::deployed::message::{decode_invalidation, decode_segment};
use crate::names::segment_id;
use crate::ClusterError;

impl DeployedLearner<'_> {
    /// Takes what one fetch brings; how many messages.
    pub(super) fn take(&mut self, wait: Duration) -> Result<usize, ClusterError> {
        let delivered = self
            .link
            .fetch_deployed(&self.consumer, FETCH, wait, self.stop)?;
        let n = delivered.len();
        for d in delivered {
            if d.subject.ends_with(".invalidations") {
                match decode_invalidation(&d.payload) {
                    Ok(relayed) => {
                        self.side.invalid.add(relayed.target);
                        self.report.invalidations += 1;
                    }
                    Err(e) => self.unreadable(&e),
                }
                self.settled.push(d.acker);
                continue;
            }
            let arrived = match decode_segment(&d.payload, &self.config_hash, &self.byte_spans) {
                Ok(a) => a,
                Err(e) => {
                    self.unreadable(&e);
                    self.settled.push(d.acker);
                    continue;
                }
            };
            let Some(&first) = arrived.segment.sample_ids.first() else {
                self.settled.push(d.acker);
                continue;
            };
            let id = segment_id(arrived.gateway, first);
            let trained_before = self.side.trained.iter().any(|(_, ids)| ids.contains(&id))
                || self.waiting.iter().any(|w| w.id == id);
            if trained_before {
                self.report.segments_already_trained += 1;
                self.settled.push(d.acker);
                continue;
            }
            let seg = arrived.segment;
            if self.side.invalid.covers(seg.trajectory, &seg.sample_ids) {
                self.left_out(seg.len());
                self.settled.push(d.acker);
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

    /// Takes messages until the consumer has delivered everything stored.
    pub(super) fn drain(&mut self) -> Result<(), ClusterError> {
        loop {
            let n = self.take(Duration::from_millis(20))?;
            if n == 0 && self.link.undelivered(&mut self.consumer)? == 0 {
                return Ok(());
            }
        }
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
