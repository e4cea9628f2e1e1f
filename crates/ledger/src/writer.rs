//! The writer thread: checks what arrives (repeated idempotency keys, version switches and
//! sequence regressions within a trajectory), buffers rows per partition and flushes them as
//! Parquet files. Runs beside the learner, never on its thread.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::record::{
    now_ns, DecisionRecord, DuplicateRecord, GenerationRecord, Invalidation, ReasonCode,
    SampleBatch, Target,
};
use crate::schema::{self, Table};
use crate::storage::Storage;

/// What the writer is sent.
pub(crate) enum Message {
    Samples(Box<SampleBatch>),
    Decisions(Vec<DecisionRecord>),
    Invalidate(Invalidation),
    Generation(GenerationRecord),
    /// Write everything buffered; answer when it is durable (or why not).
    Flush(SyncSender<Result<(), String>>),
    Close(SyncSender<Result<(), String>>),
}

/// Counters of what the writer did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WriterStats {
    /// Sample rows received.
    pub rows_received: u64,
    /// Sample rows in files.
    pub rows_written: u64,
    /// Repeats of a known idempotency key (not stored as samples).
    pub duplicates: u64,
    /// Invalidations recorded (sent and detected).
    pub invalidations: u64,
    /// Files written.
    pub files_written: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Seconds encoding Parquet.
    pub encode_seconds: f64,
    /// Seconds writing to storage.
    pub write_seconds: f64,
    /// Rows buffered, not yet in files.
    pub rows_buffered: u64,
}

/// State shared between the writer thread and the ledger handle.
#[derive(Default)]
pub(crate) struct Shared {
    pub stats: Mutex<WriterStats>,
    /// The last storage failure, cleared by a successful flush.
    pub failure: Mutex<Option<String>>,
    /// Rules version stamped on invalidations the writer detects.
    pub rules_version: AtomicU64,
}

/// When to flush.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlushPolicy {
    pub rows: usize,
    pub interval: Duration,
}

#[derive(Clone, Copy)]
struct TrajectoryState {
    version: u64,
    clock: u64,
    seen: u64,
}

/// Trajectories not seen for this many batches are forgotten (bounds memory).
const FORGET_AFTER_BATCHES: u64 = 4096;

pub(crate) struct Writer {
    storage: Arc<Storage>,
    shared: Arc<Shared>,
    policy: FlushPolicy,
    session: String,
    seq: u64,
    samples: HashMap<(String, u64), SampleBatch>,
    decisions: HashMap<String, Vec<DecisionRecord>>,
    invalidations: Vec<Invalidation>,
    duplicates: Vec<DuplicateRecord>,
    generations: Vec<GenerationRecord>,
    buffered: usize,
    oldest: Option<Instant>,
    keys: HashMap<String, u64>,
    trajectories: HashMap<u64, TrajectoryState>,
    invalidated: HashSet<u64>,
    batches: u64,
}

impl Writer {
    pub(crate) fn new(
        storage: Arc<Storage>,
        shared: Arc<Shared>,
        policy: FlushPolicy,
        keys: HashMap<String, u64>,
    ) -> Self {
        let session = format!("{:x}-{:x}", now_ns(), std::process::id());
        Writer {
            storage,
            shared,
            policy,
            session,
            seq: 0,
            samples: HashMap::new(),
            decisions: HashMap::new(),
            invalidations: Vec::new(),
            duplicates: Vec::new(),
            generations: Vec::new(),
            buffered: 0,
            oldest: None,
            keys,
            trajectories: HashMap::new(),
            invalidated: HashSet::new(),
            batches: 0,
        }
    }

    /// The thread's loop: until `Close` or every sender is gone.
    pub(crate) fn run(mut self, messages: Receiver<Message>) {
        loop {
            let wait = match self.oldest {
                Some(t) => self.policy.interval.saturating_sub(t.elapsed()),
                None => self.policy.interval,
            };
            match messages.recv_timeout(wait.max(Duration::from_millis(1))) {
                Ok(Message::Samples(batch)) => self.ingest(*batch),
                Ok(Message::Decisions(rows)) => {
                    for r in rows {
                        self.note_buffered(1);
                        self.decisions.entry(r.bucket.clone()).or_default().push(r);
                    }
                }
                Ok(Message::Invalidate(inv)) => self.record_invalidation(inv),
                Ok(Message::Generation(g)) => {
                    self.note_buffered(1);
                    self.generations.push(g);
                }
                Ok(Message::Flush(reply)) => {
                    let _ = reply.send(self.flush());
                    continue;
                }
                Ok(Message::Close(reply)) => {
                    let _ = reply.send(self.flush());
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    if let Err(e) = self.flush() {
                        tracing::error!(component = "ledger", error = %e, "final flush failed");
                    }
                    return;
                }
            }
            let due = self.buffered >= self.policy.rows
                || self
                    .oldest
                    .is_some_and(|t| t.elapsed() >= self.policy.interval);
            if due {
                if let Err(e) = self.flush() {
                    tracing::error!(component = "ledger", error = %e, "flush failed; rows kept for the next attempt");
                }
            }
        }
    }

