//! The writer thread: checks what arrives (repeated idempotency keys, version switches and
//! sequence regressions within a trajectory), buffers rows per partition and flushes them as
//! Parquet files. Runs beside the learner, never on its thread.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::append_log::AppendLog;
use crate::bucket::Bucket;
use crate::group_commit::GroupCommit;
use crate::integrity::{Integrity, RowFacts};
use crate::layout::{bucket_dir, data_file, sample_file};
use crate::record::{
    now_ns, DecisionRecord, DuplicateRecord, GenerationRecord, Invalidation, ReasonCode, Target,
};
use crate::samples::SampleBatch;
use crate::schema::{self, Table};
use crate::storage::Storage;
pub(crate) use crate::writer_shared::Shared;
pub use crate::writer_shared::WriterStats;
use crate::LedgerError;

/// What the writer is sent.
pub(crate) enum Message {
    Samples(Box<SampleBatch>),
    /// Samples to make durable (in the append log, or by a flush) before replying.
    DurableSamples(Box<SampleBatch>, Sender<Result<(), LedgerError>>),
    Decisions(Vec<DecisionRecord>),
    /// An invalidation to make durable before replying: written at once, in one file with
    /// every invalidation and duplicate queued behind it (nothing else is flushed for it).
    Invalidate(Invalidation, Sender<Result<(), LedgerError>>),
    /// A duplicate to make durable before replying: written at once, as an invalidation.
    Duplicate(DuplicateRecord, Sender<Result<(), LedgerError>>),
    Generation(GenerationRecord),
    /// Write everything buffered; answer when it is durable (or why not).
    Flush(Sender<Result<(), LedgerError>>),
    Close(Sender<Result<(), LedgerError>>),
}

impl Message {
    /// What it carries, for an error that refuses it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Message::Samples(b) | Message::DurableSamples(b, _) => {
                format!("{} sample rows", b.len())
            }
            Message::Decisions(d) => format!("{} decision records", d.len()),
            Message::Invalidate(..) => "an invalidation".into(),
            Message::Duplicate(_, _) => "a duplicate record".into(),
            Message::Generation(_) => "a generation record".into(),
            Message::Flush(_) => "a flush request".into(),
            Message::Close(_) => "a close request".into(),
        }
    }
}

/// Trajectories invalidated lately that the writer remembers.
const INVALIDATED_REMEMBERED: usize = 1 << 16;

/// When to flush.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlushPolicy {
    pub rows: usize,
    pub interval: Duration,
}

type LogKey = (Bucket, String, usize);

/// A buffer taken for writing, restored if its file could not be written.
enum Taken {
    Samples(LogKey, Box<SampleBatch>),
    Decisions(Bucket, Vec<DecisionRecord>),
    Invalidations(Vec<Invalidation>),
    Duplicates(Vec<DuplicateRecord>),
    Generations(Vec<GenerationRecord>),
}

pub(crate) struct Writer {
    storage: Arc<Storage>,
    shared: Arc<Shared>,
    policy: FlushPolicy,
    session: String,
    seq: u64,
    /// Sample buffers by (bucket, config hash, observation width): each flush writes one
    /// log file per buffer; compaction sorts the rows into generation partitions.
    samples: HashMap<LogKey, SampleBatch>,
    decisions: HashMap<Bucket, Vec<DecisionRecord>>,
    invalidations: Vec<Invalidation>,
    duplicates: Vec<DuplicateRecord>,
    generations: Vec<GenerationRecord>,
    buffered: usize,
    oldest: Option<Instant>,
    /// Duplicate keys and trajectory consistency (pure rules; the writer records verdicts).
    integrity: Integrity,
    invalidated: HashSet<u64>,
    invalidated_order: std::collections::VecDeque<u64>,
    /// Invalidations and duplicates answered once their files are written, before the
    /// writer waits again.
    awaiting_records: Vec<Sender<Result<(), LedgerError>>>,
    /// Durable appends of a local ledger; `None` for an object store (a flush then).
    append_log: Option<AppendLog>,
    /// How long a durable append waits for others to share its sync.
    group_commit: GroupCommit,
}

impl Writer {
    pub(crate) fn new(
        storage: Arc<Storage>,
        shared: Arc<Shared>,
        policy: FlushPolicy,
        keys: crate::integrity::KeyWindow,
    ) -> Self {
        let session = format!("{:x}-{:x}", now_ns(), std::process::id());
        let append_log = storage
            .local_root()
            .map(|root| AppendLog::new(root, &session));
        Writer {
            append_log,
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
            integrity: Integrity::new(keys),
            invalidated: HashSet::new(),
            invalidated_order: std::collections::VecDeque::new(),
            awaiting_records: Vec::new(),
            group_commit: GroupCommit::default(),
        }
    }

