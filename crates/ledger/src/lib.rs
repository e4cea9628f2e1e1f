//! The Strata sample ledger.
//!
//! Every sample carries the six provenance fields of DESIGN.md ([`SampleRecord`]); every
//! decision about it is recorded and can be recomputed: admission decisions
//! ([`DecisionRecord`], made under versioned [`AdmissionRules`]), append-only
//! [`Invalidation`]s (nothing is deleted) and repeated idempotency keys
//! ([`DuplicateRecord`]). Policy versions are bound to their rules ([`GenerationRecord`]),
//! so rolling a version back restores its rules.
//!
//! Storage is Apache Parquet through `object_store` (a local directory by default):
//!
//! ```text
//! samples/bucket=train/versions=0-999/part-<session>-000012-to<id>.parquet   (compacted)
//! wal/samples/bucket=train/part-<session>-000013-to<id>.parquet              (not yet compacted)
//! decisions/bucket=train/part-….parquet
//! invalidations/part-….parquet    duplicates/part-….parquet    generations/part-….parquet
//! rules/v000001.json
//! ```
//!
//! Writes go through a writer thread with a bounded queue ([`Ledger`]). Each flush writes
//! its samples as one log file per bucket (`wal/samples/…`), compacted into the generation
//! partitions when the ledger is closed or reopened ([`compact()`]), and by an owner that
//! writes for days while it writes ([`Ledger::compact_log`]); readers merge both. After
//! each compaction the owner merges runs of small files (a flush a second is a file a
//! second per table) into `part-<session>-<first>-thru-<last>….parquet`, which supersedes
//! the files of its range.
//! Every file is staged, synced and renamed into place, so a crash leaves only complete
//! files. What a crash can lose is the unflushed tail: at most `flush_rows` rows or
//! `flush_interval` of data.

mod admitted;
mod analysis;
mod append_log;
mod arrow_codec;
mod bindings;
mod bucket;
mod compact;
mod config;
mod curves;
mod error;
mod group_commit;
mod integrity;
mod layout;
mod manifest;
mod merge;
mod pages;
mod pending;
mod reader;
mod record;
mod rules;
mod samples;
mod schema;
mod storage;
mod writer;
mod writer_shared;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, SendTimeoutError, Sender};

use parking_lot::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

pub use admitted::{
    admitted, trained_decisions, AdmittedAs, AdmittedPage, AdmittedQuery, AdmittedRow,
    TrainedReport,
};
pub use analysis::{
    metrics, recompute, summary, GenerationSummary, MetricsReport, Recomputed, SideMetrics,
};
pub use bucket::{bucket_char, Bucket, InvalidBucket};
pub use compact::{compact, recover};
pub use config::LedgerConfig;
pub use curves::{curves, lag_histogram, Curves, EpisodePoint, VersionSwitch};
pub use error::{LedgerError, SharedError};
pub use manifest::{manifest_batches, write_manifest, ManifestFormat};
pub use pages::PageReader;
pub use pending::Pending;
pub use reader::LedgerData;
pub use record::{
    is_blank, now_ns, DecisionKind, DecisionRecord, DuplicateRecord, GenerationRecord,
    Invalidation, ReasonCode, Target,
};
pub use rules::{Admission, AdmissionRules, Pacing, RuleKind, SampleFacts, VersionedRules};
pub use samples::{SampleBatch, SampleRecord};
pub use schema::{
    decisions_to_arrow, duplicates_to_arrow, generations_to_arrow, invalidations_to_arrow,
};
pub use storage::Storage;
pub use writer::WriterStats;

use integrity::KeyWindow;
pub use integrity::KEY_WINDOW;
pub use layout::VERSIONS_PER_PARTITION;
use writer::{FlushPolicy, Message, Shared, Writer};

