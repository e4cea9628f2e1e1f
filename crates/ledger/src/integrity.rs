//! The writer's integrity rules, pure: no storage, no threads, no clock. A repeated
//! idempotency key is a duplicate of the first sample that carried it (among the last
//! [`KEY_WINDOW`] keys); within a trajectory the policy version must not change and the env
//! clock must move forward. The writer applies the verdicts (duplicate records,
//! invalidations).

use std::collections::{HashMap, VecDeque};

use crate::record::ReasonCode;

/// Trajectories not seen for this many batches are forgotten (bounds memory).
const FORGET_AFTER_BATCHES: u64 = 4096;

/// Idempotency keys remembered for duplicate detection: the newest this many (about
/// 12 MB). A repeated report comes within seconds of its first; beyond the window a
/// gateway's remembered actions (100,000 by default) answer it before it reaches the
/// ledger. Bounded so that a ledger written for weeks costs the same memory as one
/// written for an hour, and so that reopening reads only the newest files' keys.
pub const KEY_WINDOW: usize = 1 << 18;

/// The newest [`KEY_WINDOW`] keys, each as a 128-bit hash (a collision among a window's
/// keys has odds near 2^-92) with the sample that first carried it.
#[derive(Default)]
pub(crate) struct KeyWindow {
    first: HashMap<u128, u64>,
    order: VecDeque<u128>,
}

impl KeyWindow {
    /// The window of `keys` (key, sample), given oldest first.
    pub(crate) fn of(keys: impl IntoIterator<Item = (String, u64)>) -> Self {
        let mut window = KeyWindow::default();
        for (key, sample) in keys {
            window.insert_new(&key, sample);
        }
        window
    }

    fn hash(key: &str) -> u128 {
        xxhash_rust::xxh3::xxh3_128(key.as_bytes())
    }

    /// The sample that first carried `key`, if remembered.
    pub(crate) fn get(&self, key: &str) -> Option<u64> {
        self.first.get(&Self::hash(key)).copied()
    }

    /// Remembers `key` as first carried by `sample` unless it is already, forgetting the
    /// oldest key beyond the window.
    fn insert_new(&mut self, key: &str, sample: u64) {
        let h = Self::hash(key);
        if let std::collections::hash_map::Entry::Vacant(slot) = self.first.entry(h) {
            slot.insert(sample);
            self.order.push_back(h);
            if self.order.len() > KEY_WINDOW {
                let oldest = self.order.pop_front().expect("non-empty");
                self.first.remove(&oldest);
            }
        }
    }

    /// Keys remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.order.len()
    }
}

/// What one row says about its trajectory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowFacts {
    pub sample: u64,
    pub trajectory: u64,
    pub version: u64,
    pub clock: u64,
    /// The episode ended on this row (terminated or truncated).
    pub ends: bool,
}

#[derive(Clone, Copy)]
struct TrajectoryState {
    version: u64,
    clock: u64,
    seen: u64,
}

/// What the rules remember: the newest idempotency keys' first samples, and each open
/// trajectory's last version and clock.
#[derive(Default)]
pub(crate) struct Integrity {
    keys: KeyWindow,
    trajectories: HashMap<u64, TrajectoryState>,
    batches: u64,
}

impl Integrity {
    /// Starts with the newest keys already stored.
    pub(crate) fn new(keys: KeyWindow) -> Self {
        Integrity {
            keys,
            ..Integrity::default()
        }
    }

    /// A new batch begins; now and then, trajectories silent for long are forgotten.
    pub(crate) fn next_batch(&mut self) {
        self.batches += 1;
        if self.batches.is_multiple_of(256) {
            let horizon = self.batches.saturating_sub(FORGET_AFTER_BATCHES);
            self.trajectories.retain(|_, s| s.seen >= horizon);
        }
    }

    /// The sample that first carried `key`, if any (then `sample` is its duplicate);
    /// otherwise `key` now belongs to `sample`.
    pub(crate) fn original_of(&mut self, key: &str, sample: u64) -> Option<u64> {
        if let Some(original) = self.keys.get(key) {
            return Some(original);
        }
        self.keys.insert_new(key, sample);
        None
    }

    /// Checks a row against its trajectory so far; returns the violation, if any.
    pub(crate) fn check(&mut self, row: RowFacts) -> Option<(ReasonCode, String)> {
        let previous = self.trajectories.insert(
            row.trajectory,
            TrajectoryState {
                version: row.version,
                clock: row.clock,
                seen: self.batches,
            },
        );
        if row.ends {
            self.trajectories.remove(&row.trajectory);
        }
        let p = previous?;
        if p.version != row.version {
            Some((
                ReasonCode::VersionSwitch,
                format!(
                    "policy version changed from {} to {} at sample {}",
                    p.version, row.version, row.sample
                ),
            ))
        } else if row.clock <= p.clock {
            Some((
                ReasonCode::ObservationMisaligned,
                format!(
                    "env clock went from {} to {} at sample {}",
                    p.clock, row.clock, row.sample
                ),
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sample: u64, trajectory: u64, version: u64, clock: u64, ends: bool) -> RowFacts {
        RowFacts {
            sample,
            trajectory,
            version,
            clock,
            ends,
        }
    }

    #[test]
    fn a_repeated_key_points_at_the_first_sample() {
        let mut rules = Integrity::new(KeyWindow::of([("a/1".to_string(), 3)]));
        assert_eq!(rules.original_of("a/1", 9), Some(3), "stored before");
        assert_eq!(rules.original_of("a/2", 10), None);
        assert_eq!(rules.original_of("a/2", 11), Some(10));
    }

    #[test]
    fn the_window_keeps_the_newest_keys_only() {
        let mut window = KeyWindow::of((0..KEY_WINDOW as u64).map(|i| (format!("k{i}"), i)));
        assert_eq!(window.get("k0"), Some(0));
        window.insert_new("k0", 99); // known: kept as it was
        assert_eq!(window.get("k0"), Some(0));
        window.insert_new("new", 7);
        assert_eq!(window.len(), KEY_WINDOW);
        assert_eq!(window.get("k0"), None, "the oldest is forgotten");
        assert_eq!(window.get("k1"), Some(1));
        assert_eq!(window.get("new"), Some(7));
    }

    #[test]
    fn a_trajectory_keeps_its_version_and_a_rising_clock() {
        let mut rules = Integrity::default();
        assert!(rules.check(row(0, 7, 2, 10, false)).is_none());
        assert!(rules.check(row(1, 7, 2, 11, false)).is_none());
        let (reason, text) = rules.check(row(2, 7, 3, 12, false)).unwrap();
        assert_eq!(reason, ReasonCode::VersionSwitch);
        assert!(text.contains("from 2 to 3 at sample 2"), "{text}");
        let (reason, _) = rules.check(row(3, 7, 3, 12, false)).unwrap();
        assert_eq!(reason, ReasonCode::ObservationMisaligned);
        // The episode's end closes the trajectory: its id may start over cleanly.
        assert!(rules.check(row(4, 7, 3, 13, true)).is_none());
        assert!(rules.check(row(5, 7, 9, 0, false)).is_none());
    }

    #[test]
    fn silent_trajectories_are_forgotten() {
        let mut rules = Integrity::default();
        rules.check(row(0, 1, 0, 5, false));
        for _ in 0..FORGET_AFTER_BATCHES + 256 {
            rules.next_batch();
        }
        assert!(rules.trajectories.is_empty());
        assert!(
            rules.check(row(1, 1, 4, 0, false)).is_none(),
            "no stale memory"
        );
    }
}
