//! Policy stores: numbered, checksummed policy versions (weights and normalisation
//! statistics). [`PolicyStore`] is what every store does (publish, read by version); the
//! runtime's [`MemoryPolicyStore`] keeps recent versions in memory for the workers, which
//! adopt them at fragment boundaries; the gateway keeps every version on disk.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use strata_env::{NormalizerStats, RunningMeanStd};
use thiserror::Error;
use xxhash_rust::xxh3::Xxh3;

/// One published version.
#[derive(Clone, Debug)]
pub struct PublishedPolicy {
    /// Policy version.
    pub version: u64,
    /// Flat model parameters.
    pub params: Vec<f32>,
    /// Normalisation statistics to use with these weights.
    pub normalizer: NormalizerStats,
    /// XXH3-128 over version, parameters and statistics: catches corruption in memory or
    /// transit (not tampering) at ~10 GB/s, so adopting a version costs microseconds.
    pub checksum: u128,
}

fn hash_rms(h: &mut Xxh3, rms: &Option<RunningMeanStd>) {
    if let Some(r) = rms {
        for v in r.mean.iter().chain(&r.var).chain([&r.count]) {
            h.update(&v.to_le_bytes());
        }
    }
}

fn checksum(version: u64, params: &[f32], normalizer: &NormalizerStats) -> u128 {
    let mut h = Xxh3::new();
    h.update(&version.to_le_bytes());
    // Little-endian bytes of the parameters, hashed in blocks without a per-value call.
    let mut block = [0u8; 4096];
    for chunk in params.chunks(1024) {
        for (dst, p) in block.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&p.to_le_bytes());
        }
        h.update(&block[..chunk.len() * 4]);
    }
    hash_rms(&mut h, &normalizer.obs);
    hash_rms(&mut h, &normalizer.returns);
    h.digest128()
}

impl PublishedPolicy {
    /// A version with its checksum computed.
    pub fn new(version: u64, params: Vec<f32>, normalizer: NormalizerStats) -> Self {
        let checksum = checksum(version, &params, &normalizer);
        PublishedPolicy {
            version,
            params,
            normalizer,
            checksum,
        }
    }

    /// Recomputes the checksum.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the contents do not match it.
    pub fn verify(&self) -> Result<(), StoreError> {
        if checksum(self.version, &self.params, &self.normalizer) == self.checksum {
            Ok(())
        } else {
            Err(StoreError::Corrupt {
                version: self.version,
            })
        }
    }
}

/// Where published policy versions live: each version written once, read back by number.
/// A learner publishes to one; deployed policies, workers and evaluations read from it.
pub trait PolicyStore: Send + Sync {
    /// Stores `policy` under its version.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when it fails its checksum; what else a store refuses
    /// (order, storage) it says.
    fn publish(&self, policy: PublishedPolicy) -> Result<(), StoreError>;

    /// Version `version`.
    ///
    /// # Errors
    /// [`StoreError::Missing`] when the store does not hold it.
    fn get(&self, version: u64) -> Result<Arc<PublishedPolicy>, StoreError>;

    /// The newest version held.
    fn latest_version(&self) -> u64;
}

/// Why a publish or an adoption was refused.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum StoreError {
    /// The contents do not match the checksum.
    #[error("policy version {version} is corrupt: its checksum does not match its contents")]
    Corrupt { version: u64 },
    /// Versions must be published in order, each exactly one above the last.
    #[error("policy version {got} published out of order (expected {expected})")]
    OutOfOrder { expected: u64, got: u64 },
    /// A version no longer (or not yet) held.
    #[error("policy version {0} is not in the store")]
    Missing(u64),
    /// The store was closed (shutdown).
    #[error("the policy store is closed")]
    Closed,
    /// The storage under the store failed.
    #[error("policy version {version}: {reason}")]
    Storage { version: u64, reason: String },
    /// Nothing was published within the wait.
    #[error("waited {waited:?} for policy version {wanted}")]
    Timeout { wanted: u64, waited: Duration },
}

