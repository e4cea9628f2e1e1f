//! The open ledger every writer holds: appends, invalidations and duplicates go to the
//! writer thread through a bounded queue; flushing and closing wait for it. Opening is in
//! `open`, the rules registry in `registry`, background compaction in `compactor`.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, SendTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;

use crate::layout;
use crate::registry::Registry;
use crate::writer::{Answer, Message, Shared};
use crate::{
    is_blank, DecisionRecord, DuplicateRecord, Invalidation, LedgerData, LedgerError, Pending,
    SampleBatch, Storage, Target, WriterStats, KEY_WINDOW,
};

/// An open ledger: appends go to the writer thread; rules are registered here.
pub struct Ledger {
    pub(crate) storage: Arc<Storage>,
    /// This process's hold on a local ledger's directory, released after the writer stops
    /// (fields drop after [`Drop::drop`] has closed it).
    pub(crate) lock: Option<strata_dirlock::DirLock>,
    pub(crate) tx: Option<Sender<Message>>,
    pub(crate) handle: Option<JoinHandle<()>>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) next_sample_id: AtomicU64,
    pub(crate) registry: Mutex<Registry>,
    pub(crate) send_timeout: Duration,
    /// The thread compacting the sample log every `compact_every`, and the queue whose
    /// closing stops it.
    pub(crate) compactor: Option<(std::sync::mpsc::SyncSender<()>, JoinHandle<()>)>,
}