    /// The thread's loop: until `Close` or every sender is gone.
    pub(crate) fn run(mut self, messages: Receiver<Message>) {
        // Normal priority: a learner's checkpoint, a gateway's durable report and a
        // trainer's stop wait on this thread. At nice 10, with six busy processes on two
        // cores, a one-second Ctrl-C stop took ten. Only background compaction yields.

        // A control message met while gathering invalidations, handled next.
        let mut carried: Option<Message> = None;
        loop {
            if !self.awaiting_records.is_empty() {
                // Group commit: the records queued behind go into the same files (what
                // was queued when it began: producers that keep the queue full never hold
                // an answer back).
                for _ in 0..messages.len() {
                    match messages.try_recv() {
                        Ok(m) => carried = self.absorb(m),
                        Err(_) => break,
                    }
                    if carried.is_some() {
                        break;
                    }
                }
                self.commit_records();
            }
            let wait = match self.oldest {
                Some(t) => self.policy.interval.saturating_sub(t.elapsed()),
                None => self.policy.interval,
            };
            let message = match carried.take() {
                Some(m) => Some(m),
                None => match messages.recv_timeout(wait.max(Duration::from_millis(1))) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        if let Err(e) = self.flush() {
                            tracing::error!(component = "ledger", error = %e, "final flush failed");
                        }
                        return;
                    }
                },
            };
            match message.and_then(|m| self.absorb(m)) {
                Some(Message::DurableSamples(batch, reply)) => {
                    if let Some(close) = self.durable_group(*batch, reply, &messages) {
                        let _ = close.send(self.close());
                        return;
                    }
                    continue;
                }
                Some(Message::Flush(reply)) => {
                    // Group commit: what is queued behind this request, other flush
                    // requests included, goes into the same files and the same sync.
                    let mut replies = vec![reply];
                    let mut close = None;
                    while let Ok(m) = messages.try_recv() {
                        match self.absorb(m) {
                            Some(Message::Flush(r)) => replies.push(r),
                            // The flush puts these rows in synced files: durable too.
                            Some(Message::DurableSamples(b, r)) => {
                                self.ingest(*b);
                                replies.push(r);
                            }
                            Some(Message::Close(r)) => {
                                close = Some(r);
                                break;
                            }
                            _ => {}
                        }
                    }
                    let result = self.flush();
                    for r in replies {
                        let _ = r.send(result.clone());
                    }
                    if let Some(r) = close {
                        let _ = r.send(self.close());
                        return;
                    }
                    continue;
                }
                Some(Message::Close(reply)) => {
                    let _ = reply.send(self.close());
                    return;
                }
                _ => {}
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

    /// Takes in a data message; hands back `Flush` and `Close`, which the loop handles.
    fn absorb(&mut self, message: Message) -> Option<Message> {
        match message {
            Message::Samples(batch) => self.ingest(*batch),
            Message::Decisions(rows) => {
                for r in rows {
                    self.note_buffered(1);
                    self.decisions.entry(r.bucket.clone()).or_default().push(r);
                }
            }
            Message::Invalidate(inv, reply) => {
                self.record_invalidation(inv);
                self.awaiting_records.push(reply);
            }
            // Written at once with the invalidations and duplicates queued behind it, in
            // files of their own, and answered then: an agent's retried report waits for
            // that write alone. Waiting for the next flush (up to its interval, 1 s) held
            // every retrying agent a second and cut a 16-agent fleet's throughput to a
            // third; a whole flush per duplicate wrote a set of files for every retry.
            Message::Duplicate(d, reply) => {
                self.note_buffered(1);
                self.shared.stats.lock().duplicates += 1;
                self.duplicates.push(d);
                self.awaiting_records.push(reply);
            }
            Message::Generation(g) => {
                self.note_buffered(1);
                self.generations.push(g);
            }
            control => return Some(control),
        }
        None
    }

    /// Final flush, then compaction of the sample log into generation partitions.
    fn close(&mut self) -> Result<(), LedgerError> {
        self.flush()?;
        self.shared.compact(&self.storage).map(|_| ())
    }

    fn note_buffered(&mut self, rows: usize) {
        self.buffered += rows;
        self.oldest.get_or_insert_with(Instant::now);
    }

    fn record_invalidation(&mut self, inv: Invalidation) {
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

    /// Checks one row against its trajectory so far; records what it finds.
    fn check_trajectory(&mut self, b: &SampleBatch, i: usize) {
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

    fn ingest(&mut self, batch: SampleBatch) {
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

    /// Group commit of durable appends: this one and every message queued behind it. The
    /// rows are written to the append log and synced (or, without one, flushed) before
    /// anyone is answered. Returns a `Close` request met on the way.
    fn durable_group(
        &mut self,
        first: SampleBatch,
        reply: Sender<Result<(), LedgerError>>,
        messages: &Receiver<Message>,
    ) -> Option<Sender<Result<(), LedgerError>>> {
        // One append-log message per (bucket, config, width) for the whole group.
        let mut logged: HashMap<LogKey, SampleBatch> = HashMap::new();
        let mut replies = vec![reply];
        let mut flushes = Vec::new();
        let mut close = None;
        let mut take = |w: &mut Self, batch: SampleBatch| {
            if w.append_log.is_some() {
                let key = (
                    batch.bucket.clone(),
                    batch.config_hash.clone(),
                    batch.obs_dim,
                );
                logged
                    .entry(key)
                    .or_insert_with(|| {
                        SampleBatch::new(&batch.bucket, &batch.config_hash, batch.obs_dim)
                    })
                    .extend_from(&batch, 0..batch.len());
            }
            w.ingest(batch);
        };
        take(self, first);
        let began = Instant::now();
        let linger = self.group_commit.linger();
        loop {
            let message = match messages.try_recv() {
                Ok(m) => m,
                Err(_) => {
                    // Nothing queued: wait a little for the concurrent writers' appends
                    // to share this sync (see `GroupCommit`), unless there is no one else.
                    let left = linger.saturating_sub(began.elapsed());
                    if left.is_zero() {
                        break;
                    }
                    match messages.recv_timeout(left) {
                        Ok(m) => m,
                        Err(_) => break,
                    }
                }
            };
            match self.absorb(message) {
                Some(Message::DurableSamples(b, r)) => {
                    take(self, *b);
                    replies.push(r);
                }
                Some(Message::Flush(r)) => flushes.push(r),
                Some(Message::Close(r)) => {
                    close = Some(r);
                    break;
                }
                _ => {}
            }
        }
        let logged: Vec<(Bucket, arrow_array::RecordBatch)> = logged
            .into_values()
            .map(|b| (b.bucket.clone(), crate::samples::to_arrow(&b)))
            .collect();
        let synced = Instant::now();
        let result = match self.append_log.as_mut() {
            Some(log) => log
                .append(&logged)
                .map_err(|e| LedgerError::storage("appending to the durable log", e)),
            None => self.flush(),
        };
        self.group_commit.record(replies.len(), synced.elapsed());
        for r in replies {
            let _ = r.send(result.clone());
        }
        if !flushes.is_empty() {
            let result = self.flush();
            for r in flushes {
                let _ = r.send(result.clone());
            }
        }
        close
    }

    fn append_run(&mut self, b: &SampleBatch, start: usize, end: usize) {
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

    fn file_name(&mut self, dir: &str) -> String {
        self.seq += 1;
        data_file(dir, &self.session, self.seq)
    }

    /// Puts a buffer back after its file could not be written.
    fn restore(&mut self, what: Taken) {
        match what {
            Taken::Samples(key, b) => {
                self.samples.insert(key, *b);
            }
            Taken::Decisions(bucket, rows) => {
                self.decisions.insert(bucket, rows);
            }
            Taken::Invalidations(rows) => self.invalidations.extend(rows),
            Taken::Duplicates(rows) => self.duplicates.extend(rows),
            Taken::Generations(rows) => self.generations.extend(rows),
        }
    }

    /// Writes every buffer as one group of files (what fails stays buffered for the next
    /// attempt), then answers the invalidations and duplicates it wrote.
    fn flush(&mut self) -> Result<(), LedgerError> {
        let result = self.write_buffers();
        // An invalidation or duplicate is answered by its own file: written unless its
        // rows went back into the buffer.
        let records = match &result {
            Err(e) if !(self.invalidations.is_empty() && self.duplicates.is_empty()) => {
                Err(e.clone())
            }
            _ => Ok(()),
        };
        for reply in self.awaiting_records.drain(..) {
            let _ = reply.send(records.clone());
        }
        result
    }

    /// Writes the buffered invalidations and duplicates alone, a file each, and answers
    /// those waiting for them: an acknowledged invalidation or duplicate is on disk, and in
    /// every read after it, without flushing the samples (a flush each would write a file
    /// per buffer).
    fn commit_records(&mut self) {
        let mut taken = Vec::new();
        self.take_records(&mut taken);
        let result = if taken.is_empty() {
            Ok(())
        } else {
            let result = self.write_taken(taken).map_or(Ok(()), Err);
            self.recount();
            if let Err(e) = &result {
                *self.shared.failure.lock() = Some(e.clone());
            }
            result
        };
        for reply in self.awaiting_records.drain(..) {
            let _ = reply.send(result.clone());
        }
    }

    /// Takes the buffered invalidations and duplicates for writing, a file each.
    fn take_records(&mut self, taken: &mut Vec<(Taken, String, arrow_array::RecordBatch)>) {
        if !self.invalidations.is_empty() {
            let rows = std::mem::take(&mut self.invalidations);
            let arrow = schema::invalidations_to_arrow(&rows);
            let name = self.file_name(Table::Invalidations.name());
            taken.push((Taken::Invalidations(rows), name, arrow));
        }
        if !self.duplicates.is_empty() {
            let rows = std::mem::take(&mut self.duplicates);
            let arrow = schema::duplicates_to_arrow(&rows);
            let name = self.file_name(Table::Duplicates.name());
            taken.push((Taken::Duplicates(rows), name, arrow));
        }
    }

    /// Rows still buffered, after a write.
    fn recount(&mut self) -> usize {
        let left: usize = self.samples.values().map(SampleBatch::len).sum::<usize>()
            + self.decisions.values().map(Vec::len).sum::<usize>()
            + self.invalidations.len()
            + self.duplicates.len()
            + self.generations.len();
        self.buffered = left;
        if left == 0 {
            self.oldest = None;
        }
        left
    }

    fn write_buffers(&mut self) -> Result<(), LedgerError> {
        let mut taken: Vec<(Taken, String, arrow_array::RecordBatch)> = Vec::new();
        let mut samples: Vec<_> = std::mem::take(&mut self.samples).into_iter().collect();
        samples.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, batch) in samples.into_iter().filter(|(_, b)| !b.is_empty()) {
            let dir = bucket_dir(Table::Samples, &key.0);
            let arrow = crate::samples::to_arrow(&batch);
            self.seq += 1;
            let last = batch.sample_id.iter().copied().max().unwrap_or(0);
            let name = sample_file(&dir, &self.session, self.seq, last);
            taken.push((Taken::Samples(key, Box::new(batch)), name, arrow));
        }
        let mut decisions: Vec<_> = std::mem::take(&mut self.decisions).into_iter().collect();
        decisions.sort_by(|a, b| a.0.cmp(&b.0));
        for (bucket, rows) in decisions {
            let dir = bucket_dir(Table::Decisions, &bucket);
            let arrow = schema::decisions_to_arrow(&rows);
            taken.push((Taken::Decisions(bucket, rows), self.file_name(&dir), arrow));
        }
        self.take_records(&mut taken);
        if !self.generations.is_empty() {
            let rows = std::mem::take(&mut self.generations);
            let arrow = schema::generations_to_arrow(&rows);
            let name = self.file_name(Table::Generations.name());
            taken.push((Taken::Generations(rows), name, arrow));
        }
        let mut first_error = self.write_taken(taken);
        let left = self.recount();
        self.shared.stats.lock().rows_buffered =
            self.samples.values().map(SampleBatch::len).sum::<usize>() as u64;
        if first_error.is_none() && left == 0 {
            // Every durably appended row is in the sample log now.
            if let Some(log) = self.append_log.as_mut().filter(|l| !l.is_empty()) {
                if let Err(e) = log.retire() {
                    first_error = Some(LedgerError::storage("removing append-log files", e));
                }
            }
        }
        let mut failure = self.shared.failure.lock();
        *failure = first_error.clone();
        first_error.map_or(Ok(()), Err)
    }

    /// Encodes and writes `taken` as one group of files; what fails is put back in its
    /// buffer. The first failure, if any.
    fn write_taken(
        &mut self,
        taken: Vec<(Taken, String, arrow_array::RecordBatch)>,
    ) -> Option<LedgerError> {
        let mut first_error: Option<LedgerError> = None;
        let t0 = Instant::now();
        let mut files = Vec::with_capacity(taken.len());
        let mut encoded = Vec::with_capacity(taken.len());
        for (what, name, arrow) in taken {
            match schema::encode(&arrow) {
                Ok(bytes) => {
                    files.push((name, bytes));
                    encoded.push(what);
                }
                Err(e) => {
                    first_error.get_or_insert(LedgerError::storage(format!("encoding {name}"), e));
                    self.restore(what);
                }
            }
        }
        let t1 = Instant::now();
        let sizes: Vec<u64> = files.iter().map(|(_, b)| b.len() as u64).collect();
        let results = self.storage.put_all(files);
        let mut stats = WriterStats::default();
        for ((what, result), size) in encoded.into_iter().zip(results).zip(sizes) {
            match result {
                Ok(()) => {
                    stats.files_written += 1;
                    stats.bytes_written += size;
                    if let Taken::Samples(_, b) = &what {
                        stats.rows_written += b.len() as u64;
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                    self.restore(what);
                }
            }
        }
        {
            let mut s = self.shared.stats.lock();
            s.files_written += stats.files_written;
            s.bytes_written += stats.bytes_written;
            s.rows_written += stats.rows_written;
            s.encode_seconds += (t1 - t0).as_secs_f64();
            s.write_seconds += t1.elapsed().as_secs_f64();
        }
        first_error
    }
}
