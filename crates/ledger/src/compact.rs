//! Sample log and compaction. While a run trains, each flush writes the samples it holds as
//! one log file per bucket (`wal/samples/bucket=…/part-….parquet`): a fast run publishes
//! hundreds of versions a second, and a file and directory per version per flush would
//! cost the learner's cores more than the training they record. Compaction (when the
//! ledger is closed or opened, by an owner while it writes, or `strata ledger compact`)
//! sorts log files into the hive-partitioned `samples/bucket=…/versions=…/` layout, one
//! partition per [`crate::layout::VERSIONS_PER_PARTITION`] policy versions.
//!
//! Crash safety without markers: a compacted file keeps its log file's name. While the log
//! file exists it is the authority and same-named partition files are ignored (they may be
//! partial); once it is removed, the partition files are. Recompaction first removes such
//! strays.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::layout::{file_name, log_files, partition, partition_of, partition_path, table_files};
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

/// Sorts every log file's rows into generation partitions, then merges small files
/// ([`crate::merge`]); returns the rows moved.
///
/// # Errors
/// A log file that cannot be read (named), or storage failures; the log files stay.
pub fn compact(storage: &Storage) -> Result<u64, LedgerError> {
    compact_unless(storage, &AtomicBool::new(false))
}

/// As [`compact`], giving up between steps once `stop` is raised: a background pass ends
/// at once when its ledger closes, and the closing compaction does the rest. A pass given
/// up leaves nothing half-done that counts: log files stay the authority until all their
/// rows are in partitions, and each merge is whole or not at all.
pub(crate) fn compact_unless(storage: &Storage, stop: &AtomicBool) -> Result<u64, LedgerError> {
    let rows = compact_log(storage, stop)?;
    if stop.load(Ordering::Relaxed) {
        return Ok(rows);
    }
    let merged = crate::merge::merge_small_files(storage, stop)?;
    if merged.files_removed > 0 {
        tracing::debug!(
            component = "ledger",
            written = merged.files_written,
            removed = merged.files_removed,
            "merged small files"
        );
    }
    Ok(rows)
}

/// Moves the sample log's rows into partitions; the rows moved (none when `stop` is
/// raised before the last group: the partition files written are strays until the next).
fn compact_log(storage: &Storage, stop: &AtomicBool) -> Result<u64, LedgerError> {
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
    // A few log files at a time, each decoded, sorted and encoded on a scoped thread of its
    // own (the cores are free after a run): memory holds what those files hold, whatever
    // the ledger's size, and the cost follows the rows moved.
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(4);
    let mut rows = 0u64;
    for group in logs.chunks(threads) {
        if stop.load(Ordering::Relaxed) {
            return Ok(0);
        }
        let mut read = Vec::with_capacity(group.len());
        for log in group {
            read.push((log.as_str(), storage.get(log)?));
        }
        let sorted: Vec<Result<Partitioned, LedgerError>> = std::thread::scope(|s| {
            let workers: Vec<_> = read
                .into_iter()
                .map(|(log, bytes)| s.spawn(move || partition_log(storage, log, bytes)))
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a compaction thread panicked"))
                .collect()
        });
        let mut files = Vec::new();
        for part in sorted {
            let (moved, encoded) = part?;
            rows += moved;
            files.extend(encoded);
        }
        for result in storage.put_all(files) {
            result?;
        }
    }
    // Only now do the partition files take over from the log files (see the module doc).
    storage.delete_all(&logs)?;
    Ok(rows)
}

/// A log file's rows moved, and the partition files they went to (path and bytes).
type Partitioned = (u64, Vec<(String, bytes::Bytes)>);

/// One log file's rows sorted into generation partition files, encoded.
fn partition_log(
    storage: &Storage,
    log: &str,
    bytes: bytes::Bytes,
) -> Result<Partitioned, LedgerError> {
    let bad = |reason: String| LedgerError::BadFile {
        path: format!("{}/{log}", storage.location()),
        reason,
    };
    let bucket = partition(log)
        .0
        .ok_or_else(|| bad("not under a bucket=… directory".into()))?;
    let mut batches = Vec::new();
    for batch in schema::decode(bytes, Table::Samples).map_err(bad)? {
        crate::samples::from_arrow(&batch, &mut batches).map_err(bad)?;
    }
    let mut rows = 0u64;
    let mut by_partition: BTreeMap<(u64, String, usize), SampleBatch> = BTreeMap::new();
    for b in &batches {
        // Rows arrive in runs of one version (a fragment at a time): copy run by run.
        let mut start = 0;
        while start < b.len() {
            let version = b.policy_version[start];
            let end = (start..b.len())
                .find(|&i| b.policy_version[i] != version)
                .unwrap_or(b.len());
            by_partition
                .entry((
                    *partition_of(version).start(),
                    b.config_hash.clone(),
                    b.obs_dim,
                ))
                .or_insert_with(|| SampleBatch::new(&bucket, &b.config_hash, b.obs_dim))
                .extend_from(b, start..end);
            rows += (end - start) as u64;
            start = end;
        }
    }
    drop(batches);
    let mut per_partition: BTreeMap<u64, usize> = BTreeMap::new();
    let mut files = Vec::with_capacity(by_partition.len());
    for ((first, _, _), b) in by_partition {
        // One file per partition per log file; a second config in the same partition
        // (rare) gets a numbered sibling.
        let k = per_partition.entry(first).or_default();
        let name = if *k == 0 {
            file_name(log).to_string()
        } else {
            file_name(log).replace(".parquet", &format!("-{k}.parquet"))
        };
        *k += 1;
        let path = partition_path(&bucket, &partition_of(first), &name);
        let encoded = schema::encode(&crate::samples::to_arrow(&b))
            .map_err(|e| LedgerError::storage(format!("encoding {path}"), e))?;
        files.push((path, encoded));
    }
    Ok((rows, files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ledger, LedgerConfig};

    /// A stopped pass moves nothing and leaves the log the authority; the next pass moves
    /// every row once.
    #[test]
    fn a_stopped_compaction_gives_up_and_the_next_moves_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_str().unwrap();
        let no_background = LedgerConfig {
            compact_every: None,
            ..LedgerConfig::new(location)
        };
        let ledger = Ledger::open(&no_background).unwrap();
        for id in 0..6 {
            let mut batch = SampleBatch::new(&crate::Bucket::train(), "cafe", 2);
            batch
                .push(&crate::samples::tests::record(id, "cafe"))
                .unwrap();
            ledger.append_samples(batch).unwrap();
            ledger.flush().unwrap();
        }
        let storage = Storage::open(location).unwrap();
        let logs = log_files(&storage).unwrap();
        assert!(!logs.is_empty());
        assert_eq!(compact_unless(&storage, &AtomicBool::new(true)).unwrap(), 0);
        assert_eq!(
            log_files(&storage).unwrap(),
            logs,
            "the log stays the authority"
        );
        assert_eq!(
            compact_unless(&storage, &AtomicBool::new(false)).unwrap(),
            6
        );
        assert!(log_files(&storage).unwrap().is_empty());
        drop(ledger);
        let data = crate::LedgerData::read(&storage).unwrap();
        assert_eq!(data.samples.iter().map(SampleBatch::len).sum::<usize>(), 6);
    }
}