/// Whether [`Ledger::try_append_samples_durable`] queued its batch.
#[derive(Debug)]
pub enum Queued {
    /// Queued: its callback will be called.
    Queued,
    /// The writer's queue was full: the batch, handed back (append it with
    /// [`Ledger::append_samples_durable`], which waits for room).
    Full(Box<SampleBatch>),
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("location", &self.storage.location())
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// The storage root.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The stored sample (id, policy version) of each of `keys` that has one among the
    /// newest [`KEY_WINDOW`] keyed samples (a restarted gateway settling its reports in
    /// flight, which are among the newest): a scan of the newest sample files' key columns,
    /// one file at a time, that ends when every key is found or the window is passed.
    ///
    /// # Errors
    /// [`LedgerError::BadFile`] naming an unreadable sample file.
    pub fn find_keyed_samples(
        &self,
        keys: &std::collections::HashSet<String>,
    ) -> Result<HashMap<String, (u64, u64)>, LedgerError> {
        let mut found = HashMap::new();
        if keys.is_empty() {
            return Ok(found);
        }
        let files = layout::sample_files_newest_first(&self.storage)?;
        let mut keyed = 0;
        LedgerData::scan_sample_ids(
            &self.storage,
            files.iter().map(|(p, _)| p.as_str()),
            |ids, versions, key| {
                for (i, id) in ids.iter().enumerate() {
                    let Some(k) = key(i) else { continue };
                    keyed += 1;
                    if keys.contains(&k) {
                        // The oldest carrier of a key is its original.
                        let entry = found.entry(k).or_insert((*id, versions[i]));
                        if *id < entry.0 {
                            *entry = (*id, versions[i]);
                        }
                    }
                }
                if found.len() == keys.len() || keyed >= KEY_WINDOW {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
        Ok(found)
    }

    /// Reserves `n` consecutive sample ids; returns the first.
    pub fn reserve_sample_ids(&self, n: u64) -> u64 {
        self.next_sample_id.fetch_add(n, Ordering::Relaxed)
    }

    /// The next id [`Ledger::reserve_sample_ids`] would hand out.
    pub fn next_sample_id(&self) -> u64 {
        self.next_sample_id.load(Ordering::Relaxed)
    }

    /// Queues `message` for the writer, waiting at most `send_timeout` for room. A full
    /// queue hands the message back, and the error names what was refused.
    pub(crate) fn send(&self, message: Message) -> Result<(), LedgerError> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| LedgerError::Writer("closed".into()))?;
        tx.send_timeout(message, self.send_timeout)
            .map_err(|e| match e {
                SendTimeoutError::Timeout(refused) => LedgerError::Writer(format!(
                    "queue full for {:?}: the writer is not keeping up; refused {}",
                    self.send_timeout,
                    refused.describe()
                )),
                SendTimeoutError::Disconnected(_) => {
                    LedgerError::Writer("the writer thread stopped".into())
                }
            })
    }

    /// Appends samples (validated here; checked for duplicates and trajectory consistency
    /// by the writer).
    ///
    /// # Errors
    /// [`LedgerError::Rejected`] naming the bad column or row (nothing is stored), or a
    /// writer failure.
    pub fn append_samples(&self, batch: SampleBatch) -> Result<(), LedgerError> {
        batch.validate().map_err(LedgerError::Rejected)?;
        if batch.is_empty() {
            return Ok(());
        }
        self.send(Message::Samples(Box::new(batch)))
    }

    /// Appends samples and returns once they are durable (a deployed agent's report is
    /// acknowledged only then): for a local ledger in the append log (`wal/appends/`,
    /// synced), for an object store by a flush into the sample log. Concurrent callers
    /// share one group commit.
    ///
    /// # Errors
    /// As [`Ledger::append_samples`], or the storage failure (then nothing is
    /// acknowledged).
    pub fn append_samples_durable(&self, batch: SampleBatch) -> Result<(), LedgerError> {
        batch.validate().map_err(LedgerError::Rejected)?;
        if batch.is_empty() {
            return Ok(());
        }
        let (reply, answer) = bounded(1);
        self.send(Message::DurableSamples(Box::new(batch), reply.into()))?;
        answer
            .recv_timeout(self.durable_answer_timeout())
            .map_err(|_| LedgerError::Writer("no answer to a durable append".into()))?
    }

    /// As [`Ledger::append_samples_durable`] without waiting, for a caller that must not
    /// block (an async request handler): `then` is called once, on the writer's thread,
    /// when the samples are durable or with why they are not (at once on the caller's
    /// thread for an empty batch), and must only hand the outcome on. Never waits for room in the queue: a full queue hands the batch back
    /// ([`Queued::Full`]) and `then` is dropped uncalled, as it is when the writer stops
    /// before answering.
    ///
    /// # Errors
    /// As [`Ledger::append_samples`] (`then` is not called).
    pub fn try_append_samples_durable(
        &self,
        batch: SampleBatch,
        then: impl FnOnce(Result<(), LedgerError>) + Send + 'static,
    ) -> Result<Queued, LedgerError> {
        batch.validate().map_err(LedgerError::Rejected)?;
        if batch.is_empty() {
            then(Ok(()));
            return Ok(Queued::Queued);
        }
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| LedgerError::Writer("closed".into()))?;
        let message = Message::DurableSamples(Box::new(batch), Answer::Callback(Box::new(then)));
        match tx.try_send(message) {
            Ok(()) => Ok(Queued::Queued),
            Err(TrySendError::Full(Message::DurableSamples(batch, _))) => Ok(Queued::Full(batch)),
            Err(TrySendError::Full(_)) => unreachable!("the message sent is a durable append"),
            Err(TrySendError::Disconnected(_)) => {
                Err(LedgerError::Writer("the writer thread stopped".into()))
            }
        }
    }

    /// How long a durable request waits for the writer's answer before giving up on it.
    pub fn durable_answer_timeout(&self) -> Duration {
        self.send_timeout * 6
    }

