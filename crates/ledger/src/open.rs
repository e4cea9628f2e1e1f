//! Opening a ledger: taking a local ledger's directory for this process, reading what is
//! stored (the newest sample ids and idempotency keys, rules and their bindings), moving
//! acknowledged rows stranded in the append log into the sample log, and starting the
//! writer thread.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::bounded;
use parking_lot::Mutex;

use crate::integrity::KeyWindow;
use crate::registry::Registry;
use crate::writer::{FlushPolicy, Message, Shared, Writer};
use crate::{append_log, compact, sched};
use crate::{
    layout, stored_rules, Ledger, LedgerConfig, LedgerData, LedgerError, SampleBatch, Storage,
    KEY_WINDOW,
};

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
                sched::batch_scheduling();
                writer.run(rx)
            })
            .map_err(|e| LedgerError::Writer(format!("cannot start the writer thread: {e}")))?;
        let ledger = Ledger {
            storage,
            lock,
            tx: Some(tx),
            handle: Some(handle),
            shared,
            next_sample_id: AtomicU64::new(
                max_id
                    .max(stranded_max)
                    .map_or(0, |m| m + 1)
                    .max(config.first_sample_id),
            ),
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
}
