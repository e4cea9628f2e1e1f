//! What the gateway hands its learner, kept apart by kind so that no request ever waits
//! on the learner: reported steps go on a bounded queue that sheds segments when full
//! (counted in `segments_dropped`); invalidated trajectories and the latest rollback are
//! state the learner reads before each update ([`LearnerInbox`]), set by a request in
//! constant time however busy the learner is.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use strata_ledger::Target;

use crate::relay::RelayQueue;

use crate::segment::Segment;

/// What requests tell the learner besides its segments.
#[derive(Default)]
pub struct LearnerInbox {
    invalidated: Mutex<RecentlyInvalid>,
    /// Sample ranges invalidated lately (an operator's `first_sample..=last_sample`).
    ranges: Mutex<VecDeque<(u64, u64)>>,
    rollback: Mutex<Option<u64>>,
    stopping: AtomicBool,
    relay: RelayQueue,
}

impl LearnerInbox {
    /// Trajectory `trajectory` was invalidated: the learner trains on none of its
    /// segments, waiting or to come.
    pub fn invalidate(&self, trajectory: u64) {
        self.invalidated.lock().insert(trajectory);
        self.relay.queue(Target::Trajectory { id: trajectory });
    }

    /// Samples `first..=last` were invalidated: the learner trains on no segment holding
    /// one of them.
    pub fn invalidate_samples(&self, first: u64, last: u64) {
        let mut ranges = self.ranges.lock();
        ranges.push_back((first, last));
        if ranges.len() > RANGES_REMEMBERED {
            ranges.pop_front();
        }
        drop(ranges);
        self.relay.queue(Target::Samples { first, last });
    }

    /// Whether `trajectory` was invalidated lately.
    pub fn is_invalidated(&self, trajectory: u64) -> bool {
        self.invalidated.lock().contains(trajectory)
    }

    /// Whether `segment` holds a sample invalidated lately, or is of such a trajectory.
    pub fn holds_invalidated(&self, segment: &Segment) -> bool {
        self.invalidated.lock().contains(segment.trajectory)
            || Self::holds_invalid(&self.ranges.lock(), segment)
    }

    /// Drops the segments of invalidated trajectories, and those holding an invalidated
    /// sample, from `segments`; the rows dropped.
    pub fn drop_invalidated(&self, segments: &mut Vec<Segment>) -> usize {
        let invalidated = self.invalidated.lock();
        let ranges = self.ranges.lock();
        let before: usize = segments.iter().map(Segment::len).sum();
        segments
            .retain(|s| !invalidated.contains(s.trajectory) && !Self::holds_invalid(&ranges, s));
        before - segments.iter().map(Segment::len).sum::<usize>()
    }

    fn holds_invalid(ranges: &VecDeque<(u64, u64)>, segment: &Segment) -> bool {
        // A segment's ids ascend; one comparison of its span per range.
        let (Some(&low), Some(&high)) = (segment.sample_ids.first(), segment.sample_ids.last())
        else {
            return false;
        };
        ranges.iter().any(|&(first, last)| {
            first <= high
                && last >= low
                && segment
                    .sample_ids
                    .iter()
                    .any(|&id| (first..=last).contains(&id))
        })
    }

    /// The relay queue of invalidations to a learner in another process (off unless a
    /// gateway of a run that spans machines turns it on).
    pub fn relay(&self) -> &RelayQueue {
        &self.relay
    }

    /// An operator rolled back to `version`: the learner continues from it (a later
    /// rollback replaces one not applied yet).
    pub fn roll_back(&self, version: u64) {
        *self.rollback.lock() = Some(version);
    }

    /// The rollback not applied yet, if any (taken).
    pub fn take_rollback(&self) -> Option<u64> {
        self.rollback.lock().take()
    }

    /// The gateway is stopping: the learner ends after the update it is in, training none
    /// of the segments still queued (their samples stay in the ledger, never trained on).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether the gateway is stopping.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// Sample ranges the inbox remembers: the learner's waiting segments are recent, and an
/// operator invalidates ranges rarely.
const RANGES_REMEMBERED: usize = 1 << 12;

/// Trajectories invalidated lately. Bounded: a trajectory's segments arrive within its
/// episode, so the oldest entries can be forgotten.
#[derive(Default)]
struct RecentlyInvalid {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl RecentlyInvalid {
    const CAPACITY: usize = 1 << 16;

    fn insert(&mut self, trajectory: u64) {
        if self.set.insert(trajectory) {
            self.order.push_back(trajectory);
            if self.order.len() > Self::CAPACITY {
                let oldest = self.order.pop_front().expect("non-empty");
                self.set.remove(&oldest);
            }
        }
    }

    fn contains(&self, trajectory: u64) -> bool {
        self.set.contains(&trajectory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recently_invalid_forgets_the_oldest_beyond_its_capacity() {
        let mut r = RecentlyInvalid::default();
        let n = RecentlyInvalid::CAPACITY as u64;
        for t in 0..=n {
            r.insert(t);
            r.insert(t); // repeats change nothing
        }
        assert!(!r.contains(0), "the oldest is forgotten");
        assert!(r.contains(1) && r.contains(n));
        assert_eq!(r.order.len(), RecentlyInvalid::CAPACITY);
    }

    #[test]
    fn the_latest_rollback_is_taken_once() {
        let inbox = LearnerInbox::default();
        assert_eq!(inbox.take_rollback(), None);
        inbox.roll_back(3);
        inbox.roll_back(2);
        assert_eq!(inbox.take_rollback(), Some(2));
        assert_eq!(inbox.take_rollback(), None);
    }
}