    /// Appends admission decisions.
    ///
    /// # Errors
    /// [`LedgerError::Rejected`] for an empty range or unknown rules version.
    pub fn append_decisions(&self, rows: Vec<DecisionRecord>) -> Result<(), LedgerError> {
        {
            let registry = self.registry.lock();
            for r in &rows {
                if r.first_sample > r.last_sample {
                    return Err(LedgerError::Rejected(format!(
                        "decision covers samples {}..={}",
                        r.first_sample, r.last_sample
                    )));
                }
                if !registry.rules.contains_key(&r.rules_version) {
                    return Err(LedgerError::UnknownRulesVersion(r.rules_version));
                }
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        self.send(Message::Decisions(rows))
    }

    /// Records an invalidation (append-only; the samples stay) and returns once it is
    /// durable and in every read: whatever acknowledges an invalidation may answer then.
    /// Invalidations sent together share one file and one sync.
    ///
    /// # Errors
    /// [`LedgerError::Rejected`] without a reason text or author, or for an empty range;
    /// a writer or storage failure (then nothing is promised: the invalidation stays
    /// buffered for the next flush).
    pub fn invalidate(&self, inv: Invalidation) -> Result<(), LedgerError> {
        self.invalidate_pending(inv)?.wait()
    }

    /// As [`Ledger::invalidate`], without waiting: the invalidation is on its way to disk,
    /// and [`Pending::wait`] returns once it is there. Several sent before the first wait
    /// usually share one file.
    ///
    /// # Errors
    /// As [`Ledger::invalidate`] for what is refused before it is queued.
    pub fn invalidate_pending(&self, inv: Invalidation) -> Result<Pending, LedgerError> {
        if is_blank(&inv.text) || inv.author.trim().is_empty() {
            return Err(LedgerError::Rejected(
                "an invalidation needs a reason text and an author".into(),
            ));
        }
        if let Target::Samples { first, last } = inv.target {
            if first > last {
                return Err(LedgerError::Rejected(format!(
                    "invalidation covers samples {first}..={last}"
                )));
            }
        }
        let (reply, answer) = bounded(1);
        self.send(Message::Invalidate(inv, reply))?;
        Ok(Pending::new(
            answer,
            self.send_timeout * 6,
            "an invalidation",
        ))
    }

    /// Records a repeated idempotency key that the caller recognised itself (a retried
    /// report the gateway already stored; the sample is not stored again), returning once
    /// the record is durable: written at once in a file of its own (with the duplicates
    /// and invalidations queued beside it), so an agent told "duplicate" can rely on the
    /// record surviving a crash, without waiting for the next flush.
    ///
    /// # Errors
    /// [`LedgerError::Rejected`] for an empty key, or a writer or storage failure (then
    /// nothing is promised).
    pub fn record_duplicate(&self, row: DuplicateRecord) -> Result<(), LedgerError> {
        Self::check_duplicate(&row)?;
        let (reply, answer) = bounded(1);
        self.send(Message::Duplicate(row, reply))?;
        answer
            .recv_timeout(self.send_timeout * 6)
            .map_err(|_| LedgerError::Writer("no answer to a duplicate record".into()))?
    }

    fn check_duplicate(row: &DuplicateRecord) -> Result<(), LedgerError> {
        if row.idempotency_key.is_empty() {
            return Err(LedgerError::Rejected(
                "a duplicate needs its idempotency key".into(),
            ));
        }
        Ok(())
    }

    /// Writes everything buffered and waits until it is durable.
    ///
    /// # Errors
    /// The storage failure (the rows stay buffered for the next attempt).
    pub fn flush(&self) -> Result<(), LedgerError> {
        let (reply, answer) = bounded(1);
        self.send(Message::Flush(reply))?;
        answer
            .recv_timeout(self.send_timeout * 6)
            .map_err(|_| LedgerError::Writer("no answer to a flush".into()))?
    }

    /// What the writer did so far.
    pub fn stats(&self) -> WriterStats {
        self.shared.stats.lock().clone()
    }

    /// The last storage failure, if the writer is failing now.
    pub fn failure(&self) -> Option<LedgerError> {
        self.shared.failure.lock().clone()
    }

    /// Leaves the ledger as a killed process would (for crash tests): what the writer
    /// buffers is never written, its thread is left running, and the directory's lock
    /// goes as the kernel would release it.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        self.stop_compactor();
        drop(self.lock.take());
        std::mem::forget(self);
    }

    /// Flushes and stops the writer.
    ///
    /// # Errors
    /// The final flush's failure.
    pub fn close(mut self) -> Result<WriterStats, LedgerError> {
        let result = self.shutdown();
        result.map(|()| self.stats())
    }

    fn shutdown(&mut self) -> Result<(), LedgerError> {
        self.stop_compactor();
        let Some(tx) = self.tx.take() else {
            return Ok(());
        };
        let (reply, answer) = bounded(1);
        let sent = tx.send(Message::Close(reply)).is_ok();
        drop(tx);
        let result = if sent {
            answer
                .recv_timeout(self.send_timeout * 6)
                .map_err(|_| LedgerError::Writer("no answer to close".into()))?
        } else {
            Err(LedgerError::Writer("the writer thread stopped".into()))
        };
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        result
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(component = "ledger", error = %e, "closing the ledger");
        }
    }
}