struct State {
    history: VecDeque<Arc<PublishedPolicy>>,
    /// The version the store was created with (0, or the checkpoint's on resume).
    started_at: u64,
    acks: Vec<u64>,
    closed: bool,
}

/// Holds the most recent versions (enough for the lag bound) and which version each worker
/// has adopted.
pub struct MemoryPolicyStore {
    state: Mutex<State>,
    published: Condvar,
    keep: usize,
    /// The newest version any worker has switched to (read per step by workers).
    newest_sampling: AtomicU64,
}

impl MemoryPolicyStore {
    /// A store with `initial` as its first version, keeping the last `keep` versions.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when `initial` fails its checksum.
    pub fn new(initial: PublishedPolicy, workers: usize, keep: usize) -> Result<Self, StoreError> {
        initial.verify()?;
        let version = initial.version;
        Ok(MemoryPolicyStore {
            state: Mutex::new(State {
                history: VecDeque::from([Arc::new(initial)]),
                started_at: version,
                acks: vec![version; workers],
                closed: false,
            }),
            published: Condvar::new(),
            keep: keep.max(1),
            newest_sampling: AtomicU64::new(version),
        })
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Publishes the next version.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] or [`StoreError::OutOfOrder`]; the store is unchanged.
    pub fn publish(&self, policy: PublishedPolicy) -> Result<(), StoreError> {
        self.publish_from(policy, false)
    }

    /// Publishes a version newer than the newest, past versions that will never come (a
    /// follower whose source skipped them); waits for one of those then get this one.
    ///
    /// # Errors
    /// As [`MemoryPolicyStore::publish`], for a version not newer than the newest.
    pub fn publish_past_gap(&self, policy: PublishedPolicy) -> Result<(), StoreError> {
        self.publish_from(policy, true)
    }

    fn publish_from(&self, policy: PublishedPolicy, gap: bool) -> Result<(), StoreError> {
        policy.verify()?;
        let mut s = self.lock();
        let expected = s.history.back().map_or(0, |p| p.version + 1);
        if policy.version != expected && !(gap && policy.version > expected) {
            return Err(StoreError::OutOfOrder {
                expected,
                got: policy.version,
            });
        }
        s.history.push_back(Arc::new(policy));
        while s.history.len() > self.keep {
            s.history.pop_front();
        }
        drop(s);
        self.published.notify_all();
        Ok(())
    }

    /// The newest version.
    pub fn latest(&self) -> Arc<PublishedPolicy> {
        Arc::clone(
            self.lock()
                .history
                .back()
                .expect("the store always holds a version"),
        )
    }

    /// Waits until version `at_least` is published, up to `timeout`; returns it (`exact`) or
    /// the newest. An exact version older than the store's first one (a resumed run) is
    /// answered with that first version.
    ///
    /// # Errors
    /// [`StoreError::Timeout`], [`StoreError::Closed`], or [`StoreError::Missing`] when an
    /// exact version has already been dropped from the history.
    pub fn wait_for(
        &self,
        at_least: u64,
        exact: bool,
        timeout: Duration,
    ) -> Result<Arc<PublishedPolicy>, StoreError> {
        let start = Instant::now();
        let mut s = self.lock();
        loop {
            if s.closed {
                return Err(StoreError::Closed);
            }
            let newest = s.history.back().expect("never empty").version;
            if newest >= at_least {
                let oldest = s.history.front().expect("never empty").version;
                let found = if exact && at_least >= oldest {
                    s.history.iter().find(|p| p.version == at_least)
                } else if exact && s.started_at == oldest {
                    // Older than the store itself (a resumed run starts with one version):
                    // the first version there is stands in, the same way every time.
                    s.history.front()
                } else if exact {
                    None
                } else {
                    s.history.back()
                };
                return found.cloned().ok_or(StoreError::Missing(at_least));
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(StoreError::Timeout {
                    wanted: at_least,
                    waited,
                });
            }
            self.published.wait_for(&mut s, timeout - waited);
        }
    }