/// The highest stored sample id, and the window of the newest stored idempotency keys:
/// the id from the sample files' names (a file of an older ledger, whose name carries
/// none, is read for it), the keys from the newest files until the window is full.
fn newest_ids_and_keys(storage: &Storage) -> Result<(Option<u64>, KeyWindow), LedgerError> {
    let files = layout::sample_files_newest_first(storage)?;
    let mut max_id = files.iter().filter_map(|(_, last)| *last).max();
    let mut newest: Vec<(u64, String)> = Vec::new();
    let named = files.iter().take_while(|(_, last)| last.is_some());
    LedgerData::scan_sample_ids(storage, named.map(|(p, _)| p.as_str()), |ids, _, key| {
        newest.extend(
            ids.iter()
                .enumerate()
                .filter_map(|(i, id)| Some((*id, key(i)?))),
        );
        if newest.len() >= KEY_WINDOW {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    let unnamed = files.iter().skip_while(|(_, last)| last.is_some());
    LedgerData::scan_sample_ids(storage, unnamed.map(|(p, _)| p.as_str()), |ids, _, key| {
        max_id = max_id.max(ids.iter().copied().max());
        newest.extend(
            ids.iter()
                .enumerate()
                .filter_map(|(i, id)| Some((*id, key(i)?))),
        );
        ControlFlow::Continue(())
    })?;
    // Oldest first, so that the window forgets the oldest; a key's first carrier wins.
    newest.sort_unstable();
    let keep = newest.len().saturating_sub(KEY_WINDOW);
    Ok((
        max_id,
        KeyWindow::of(newest.into_iter().skip(keep).map(|(id, key)| (key, id))),
    ))
}

#[derive(Default)]
struct Registry {
    rules: HashMap<u64, VersionedRules>,
    /// Policy version -> rules version, as last bound.
    bindings: bindings::Bindings,
    /// The version sampling now and its rules, after the last publish/promote/rollback.
    current: Option<(u64, u64)>,
}

/// Every registered rule set of a stored ledger, by version (read-only: safe while a
/// writer appends).
///
/// # Errors
/// [`LedgerError::BadFile`] naming an unreadable rules file, or storage failures.
pub fn stored_rules(storage: &Storage) -> Result<HashMap<u64, VersionedRules>, LedgerError> {
    let mut rules = HashMap::new();
    for path in storage.list(layout::RULES_DIR)? {
        if !path.ends_with(".json") {
            continue;
        }
        let bytes = storage.get(&path)?;
        let v: VersionedRules =
            serde_json::from_slice(&bytes).map_err(|e| LedgerError::BadFile {
                path: format!("{}/{path}", storage.location()),
                reason: e.to_string(),
            })?;
        rules.insert(v.version, v);
    }
    Ok(rules)
}

/// An open ledger: appends go to the writer thread; rules are registered here.
pub struct Ledger {
    storage: Arc<Storage>,
    /// This process's hold on a local ledger's directory, released after the writer stops
    /// (fields drop after [`Drop::drop`] has closed it).
    lock: Option<strata_dirlock::DirLock>,
    tx: Option<Sender<Message>>,
    handle: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    next_sample_id: AtomicU64,
    registry: Mutex<Registry>,
    send_timeout: Duration,
    /// The thread compacting the sample log every `compact_every`, and the queue whose
    /// closing stops it.
    compactor: Option<(std::sync::mpsc::SyncSender<()>, JoinHandle<()>)>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("location", &self.storage.location())
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// Opens (or creates) a ledger: takes a local ledger's directory for this process
    /// (one writer per directory), reads what is stored (sample ids, idempotency keys,
    /// rules and their bindings) and starts the writer thread.
    ///
    /// # Errors
    /// [`LedgerError::InUse`] naming the process that writes it already; storage failures,
    /// or a stored file that is not a readable ledger file.
    pub fn open(config: &LedgerConfig) -> Result<Ledger, LedgerError> {
        Self::open_inner(config, None)
    }

    /// As [`Ledger::open`], for a caller that already holds the ledger's directory (taken
    /// with [`Storage::lock`] to check something before writing).
    ///
    /// # Errors
    /// As [`Ledger::open`].
    pub fn open_held(
        config: &LedgerConfig,
        held: strata_dirlock::DirLock,
    ) -> Result<Ledger, LedgerError> {
        Self::open_inner(config, Some(held))
    }

    fn open_inner(
        config: &LedgerConfig,
        held: Option<strata_dirlock::DirLock>,
    ) -> Result<Ledger, LedgerError> {
        if config.flush_rows == 0 || config.queue == 0 {
            return Err(LedgerError::Rejected(
                "flush_rows and queue must be at least 1".into(),
            ));
        }
        let storage = Arc::new(Storage::open(&config.location)?);
        let lock = match held {
            Some(held) => Some(held),
            None => storage.lock()?,
        };
        if config.compact_on_open {
            let rows = compact::recover(&storage)?;
            if rows > 0 {
                tracing::info!(
                    component = "ledger",
                    rows,
                    "compacted the sample log of an interrupted run"
                );
            }
        }
        // Reopening costs what the newest samples cost, not the ledger's history: the
        // highest id is in the sample files' names, and the key window is read from the
        // newest files only (files of older ledgers, whose names carry no id, are read).
        let (max_id, keys) = newest_ids_and_keys(&storage)?;
        // Rows acknowledged into the append log by a process that died before flushing
        // them: moved into the sample log below (without `compact_on_open` they are left
        // where they are, for a later owner's open).
        let stranded = if config.compact_on_open {
            append_log::stranded_scanning(&storage)?
        } else {
            (Vec::new(), Vec::new())
        };
        let stranded_max = stranded
            .0
            .iter()
            .flat_map(|b| b.sample_id.iter().copied())
            .max();
        let mut registry = Registry {
            rules: stored_rules(&storage)?,
            ..Registry::default()
        };
        for g in &LedgerData::read_generations(&storage)? {
            registry.bindings.insert(g.policy_version, g.rules_version);
            registry.current = Some((g.policy_version, g.rules_version));
        }
        let shared = Arc::new(Shared::default());
        if let Some((_, r)) = registry.current {
            shared.rules_version.store(r, Ordering::Relaxed);
        }
        let (tx, rx) = bounded(config.queue);
        let writer = Writer::new(
            Arc::clone(&storage),
            Arc::clone(&shared),
            FlushPolicy {
                rows: config.flush_rows,
                interval: config.flush_interval,
            },
            keys,
        );
        let handle = std::thread::Builder::new()
            .name("strata-ledger".into())
            .spawn(move || {
                storage::batch_scheduling();
                writer.run(rx)
            })
            .map_err(|e| LedgerError::Writer(format!("cannot start the writer thread: {e}")))?;
        let ledger = Ledger {
            storage,
            lock,
            tx: Some(tx),
            handle: Some(handle),
            shared,
            next_sample_id: AtomicU64::new(max_id.max(stranded_max).map_or(0, |m| m + 1)),
            registry: Mutex::new(registry),
            send_timeout: config.send_timeout,
            compactor: None,
        };
        let mut ledger = ledger;
        if let (true, Some(every)) = (config.compact_on_open, config.compact_every) {
            ledger.compactor = Some(ledger.start_compactor(every)?);
        }
        let (batches, files) = stranded;
        if !files.is_empty() {
            let rows: usize = batches.iter().map(SampleBatch::len).sum();
            for b in batches {
                ledger.send(Message::Samples(Box::new(b)))?;
            }
            ledger.flush()?;
            for f in &files {
                std::fs::remove_file(f)
                    .map_err(|e| LedgerError::storage(format!("removing {}", f.display()), e))?;
            }
            tracing::info!(
                component = "ledger",
                rows,
                files = files.len(),
                "moved acknowledged rows from the append log into the sample log"
            );
        }
        Ok(ledger)
    }

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
    fn send(&self, message: Message) -> Result<(), LedgerError> {
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
        self.send(Message::DurableSamples(Box::new(batch), reply))?;
        answer
            .recv_timeout(self.send_timeout * 6)
            .map_err(|_| LedgerError::Writer("no answer to a durable append".into()))?
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

    /// Registers a rule set (validated); an identical one keeps its version.
    ///
    /// # Errors
    /// [`LedgerError::InvalidRules`], or storage failures (nothing registered).
    pub fn register_rules(&self, rules: &AdmissionRules) -> Result<VersionedRules, LedgerError> {
        rules.validate()?;
        let hash = rules.hash();
        let mut registry = self.registry.lock();
        if let Some(v) = registry.rules.values().find(|v| v.hash == hash) {
            return Ok(v.clone());
        }
        let version = registry.rules.keys().max().map_or(1, |m| m + 1);
        let v = VersionedRules {
            version,
            hash,
            rules: rules.clone(),
        };
        let json = serde_json::to_vec_pretty(&v).expect("rules serialise");
        self.storage
            .put_new(&layout::rules_path(version), bytes::Bytes::from(json))?;
        registry.rules.insert(version, v.clone());
        Ok(v)
    }

    /// A registered rule set.
    ///
    /// # Errors
    /// [`LedgerError::UnknownRulesVersion`].
    pub fn rules(&self, version: u64) -> Result<VersionedRules, LedgerError> {
        self.registry
            .lock()
            .rules
            .get(&version)
            .cloned()
            .ok_or(LedgerError::UnknownRulesVersion(version))
    }

    /// Binds a policy version to a rules version (`operation`: publish, promote); it
    /// becomes the current one.
    ///
    /// # Errors
    /// [`LedgerError::UnknownRulesVersion`], or a writer failure.
    pub fn bind(
        &self,
        policy_version: u64,
        config_hash: &str,
        rules_version: u64,
        operation: &str,
        author: &str,
    ) -> Result<(), LedgerError> {
        let mut registry = self.registry.lock();
        let rules = registry
            .rules
            .get(&rules_version)
            .ok_or(LedgerError::UnknownRulesVersion(rules_version))?;
        let record = GenerationRecord {
            policy_version,
            config_hash: config_hash.to_string(),
            rules_version,
            rules_hash: rules.hash.clone(),
            operation: operation.to_string(),
            author: author.to_string(),
            at_ns: now_ns(),
        };
        self.send(Message::Generation(record))?;
        registry.bindings.insert(policy_version, rules_version);
        registry.current = Some((policy_version, rules_version));
        self.shared
            .rules_version
            .store(rules_version, Ordering::Relaxed);
        Ok(())
    }

    /// The rules bound to a policy version.
    ///
    /// # Errors
    /// [`LedgerError::UnknownPolicyVersion`].
    pub fn rules_for_policy(&self, policy_version: u64) -> Result<VersionedRules, LedgerError> {
        let registry = self.registry.lock();
        let r = registry
            .bindings
            .get(policy_version)
            .ok_or(LedgerError::UnknownPolicyVersion(policy_version))?;
        registry
            .rules
            .get(&r)
            .cloned()
            .ok_or(LedgerError::UnknownRulesVersion(r))
    }

    /// Rolls back to `policy_version`: it and its rules become current again, recorded as
    /// one `rollback` operation. Returns the restored rules.
    ///
    /// # Errors
    /// [`LedgerError::UnknownPolicyVersion`] when no rules were ever bound to it.
    pub fn rollback(
        &self,
        policy_version: u64,
        config_hash: &str,
        author: &str,
    ) -> Result<VersionedRules, LedgerError> {
        let rules = self.rules_for_policy(policy_version)?;
        self.bind(
            policy_version,
            config_hash,
            rules.version,
            "rollback",
            author,
        )?;
        Ok(rules)
    }

    /// The current policy version and its rules, if any was bound.
    pub fn current(&self) -> Option<(u64, VersionedRules)> {
        let registry = self.registry.lock();
        let (p, r) = registry.current?;
        Some((p, registry.rules.get(&r)?.clone()))
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

    /// Compacts the sample log written so far into generation partitions while the
    /// writer goes on (it only adds log files; compaction takes those it finds), so that
    /// closing or reopening a ledger written for days compacts only the last stretch. For
    /// the ledger's owner: a gateway calls it every half minute. Returns the rows moved.
    ///
    /// # Errors
    /// As [`compact()`]; the log files stay and a later compaction retries them.
    pub fn compact_log(&self) -> Result<u64, LedgerError> {
        self.shared.compact(&self.storage)
    }

    /// Flushes and stops the writer.
    ///
    /// # Errors
    /// The final flush's failure.
    pub fn close(mut self) -> Result<WriterStats, LedgerError> {
        let result = self.shutdown();
        result.map(|()| self.stats())
    }

    /// Starts the thread that compacts the sample log every `every` until its queue closes.
    fn start_compactor(
        &self,
        every: Duration,
    ) -> Result<(std::sync::mpsc::SyncSender<()>, JoinHandle<()>), LedgerError> {
        let (stop, stopped) = std::sync::mpsc::sync_channel::<()>(0);
        let (storage, shared) = (Arc::clone(&self.storage), Arc::clone(&self.shared));
        let handle = std::thread::Builder::new()
            .name("strata-ledger-compactor".into())
            .spawn(move || {
                storage::lower_priority();
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every)
                {
                    if let Err(e) = shared.compact_in_background(&storage) {
                        tracing::warn!(component = "ledger", error = %e, "compaction failed; retried later");
                    }
                }
            })
            .map_err(|e| LedgerError::Writer(format!("cannot start the compactor thread: {e}")))?;
        Ok((stop, handle))
    }

    /// Stops the compactor thread (after the compaction it may be in).
    fn stop_compactor(&mut self) {
        if let Some((stop, handle)) = self.compactor.take() {
            self.shared.background_stop.store(true, Ordering::Relaxed);
            drop(stop);
            let _ = handle.join();
        }
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
