//! The writer thread: checks what arrives (repeated idempotency keys, version switches and
//! sequence regressions within a trajectory), buffers rows per partition and flushes them as
//! Parquet files. Runs beside the learner, never on its thread. Here: its messages, its
//! state and its loop; what arrives is checked and buffered in `intake`, durable appends
//! and records are committed in `durable`, buffers are written as files in `files`.

mod answer;
mod durable;
mod files;
mod intake;

pub(crate) use answer::Answer;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::append_log::AppendLog;
use crate::bucket::Bucket;
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
    DurableSamples(Box<SampleBatch>, Answer),
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

/// When to flush.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlushPolicy {
    pub rows: usize,
    pub interval: Duration,
}

/// A sample buffer's key: (bucket, config hash, observation width).
type LogKey = (Bucket, String, usize);

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
        }
    }

    /// The thread's loop: until `Close` or every sender is gone.
    pub(crate) fn run(mut self, messages: Receiver<Message>) {
        // Its full share of the CPU (`SCHED_BATCH`, set by the spawner: no preempting the
        // threads it answers): a learner's checkpoint, a gateway's durable report and a
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
                    let mut replies = vec![Answer::from(reply)];
                    let mut close = None;
                    while let Ok(m) = messages.try_recv() {
                        match self.absorb(m) {
                            Some(Message::Flush(r)) => replies.push(r.into()),
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
                        r.give(result.clone());
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
}