    /// Records that `worker` now samples with `version`.
    pub fn ack(&self, worker: usize, version: u64) {
        if let Some(v) = self.lock().acks.get_mut(worker) {
            *v = version;
        }
        self.newest_sampling.fetch_max(version, Ordering::Relaxed);
    }

    /// The newest version any worker samples with: a sample completing while this is above
    /// its own version completed after a newer policy was switched in.
    pub fn newest_sampling(&self) -> u64 {
        self.newest_sampling.load(Ordering::Relaxed)
    }

    /// The version each worker last acknowledged.
    pub fn worker_versions(&self) -> Vec<u64> {
        self.lock().acks.clone()
    }

    /// Whether the store was closed (the run is shutting down).
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Wakes every waiter with [`StoreError::Closed`] (shutdown).
    pub fn close(&self) {
        self.lock().closed = true;
        self.published.notify_all();
    }
}

impl PolicyStore for MemoryPolicyStore {
    fn publish(&self, policy: PublishedPolicy) -> Result<(), StoreError> {
        MemoryPolicyStore::publish(self, policy)
    }

    fn get(&self, version: u64) -> Result<Arc<PublishedPolicy>, StoreError> {
        self.lock()
            .history
            .iter()
            .find(|p| p.version == version)
            .cloned()
            .ok_or(StoreError::Missing(version))
    }

    fn latest_version(&self) -> u64 {
        self.latest().version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(version: u64) -> PublishedPolicy {
        PublishedPolicy::new(version, vec![version as f32; 8], NormalizerStats::default())
    }

    #[test]
    fn corrupt_and_out_of_order_publishes_are_rejected() {
        let store = MemoryPolicyStore::new(policy(0), 2, 3).unwrap();
        let mut corrupt = policy(1);
        corrupt.params[3] = 99.0;
        assert_eq!(
            store.publish(corrupt),
            Err(StoreError::Corrupt { version: 1 })
        );
        assert_eq!(
            store.publish(policy(2)),
            Err(StoreError::OutOfOrder {
                expected: 1,
                got: 2
            })
        );
        assert_eq!(store.latest().version, 0, "the store is unchanged");
        store.publish(policy(1)).unwrap();
        assert_eq!(
            store.publish(policy(1)),
            Err(StoreError::OutOfOrder {
                expected: 2,
                got: 1
            })
        );
        assert_eq!(store.latest().version, 1);
    }

    #[test]
    fn waiting_sees_new_versions_exact_ones_and_closing() {
        let store = Arc::new(MemoryPolicyStore::new(policy(0), 1, 2).unwrap());
        let s = Arc::clone(&store);
        let publisher = std::thread::spawn(move || {
            for v in 1..=3 {
                s.publish(policy(v)).unwrap();
            }
        });
        let got = store.wait_for(3, false, Duration::from_secs(10)).unwrap();
        publisher.join().unwrap();
        assert_eq!(got.version, 3);
        assert_eq!(
            store
                .wait_for(2, true, Duration::from_secs(1))
                .unwrap()
                .version,
            2
        );
        assert_eq!(
            store.wait_for(0, true, Duration::from_secs(1)).unwrap_err(),
            StoreError::Missing(0)
        );
        let resumed = MemoryPolicyStore::new(policy(5), 1, 2).unwrap();
        let stand_in = resumed.wait_for(4, true, Duration::from_secs(1)).unwrap();
        assert_eq!(stand_in.version, 5);
        let err = store
            .wait_for(9, false, Duration::from_millis(20))
            .unwrap_err();
        assert!(matches!(err, StoreError::Timeout { wanted: 9, .. }));
        store.close();
        assert_eq!(
            store
                .wait_for(9, false, Duration::from_secs(10))
                .unwrap_err(),
            StoreError::Closed
        );
        store.ack(0, 3);
        assert_eq!(store.worker_versions(), vec![3]);
    }
}