    fn note_buffered(&mut self, rows: usize) {
        self.buffered += rows;
        self.oldest.get_or_insert_with(Instant::now);
    }

    fn record_invalidation(&mut self, inv: Invalidation) {
        if let Target::Trajectory { id } = inv.target {
            self.invalidated.insert(id);
        }
        self.note_buffered(1);
        self.invalidations.push(inv);
        self.shared.stats.lock().expect("stats").invalidations += 1;
    }

    fn detected(&mut self, trajectory: u64, reason: ReasonCode, text: String) {
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

    /// Checks one row against its trajectory so far.
    fn check_trajectory(&mut self, b: &SampleBatch, i: usize) {
        let (t, version, clock) = (b.trajectory_id[i], b.policy_version[i], b.env_clock[i]);
        let batches = self.batches;
        let previous = self.trajectories.insert(
            t,
            TrajectoryState {
                version,
                clock,
                seen: batches,
            },
        );
        if let Some(p) = previous {
            if p.version != version {
                self.detected(
                    t,
                    ReasonCode::VersionSwitch,
                    format!(
                        "policy version changed from {} to {version} at sample {}",
                        p.version, b.sample_id[i]
                    ),
                );
            } else if clock <= p.clock {
                self.detected(
                    t,
                    ReasonCode::ObservationMisaligned,
                    format!(
                        "env clock went from {} to {clock} at sample {}",
                        p.clock, b.sample_id[i]
                    ),
                );
            }
        }
        if b.terminated[i] || b.truncated[i] {
            self.trajectories.remove(&t);
        }
    }

    fn ingest(&mut self, batch: SampleBatch) {
        self.batches += 1;
        let n = batch.len();
        {
            let mut stats = self.shared.stats.lock().expect("stats");
            stats.rows_received += n as u64;
        }
        // Rows are appended in runs sharing a version; repeats of a known key are cut out.
        let mut run_start = 0;
        let mut kept = 0;
        let mut pending: Option<usize> = None;
        for i in 0..n {
            let duplicate = match &batch.idempotency_key[i] {
                Some(key) => match self.keys.get(key) {
                    Some(&original) => {
                        self.duplicates.push(DuplicateRecord {
                            idempotency_key: key.clone(),
                            original_sample: original,
                            bucket: batch.bucket.clone(),
                            at_ns: now_ns(),
                        });
                        self.shared.stats.lock().expect("stats").duplicates += 1;
                        true
                    }
                    None => {
                        self.keys.insert(key.clone(), batch.sample_id[i]);
                        false
                    }
                },
                None => false,
            };
            let same_run = i > 0 && batch.policy_version[i] == batch.policy_version[run_start];
            if duplicate || !same_run {
                self.append_run(&batch, run_start, i);
                run_start = if duplicate { i + 1 } else { i };
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
        if self.batches.is_multiple_of(256) {
            let horizon = self.batches.saturating_sub(FORGET_AFTER_BATCHES);
            self.trajectories.retain(|_, s| s.seen >= horizon);
        }
    }

    fn append_run(&mut self, b: &SampleBatch, start: usize, end: usize) {
        if start >= end {
            return;
        }
        let key = (b.bucket.clone(), b.policy_version[start]);
        let target = self
            .samples
            .entry(key)
            .or_insert_with(|| SampleBatch::new(&b.bucket, &b.config_hash, b.obs_dim));
        if target.config_hash != b.config_hash || target.obs_dim != b.obs_dim {
            // Another config in the same partition: flushed as its own file.
            let full = std::mem::replace(
                target,
                SampleBatch::new(&b.bucket, &b.config_hash, b.obs_dim),
            );
            let key = (b.bucket.clone(), b.policy_version[start]);
            if let Err(e) = self.write_samples(&key, &full) {
                tracing::error!(component = "ledger", error = %e, "write failed");
                *self.shared.failure.lock().expect("failure") = Some(e);
            }
            return self.append_run(b, start, end);
        }
        let od = b.obs_dim;
        let r = start..end;
        let d = start * od..end * od;
        target.sample_id.extend_from_slice(&b.sample_id[r.clone()]);
        target
            .episode_id
            .extend_from_slice(&b.episode_id[r.clone()]);
        target
            .trajectory_id
            .extend_from_slice(&b.trajectory_id[r.clone()]);
        target.step.extend_from_slice(&b.step[r.clone()]);
        target
            .policy_version
            .extend_from_slice(&b.policy_version[r.clone()]);
        target
            .issued_at_ns
            .extend_from_slice(&b.issued_at_ns[r.clone()]);
        target
            .completed_at_ns
            .extend_from_slice(&b.completed_at_ns[r.clone()]);
        target.obs_count.extend_from_slice(&b.obs_count[r.clone()]);
        target.obs_hash.extend_from_slice(&b.obs_hash[r.clone()]);
        target.obs_min.extend_from_slice(&b.obs_min[d.clone()]);
        target.obs_max.extend_from_slice(&b.obs_max[d.clone()]);
        target.obs_mean.extend_from_slice(&b.obs_mean[d]);
        target.env_clock.extend_from_slice(&b.env_clock[r.clone()]);
        target
            .sampler_version
            .extend_from_slice(&b.sampler_version[r.clone()]);
        target
            .idempotency_key
            .extend_from_slice(&b.idempotency_key[r.clone()]);
        target.reward.extend_from_slice(&b.reward[r.clone()]);
        target
            .terminated
            .extend_from_slice(&b.terminated[r.clone()]);
        target.truncated.extend_from_slice(&b.truncated[r.clone()]);
        target
            .episode_return
            .extend_from_slice(&b.episode_return[r.clone()]);
        target.success.extend_from_slice(&b.success[r]);
    }

    fn file_name(&mut self) -> String {
        self.seq += 1;
        format!("part-{}-{:06}.parquet", self.session, self.seq)
    }

    fn put(&mut self, dir: &str, batch: &arrow_array::RecordBatch) -> Result<(), String> {
        let t0 = Instant::now();
        let bytes = schema::encode(batch).map_err(|e| format!("encoding {dir}: {e}"))?;
        let t1 = Instant::now();
        let len = bytes.len() as u64;
        let name = format!("{dir}/{}", self.file_name());
        self.storage
            .put_new(&name, bytes)
            .map_err(|e| e.to_string())?;
        let mut stats = self.shared.stats.lock().expect("stats");
        stats.encode_seconds += (t1 - t0).as_secs_f64();
        stats.write_seconds += t1.elapsed().as_secs_f64();
        stats.files_written += 1;
        stats.bytes_written += len;
        Ok(())
    }

    fn write_samples(&mut self, key: &(String, u64), b: &SampleBatch) -> Result<(), String> {
        let dir = format!(
            "{}/bucket={}/generation={}",
            Table::Samples.name(),
            key.0,
            key.1
        );
        self.put(&dir, &schema::samples_to_arrow(b))?;
        self.shared.stats.lock().expect("stats").rows_written += b.len() as u64;
        Ok(())
    }

    /// Writes every buffer; what fails stays buffered for the next attempt.
    fn flush(&mut self) -> Result<(), String> {
        let mut first_error = None;
        let mut keep = |r: Result<(), String>| {
            if let Err(e) = r {
                first_error.get_or_insert(e);
                false
            } else {
                true
            }
        };
        let mut samples: Vec<_> = std::mem::take(&mut self.samples).into_iter().collect();
        samples.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, batch) in samples {
            if batch.is_empty() {
                continue;
            }
            let r = self.write_samples(&key, &batch);
            if !keep(r) {
                self.samples.insert(key, batch);
            }
        }
        let mut decisions: Vec<_> = std::mem::take(&mut self.decisions).into_iter().collect();
        decisions.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, rows) in decisions {
            let dir = format!("{}/bucket={key}", Table::Decisions.name());
            let r = self.put(&dir, &schema::decisions_to_arrow(&rows));
            if !keep(r) {
                self.decisions.insert(key, rows);
            }
        }
        if !self.invalidations.is_empty() {
            let rows = std::mem::take(&mut self.invalidations);
            let r = self.put(
                Table::Invalidations.name(),
                &schema::invalidations_to_arrow(&rows),
            );
            if !keep(r) {
                self.invalidations = rows;
            }
        }
        if !self.duplicates.is_empty() {
            let rows = std::mem::take(&mut self.duplicates);
            let r = self.put(
                Table::Duplicates.name(),
                &schema::duplicates_to_arrow(&rows),
            );
            if !keep(r) {
                self.duplicates = rows;
            }
        }
        if !self.generations.is_empty() {
            let rows = std::mem::take(&mut self.generations);
            let r = self.put(
                Table::Generations.name(),
                &schema::generations_to_arrow(&rows),
            );
            if !keep(r) {
                self.generations = rows;
            }
        }
        let left: usize = self.samples.values().map(SampleBatch::len).sum::<usize>()
            + self.decisions.values().map(Vec::len).sum::<usize>()
            + self.invalidations.len()
            + self.duplicates.len()
            + self.generations.len();
        self.buffered = left;
        if left == 0 {
            self.oldest = None;
        }
        self.shared.stats.lock().expect("stats").rows_buffered =
            self.samples.values().map(SampleBatch::len).sum::<usize>() as u64;
        let mut failure = self.shared.failure.lock().expect("failure");
        *failure = first_error.clone();
        first_error.map_or(Ok(()), Err)
    }
}
