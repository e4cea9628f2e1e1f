//! What arrives at the writer: invalidations remembered, trajectories checked for
//! version switches and sequence regressions, repeated keys marked, rows buffered per
//! partition.

use super::*;

/// Trajectories invalidated lately that the writer remembers.
const INVALIDATED_REMEMBERED: usize = 1 << 16;

impl Writer {
    pub(super) fn record_invalidation(&mut self, inv: Invalidation) {
        if let Target::Trajectory { id } = inv.target {
            // Remembered to record a detected invalidation once; the oldest are forgotten
            // (a trajectory's rows arrive within its episode), so a ledger written for
            // weeks does not hold every trajectory ever invalidated.
            if self.invalidated.insert(id) {
                self.invalidated_order.push_back(id);
                if self.invalidated_order.len() > INVALIDATED_REMEMBERED {
                    let oldest = self.invalidated_order.pop_front().expect("non-empty");
                    self.invalidated.remove(&oldest);
                }
            }
        }
        self.note_buffered(1);
        self.invalidations.push(inv);
        self.shared.stats.lock().invalidations += 1;
    }

    pub(super) fn detected(&mut self, trajectory: u64, reason: ReasonCode, text: String) {
        if self.invalidated.contains(&trajectory) {
            return;
        }
        tracing::warn!(component = "ledger", trajectory, reason = reason.as_str(), %text, "trajectory invalidated");
        self.record_invalidation(Invalidation {
            target: Target::Trajectory { id: trajectory },
            reason,
            text,
            author: "ledger".into(),
            rules_version: self.shared.rules_version.load(Ordering::Relaxed),
            at_ns: now_ns(),
        });
    }

    /// Checks one row against its trajectory so far; records what it finds.
    pub(super) fn check_trajectory(&mut self, b: &SampleBatch, i: usize) {
        let row = RowFacts {
            sample: b.sample_id[i],
            trajectory: b.trajectory_id[i],
            version: b.policy_version[i],
            clock: b.env_clock[i],
            ends: b.terminated[i] || b.truncated[i],
        };
        if let Some((reason, text)) = self.integrity.check(row) {
            self.detected(row.trajectory, reason, text);
        }
    }

    pub(super) fn ingest(&mut self, batch: SampleBatch) {
        self.integrity.next_batch();
        let n = batch.len();
        {
            let mut stats = self.shared.stats.lock();
            stats.rows_received += n as u64;
        }
        // Rows are appended in runs; repeats of a known key are cut out between them.
        let mut run_start = 0;
        let mut kept = 0;
        let mut pending: Option<usize> = None;
        for i in 0..n {
            let original = batch.idempotency_key[i]
                .as_ref()
                .and_then(|key| Some((key, self.integrity.original_of(key, batch.sample_id[i])?)));
            let duplicate = original.is_some();
            if let Some((key, original)) = original {
                self.duplicates.push(DuplicateRecord {
                    idempotency_key: key.clone(),
                    original_sample: original,
                    bucket: batch.bucket.clone(),
                    at_ns: now_ns(),
                });
                self.shared.stats.lock().duplicates += 1;
            }
            if duplicate {
                self.append_run(&batch, run_start, i);
                run_start = i + 1;
            }
            if !duplicate {
                kept += 1;
                // Fast path: the same trajectory continuing in order needs no map lookup;
                // the map is brought up to date with the last such row before any full check.
                let continues = i > 0
                    && run_start < i
                    && batch.trajectory_id[i - 1] == batch.trajectory_id[i]
                    && batch.policy_version[i - 1] == batch.policy_version[i]
                    && batch.env_clock[i - 1] < batch.env_clock[i]
                    && !(batch.terminated[i - 1] || batch.truncated[i - 1]);
                if let Some(j) = pending.filter(|_| !continues) {
                    self.check_trajectory(&batch, j);
                    pending = None;
                }
                if continues && !(batch.terminated[i] || batch.truncated[i]) {
                    pending = Some(i);
                } else {
                    self.check_trajectory(&batch, i);
                }
            }
        }
        if let Some(j) = pending {
            self.check_trajectory(&batch, j);
        }
        self.append_run(&batch, run_start, n);
        self.note_buffered(kept);
    }

    pub(super) fn append_run(&mut self, b: &SampleBatch, start: usize, end: usize) {
        if start >= end {
            return;
        }
        let key = (b.bucket.clone(), b.config_hash.clone(), b.obs_dim);
        let target = self
            .samples
            .entry(key)
            .or_insert_with(|| SampleBatch::new(&b.bucket, &b.config_hash, b.obs_dim));
        target.extend_from(b, start..end);
    }
}
