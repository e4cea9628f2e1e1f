//! Sample log and compaction. While a run trains, each flush writes the samples it holds as
//! one log file per bucket (`wal/samples/bucket=…/part-….parquet`): a fast run publishes
//! hundreds of versions a second, and a file and directory per version per flush would
//! cost the learner's cores more than the training they record. Compaction (when the
//! ledger is closed or opened, or `strata ledger compact`) sorts log files into the
//! hive-partitioned `samples/bucket=…/generation=…/` layout.
//!
//! Crash safety without markers: a compacted file keeps its log file's name. While the log
//! file exists it is the authority and same-named partition files are ignored (they may be
//! partial); once it is removed, the partition files are. Recompaction first removes such
//! strays.

use std::collections::{BTreeMap, HashSet};

use crate::layout::{file_name, log_files, partition, partition_path, table_files};
use crate::samples::SampleBatch;
use crate::schema::{self, Table};
use crate::storage::Storage;
use crate::LedgerError;

/// Recovery after an interrupted run: removes staged leftovers, then compacts. Only for the
/// ledger's one owner (see [`Storage::remove_staged_leftovers`]).
///
/// # Errors
/// As [`compact`].
pub fn recover(storage: &Storage) -> Result<u64, LedgerError> {
    storage.remove_staged_leftovers()?;
    compact(storage)
}

/// Sorts every log file's rows into generation partitions; returns the rows moved.
///
/// # Errors
/// A log file that cannot be read (named), or storage failures; the log files stay.
pub fn compact(storage: &Storage) -> Result<u64, LedgerError> {
    let logs = log_files(storage)?;
    if logs.is_empty() {
        return Ok(0);
    }
    let names: HashSet<&str> = logs.iter().map(|p| file_name(p)).collect();
    let strays: Vec<String> = table_files(storage, Table::Samples)?
        .into_iter()
        .filter(|p| names.contains(file_name(p)))
        .collect();
    storage.delete_all(&strays)?;
    let mut pending: Vec<(String, SampleBatch)> = Vec::new();
    let mut rows = 0u64;
    for log in &logs {
        let bad = |reason: String| LedgerError::BadFile {
            path: format!("{}/{log}", storage.location()),
            reason,
        };
        let bucket = partition(log)
            .0
            .ok_or_else(|| bad("not under a bucket=… directory".into()))?;
        let mut batches = Vec::new();
        for batch in schema::decode(storage.get(log)?, Table::Samples).map_err(bad)? {
            crate::samples::from_arrow(&batch, &mut batches).map_err(bad)?;
        }
        let mut by_generation: BTreeMap<(u64, String, usize), SampleBatch> = BTreeMap::new();
        for b in &batches {
            // Rows arrive in runs of one version (a fragment at a time): copy run by run.
            let mut start = 0;
            while start < b.len() {
                let version = b.policy_version[start];
                let end = (start..b.len())
                    .find(|&i| b.policy_version[i] != version)
                    .unwrap_or(b.len());
                by_generation
                    .entry((version, b.config_hash.clone(), b.obs_dim))
                    .or_insert_with(|| SampleBatch::new(&bucket, &b.config_hash, b.obs_dim))
                    .extend_from(b, start..end);
                rows += (end - start) as u64;
                start = end;
            }
        }
        let mut per_generation: BTreeMap<u64, usize> = BTreeMap::new();
        for ((generation, _, _), b) in by_generation {
            // One file per generation per log file; a second config in the same generation
            // (rare) gets a numbered sibling.
            let k = per_generation.entry(generation).or_default();
            let name = if *k == 0 {
                file_name(log).to_string()
            } else {
                file_name(log).replace(".parquet", &format!("-{k}.parquet"))
            };
            *k += 1;
            let path = partition_path(&bucket, generation, &name);
            pending.push((path, b));
        }
    }
    // After a run the cores are free: encode the (many, small) partition files on scoped
    // threads (joined before returning).
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(4);
    let chunk = pending.len().div_ceil(threads).max(1);
    let encoded: Vec<Result<Vec<(String, bytes::Bytes)>, LedgerError>> = std::thread::scope(|s| {
        let workers: Vec<_> = pending
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|(path, b)| {
                            schema::encode(&crate::samples::to_arrow(b))
                                .map(|bytes| (path.clone(), bytes))
                                .map_err(|e| LedgerError::storage(format!("encoding {path}"), e))
                        })
                        .collect()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("an encoding thread panicked"))
            .collect()
    });
    let mut files = Vec::with_capacity(pending.len());
    for part in encoded {
        files.extend(part?);
    }
    for result in storage.put_all(files) {
        result?;
    }
    storage.delete_all(&logs)?;
    Ok(rows)
}
