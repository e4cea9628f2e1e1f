//! Reads a ledger back: every table, with the file named in any error.

use crate::layout::{log_files, partition, sample_files, table_files};
use crate::record::{DecisionRecord, DuplicateRecord, GenerationRecord, Invalidation};
use crate::samples::SampleBatch;
use crate::schema::{self, Table};
use crate::storage::Storage;
use crate::LedgerError;
use std::ops::ControlFlow;
use std::time::Duration;

/// Everything a ledger holds.
#[derive(Clone, Debug, Default)]
pub struct LedgerData {
    /// Samples, one batch per file (bucket and config hash per batch).
    pub samples: Vec<SampleBatch>,
    /// Admission decisions.
    pub decisions: Vec<DecisionRecord>,
    /// Invalidations, in file order.
    pub invalidations: Vec<Invalidation>,
    /// Repeated idempotency keys.
    pub duplicates: Vec<DuplicateRecord>,
    /// Policy versions bound to rules, in file order.
    pub generations: Vec<GenerationRecord>,
    /// Files read.
    pub files: usize,
}

/// Runs `read` until no sample log file it may have listed was compacted away while it ran
/// and no file it listed was merged away before it was read (the ledger's owner compacts
/// and merges while it writes): a log file that vanished mid-read has its rows in
/// partition files the read may have listed too early. New files are harmless: a read of a
/// live ledger sees it as of some moment.
fn settled<T>(
    storage: &Storage,
    read: impl Fn() -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    // A compaction takes milliseconds; waiting a little longer after each collision lets a
    // reader through even when its owner compacts back to back on a loaded machine (eight
    // tries span about a quarter of a second).
    let mut pause = Duration::from_millis(1);
    for _ in 0..8 {
        let before = log_files(storage)?;
        let result = read();
        if !matches!(&result, Err(e) if e.is_not_found()) {
            let after: std::collections::HashSet<String> =
                log_files(storage)?.into_iter().collect();
            if before.iter().all(|log| after.contains(log)) {
                return result;
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(64));
    }
    read()
}

impl LedgerData {
    /// Reads every table under `storage`, and the rows of a local ledger that are durable
    /// only in its append log (a writer died before flushing them).
    ///
    /// # Errors
    /// [`LedgerError::BadFile`] naming the first unreadable, foreign or misplaced file.
    pub fn read(storage: &Storage) -> Result<LedgerData, LedgerError> {
        settled(storage, || {
            // The append log first (see `stranded`): rows a flush moves meanwhile are
            // read once, not missed.
            let logged = crate::append_log::logged(storage)?;
            let mut data = Self::read_stored(storage)?;
            let (stranded, files) = crate::append_log::stranded(logged, &data);
            data.files += files.len();
            data.samples.extend(stranded);
            Ok(data)
        })
    }

    /// As [`LedgerData::read`], but an unreadable, foreign or misplaced file is skipped and
    /// returned with the reason instead of failing the read: for reports that show what
    /// can be read of a damaged ledger.
    ///
    /// # Errors
    /// [`LedgerError::Storage`] when the ledger cannot be listed at all.
    pub fn read_salvaging(
        storage: &Storage,
    ) -> Result<(LedgerData, Vec<LedgerError>), LedgerError> {
        settled(storage, || {
            let mut skipped = Vec::new();
            let logged = crate::append_log::logged(storage).unwrap_or_else(|e| {
                skipped.push(e);
                Default::default()
            });
            let mut data = Self::read_tables(storage, Some(&mut skipped))?;
            let (stranded, files) = crate::append_log::stranded(logged, &data);
            data.files += files.len();
            data.samples.extend(stranded);
            Ok((data, skipped))
        })
    }

    /// As [`LedgerData::read`], without rows only in the append log.
    pub(crate) fn read_stored(storage: &Storage) -> Result<LedgerData, LedgerError> {
        Self::read_tables(storage, None)
    }

    /// The generations table alone (which version is bound to which rules), without
    /// reading a single sample: cheap, and safe while a writer appends.
    ///
    /// # Errors
    /// [`LedgerError::BadFile`] naming an unreadable file.
    pub fn read_generations(
        storage: &Storage,
    ) -> Result<Vec<crate::GenerationRecord>, LedgerError> {
        settled(storage, || {
            let mut data = LedgerData::default();
            for path in table_files(storage, Table::Generations)? {
                data.read_file(storage, Table::Generations, &path, false)?;
            }
            Ok(data.generations)
        })
    }

    /// The invalidations table alone, in file order, without reading a single sample:
    /// cheap, and safe while a writer appends.
    ///
    /// # Errors
    /// [`LedgerError::BadFile`] naming an unreadable file.
    pub fn read_invalidations(storage: &Storage) -> Result<Vec<Invalidation>, LedgerError> {
        settled(storage, || {
            let mut data = LedgerData::default();
            for path in table_files(storage, Table::Invalidations)? {
                data.read_file(storage, Table::Invalidations, &path, false)?;
            }
            Ok(data.invalidations)
        })
    }

    /// Calls `visit` with the sample ids, policy versions and idempotency keys (a key per
    /// id, `None` for a trainer's samples) of each of `files`, in order, until it breaks,
    /// decoding those three columns alone: what reopening a ledger or settling a restarted
    /// gateway needs, at a fraction of a full read and one file's memory.
    ///
    /// # Errors
    /// [`LedgerError::BadFile`] naming the first unreadable file.
    pub(crate) fn scan_sample_ids<'a>(
        storage: &Storage,
        files: impl IntoIterator<Item = &'a str>,
        mut visit: impl FnMut(&[u64], &[u64], &dyn Fn(usize) -> Option<String>) -> ControlFlow<()>,
    ) -> Result<(), LedgerError> {
        use arrow_array::Array;
        for path in files {
            let bad = |reason: String| LedgerError::BadFile {
                path: format!("{}/{path}", storage.location()),
                reason,
            };
            let columns = ["sample_id", "idempotency_key", "policy_version"];
            let batches =
                schema::decode_columns(storage.get(path)?, Table::Samples, Some(&columns))
                    .map_err(bad)?;
            for batch in &batches {
                // A projection keeps the file's column order: look them up by name.
                let column = |name: &str| {
                    batch
                        .column_by_name(name)
                        .ok_or_else(|| bad(format!("no {name} column")))
                };
                let ids = column("sample_id")?
                    .as_any()
                    .downcast_ref::<arrow_array::UInt64Array>()
                    .ok_or_else(|| bad("sample_id is not a u64 column".into()))?;
                let keys = column("idempotency_key")?
                    .as_any()
                    .downcast_ref::<arrow_array::StringArray>()
                    .ok_or_else(|| bad("idempotency_key is not a text column".into()))?;
                let versions = column("policy_version")?
                    .as_any()
                    .downcast_ref::<arrow_array::UInt64Array>()
                    .ok_or_else(|| bad("policy_version is not a u64 column".into()))?;
                let key = |i: usize| (!keys.is_null(i)).then(|| keys.value(i).to_string());
                if visit(ids.values(), versions.values(), &key).is_break() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Reads every table's files; with `skipped`, a bad file is recorded there and the
    /// read goes on.
    fn read_tables(
        storage: &Storage,
        mut skipped: Option<&mut Vec<LedgerError>>,
    ) -> Result<LedgerData, LedgerError> {
        let mut data = LedgerData::default();
        for table in Table::ALL {
            let paths: Vec<(String, bool)> = if table == Table::Samples {
                sample_files(storage)?
            } else {
                table_files(storage, table)?
                    .into_iter()
                    .map(|p| (p, false))
                    .collect()
            };
            for (path, is_log) in paths {
                match data.read_file(storage, table, &path, is_log) {
                    Ok(()) => {}
                    Err(e) => match skipped.as_deref_mut() {
                        Some(skipped) => skipped.push(e),
                        None => return Err(e),
                    },
                }
            }
        }
        Ok(data)
    }

    fn read_file(
        &mut self,
        storage: &Storage,
        table: Table,
        path: &str,
        is_log: bool,
    ) -> Result<(), LedgerError> {
        let bytes = storage.get(path)?;
        self.read_bytes(storage, table, path, is_log, bytes, None)
    }

    /// Takes in the rows of `bytes`, the file at `path` (of its row groups `row_groups`
    /// alone, all with `None`).
    pub(crate) fn read_bytes(
        &mut self,
        storage: &Storage,
        table: Table,
        path: &str,
        is_log: bool,
        bytes: bytes::Bytes,
        row_groups: Option<Vec<usize>>,
    ) -> Result<(), LedgerError> {
        let data = self;
        let bad = |reason: String| LedgerError::BadFile {
            path: format!("{}/{path}", storage.location()),
            reason,
        };
        let (bucket, versions) = partition(path);
        if table.by_bucket() && bucket.is_none() {
            return Err(bad("not under a bucket=… directory".into()));
        }
        if table.by_generation() && !is_log && versions.is_none() {
            return Err(bad("not under a versions=… directory".into()));
        }
        let batches = schema::decode_selected(bytes, table, None, row_groups).map_err(bad)?;
        data.files += 1;
        for batch in &batches {
            match table {
                Table::Samples => {
                    let bucket = bucket.clone().expect("checked");
                    // Decoded apart: rows of different buckets never share a batch.
                    let mut decoded = Vec::new();
                    crate::samples::from_arrow(batch, &mut decoded).map_err(bad)?;
                    for b in &mut decoded {
                        b.bucket.clone_from(&bucket);
                        let misplaced = versions
                            .as_ref()
                            .and_then(|range| b.policy_version.iter().find(|v| !range.contains(v)));
                        if let (Some(v), Some(range)) = (misplaced, &versions) {
                            return Err(bad(format!(
                                "holds policy version {v} under versions={}-{}",
                                range.start(),
                                range.end()
                            )));
                        }
                    }
                    for b in decoded {
                        match data.samples.last_mut() {
                            Some(last)
                                if last.bucket == b.bucket
                                    && last.config_hash == b.config_hash
                                    && last.obs_dim == b.obs_dim =>
                            {
                                last.extend_from(&b, 0..b.len());
                            }
                            _ => data.samples.push(b),
                        }
                    }
                }
                Table::Decisions => {
                    let bucket = bucket.as_ref().expect("checked");
                    schema::decisions_from_arrow(batch, bucket, &mut data.decisions)
                        .map_err(bad)?;
                }
                Table::Invalidations => {
                    schema::invalidations_from_arrow(batch, &mut data.invalidations)
                        .map_err(bad)?;
                }
                Table::Duplicates => {
                    schema::duplicates_from_arrow(batch, &mut data.duplicates).map_err(bad)?;
                }
                Table::Generations => {
                    schema::generations_from_arrow(batch, &mut data.generations).map_err(bad)?;
                }
            }
        }
        Ok(())
    }

    /// Sample rows held.
    pub fn sample_count(&self) -> usize {
        self.samples.iter().map(SampleBatch::len).sum()
    }
}
