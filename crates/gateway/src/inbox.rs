//! What the gateway hands its learner, kept apart by kind so that no request ever waits
//! on the learner: reported steps go on a bounded queue that sheds segments when full
//! (counted in `segments_dropped`); invalidated trajectories and the latest rollback are
//! state the learner reads before each update ([`LearnerInbox`]), set by a request in
//! constant time however busy the learner is.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::segment::Segment;

/// What requests tell the learner besides its segments.
#[derive(Default)]
pub struct LearnerInbox {
    invalidated: Mutex<RecentlyInvalid>,
    rollback: Mutex<Option<u64>>,
    stopping: AtomicBool,
}

impl LearnerInbox {
    /// Trajectory `trajectory` was invalidated: the learner trains on none of its
    /// segments, waiting or to come.
    pub fn invalidate(&self, trajectory: u64) {
        self.invalidated.lock().insert(trajectory);
    }

    /// Whether `trajectory` was invalidated lately.
    pub fn is_invalidated(&self, trajectory: u64) -> bool {
        self.invalidated.lock().contains(trajectory)
    }

    /// Drops the segments of invalidated trajectories from `segments`; the rows dropped.
    pub fn drop_invalidated(&self, segments: &mut Vec<Segment>) -> usize {
        let invalidated = self.invalidated.lock();
        let before: usize = segments.iter().map(Segment::len).sum();
        segments.retain(|s| !invalidated.contains(s.trajectory));
        before - segments.iter().map(Segment::len).sum::<usize>()
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
