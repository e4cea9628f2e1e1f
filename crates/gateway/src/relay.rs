//! Invalidations on their way to the run's learner in another process: queued in the
//! order they were recorded, numbered, taken by the gateway's feed and marked once stored
//! where the learner reads them. An operator's invalidation waits for its mark.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use strata_ledger::Target;

/// Invalidations the relay queue holds before it drops the oldest (counted).
const RELAY_QUEUE: usize = 1 << 16;

/// Invalidations on their way to a learner in another process (set on with
/// [`RelayQueue::start`]): queued in order, numbered, and marked once the
/// relaying thread has them stored where the learner reads them.
#[derive(Default)]
pub struct RelayQueue {
    on: AtomicBool,
    queue: Mutex<VecDeque<(u64, Target)>>,
    /// The number of the newest invalidation queued.
    queued: AtomicU64,
    /// The number of the newest invalidation relayed (every older one is, too).
    relayed: Mutex<u64>,
    relayed_cond: Condvar,
    /// Invalidations dropped from a full queue (the relay was down that long).
    lost: AtomicU64,
}

impl RelayQueue {
    /// Relays every invalidation from now on to a learner in another process: a
    /// relaying thread takes them ([`RelayQueue::take`]) and marks them relayed.
    pub fn start(&self) {
        self.on.store(true, Ordering::SeqCst);
    }

    /// Whether invalidations are relayed to a learner elsewhere.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }

    /// Queues `target`'s invalidation for relaying (nothing while the relay is off).
    pub fn queue(&self, target: Target) {
        if !self.is_on() {
            return;
        }
        let mut queue = self.queue.lock();
        let number = self.queued.fetch_add(1, Ordering::SeqCst) + 1;
        queue.push_back((number, target));
        if queue.len() > RELAY_QUEUE {
            queue.pop_front();
            self.lost.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                component = "gateway",
                "invalidation relay queue full: the oldest invalidation was not relayed to the learner (it stays in this gateway's ledger)"
            );
        }
    }

    /// The number of the newest invalidation queued for relaying: wait for it with
    /// [`RelayQueue::wait_relayed`] to know every invalidation made so far reached the
    /// learner's stream.
    pub fn mark(&self) -> u64 {
        self.queued.load(Ordering::SeqCst)
    }

    /// Invalidations waiting to be relayed, oldest first, each with its number.
    pub fn take(&self) -> Vec<(u64, Target)> {
        self.queue.lock().drain(..).collect()
    }

    /// Puts invalidations that could not be relayed back at the front, in order.
    pub fn put_back(&self, back: Vec<(u64, Target)>) {
        let mut queue = self.queue.lock();
        for item in back.into_iter().rev() {
            queue.push_front(item);
        }
    }

    /// Every invalidation up to number `upto` is relayed.
    pub fn mark_relayed(&self, upto: u64) {
        let mut relayed = self.relayed.lock();
        *relayed = (*relayed).max(upto);
        self.relayed_cond.notify_all();
    }

    /// Waits at most `timeout` for invalidation number `mark` to be relayed; whether it
    /// was.
    pub fn wait_relayed(&self, mark: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut relayed = self.relayed.lock();
        while *relayed < mark {
            if self
                .relayed_cond
                .wait_until(&mut relayed, deadline)
                .timed_out()
            {
                return *relayed >= mark;
            }
        }
        true
    }

    /// Invalidations dropped from a full relay queue.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relayed_invalidations_are_queued_in_order_and_waited_for() {
        let inbox = crate::LearnerInbox::default();
        let relay = inbox.relay();
        inbox.invalidate(4);
        assert!(relay.take().is_empty(), "not relaying: nothing queued");
        relay.start();
        inbox.invalidate(5);
        inbox.invalidate_samples(10, 12);
        let mark = relay.mark();
        assert!(!relay.wait_relayed(mark, Duration::from_millis(10)));
        let taken = relay.take();
        assert_eq!(
            taken,
            [
                (1, Target::Trajectory { id: 5 }),
                (
                    2,
                    Target::Samples {
                        first: 10,
                        last: 12
                    }
                )
            ]
        );
        relay.put_back(taken.clone());
        assert_eq!(relay.take(), taken, "returned in order");
        relay.mark_relayed(2);
        assert!(relay.wait_relayed(mark, Duration::from_millis(10)));
    }
}
