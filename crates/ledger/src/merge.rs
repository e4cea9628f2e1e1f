//! Merging small files. A writer flushes about once a second, and each flush writes a file
//! per table it has rows for: a gateway running for a week would leave some 600,000 files
//! in each table, most of each its footer, and every read (a restart's too) would open
//! them all. The ledger's owner therefore merges, after each compaction, the small files
//! one session wrote into one directory: a run of at least [`MIN_RUN`] consecutive ones
//! becomes one file of at most about [`MERGED_TARGET`] bytes. Merged files are merged
//! again as they accumulate, so a table holds a number of files that grows with its bytes,
//! not with the flushes that wrote them.
//!
//! Crash safety without markers: a merged file is named for the range of sequence numbers
//! it holds (`part-<session>-<first>-thru-<last>…`), and readers leave out every file of
//! that session and directory in the range ([`crate::layout::drop_superseded`]). It is
//! written whole before its inputs are removed, so a crash or a reader in between sees
//! each row once. A range is merged only when no file of it can still appear: a writer
//! puts one directory's files in sequence order, each durable before the next, and a
//! sample partition's files come from log files, so none is merged while a log file of
//! its session and bucket at or below its range's end remains.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use parquet::arrow::ArrowWriter;

use crate::layout::{
    drop_superseded, file_seqs, last_sample_id, log_files, merged_file, partition,
};
use crate::schema::{self, Table};
use crate::storage::Storage;
use crate::LedgerError;

/// A file under this many bytes is merged with its neighbours.
pub(crate) const SMALL_FILE: u64 = 4 << 20;

/// A merged file's inputs add up to at most about this many bytes: memory while merging is
/// one input decoded and one row group in progress.
pub(crate) const MERGED_TARGET: u64 = 16 << 20;

/// Consecutive small files of one session in one directory before they are merged.
pub(crate) const MIN_RUN: usize = 16;

/// A row group is closed once this many bytes are buffered.
const ROW_GROUP_BYTES: usize = 8 << 20;

/// What one merge pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Files written.
    pub files_written: usize,
    /// Files they replaced (removed).
    pub files_removed: usize,
}

/// One stored file: path, bytes, sequence numbers.
struct Stored {
    path: String,
    size: u64,
    first: u64,
    last: u64,
}

/// Merges every table's runs of small files; only for the ledger's one owner, with the
/// compaction lock held (see the module doc). Stops between two merges once `stop` is
/// raised.
///
/// # Errors
/// Storage failures and unreadable files (named); what was merged before stays merged.
pub(crate) fn merge_small_files(
    storage: &Storage,
    stop: &AtomicBool,
) -> Result<Merged, LedgerError> {
    // The lowest sequence number of each (bucket, session)'s remaining log files.
    let mut log_floor: HashMap<(String, String), u64> = HashMap::new();
    for log in log_files(storage)? {
        let (Some(bucket), Some(f)) = (partition(&log).0, file_seqs(&log)) else {
            continue;
        };
        let floor = log_floor
            .entry((bucket.to_string(), f.session.to_string()))
            .or_insert(u64::MAX);
        *floor = (*floor).min(*f.seqs.start());
    }
    let mut merged = Merged::default();
    for table in Table::ALL {
        let listed: Vec<(String, u64)> = storage
            .list_sized(table.name())?
            .into_iter()
            .filter(|(p, _)| p.ends_with(".parquet"))
            .collect();
        let paths: Vec<String> = listed.iter().map(|(p, _)| p.clone()).collect();
        let kept: std::collections::HashSet<String> =
            drop_superseded(paths.clone()).into_iter().collect();
        // Inputs a crash left behind their merged file.
        let leftovers: Vec<String> = paths.into_iter().filter(|p| !kept.contains(p)).collect();
        storage.delete_all(&leftovers)?;
        merged.files_removed += leftovers.len();
        let mut groups: HashMap<(String, String), Vec<Stored>> = HashMap::new();
        for (path, size) in listed.into_iter().filter(|(p, _)| kept.contains(p)) {
            let Some(f) = file_seqs(&path) else { continue };
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
            let session = f.session.to_string();
            let (first, last) = (*f.seqs.start(), *f.seqs.end());
            groups.entry((dir, session)).or_default().push(Stored {
                path,
                size,
                first,
                last,
            });
        }
        for ((dir, session), mut files) in groups {
            files.sort_by_key(|f| (f.first, f.last));
            // A sample partition's files wait for their session's log files below them.
            let floor = match (table, partition(&dir).0) {
                (Table::Samples, Some(bucket)) => log_floor
                    .get(&(bucket.to_string(), session.clone()))
                    .copied()
                    .unwrap_or(u64::MAX),
                _ => u64::MAX,
            };
            for run in runs(&files, floor) {
                if stop.load(Ordering::Relaxed) {
                    return Ok(merged);
                }
                let done = merge_run(storage, table, &dir, &session, run)?;
                merged.files_written += done.files_written;
                merged.files_removed += done.files_removed;
            }
        }
    }
    Ok(merged)
}

/// The runs of `files` (sorted) worth merging: consecutive small files below `floor`, at
/// least [`MIN_RUN`] of them, cut at [`MERGED_TARGET`]. A sequence number held by two
/// files (compaction's sibling for a second config in a partition) is never merged: the
/// two may differ in schema, and a range must take both or neither.
fn runs(files: &[Stored], floor: u64) -> Vec<&[Stored]> {
    let shared = |i: usize| {
        let f = &files[i];
        (i > 0 && files[i - 1].last >= f.first)
            || files.get(i + 1).is_some_and(|next| next.first <= f.last)
    };
    let mut runs = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    for i in 0..=files.len() {
        let fits = i < files.len() && {
            let f = &files[i];
            f.size < SMALL_FILE && f.last < floor && !shared(i)
        };
        if fits && bytes + files[i].size <= MERGED_TARGET {
            bytes += files[i].size;
            continue;
        }
        if i - start >= MIN_RUN {
            runs.push(&files[start..i]);
        }
        if fits {
            // Full: this file starts the next run.
            start = i;
            bytes = files[i].size;
        } else {
            start = i + 1;
            bytes = 0;
        }
    }
    runs
}

/// Merges `run` (one session's files in `dir`), as one file or, where a file's schema
/// differs from the files before it, as one file per stretch of one schema.
fn merge_run(
    storage: &Storage,
    table: Table,
    dir: &str,
    session: &str,
    run: &[Stored],
) -> Result<Merged, LedgerError> {
    let mut merged = Merged::default();
    let mut start = 0;
    while start < run.len() {
        let (end, bytes) = encode_stretch(storage, table, &run[start..])?;
        let stretch = &run[start..start + end];
        start += end;
        if stretch.len() < 2 {
            continue;
        }
        let last_id = if table == Table::Samples {
            stretch
                .iter()
                .map(|f| last_sample_id(&f.path))
                .collect::<Option<Vec<u64>>>()
                .and_then(|ids| ids.into_iter().max())
        } else {
            None
        };
        let seqs = stretch[0].first..=stretch[stretch.len() - 1].last;
        if let Some(bytes) = bytes {
            storage.put_new(&merged_file(dir, session, &seqs, last_id), bytes)?;
            merged.files_written += 1;
        }
        let inputs: Vec<String> = stretch.iter().map(|f| f.path.clone()).collect();
        storage.delete_all(&inputs)?;
        merged.files_removed += inputs.len();
    }
    Ok(merged)
}

/// Encodes the longest prefix of `files` that shares the first file's schema as one file;
/// returns how many files it took (at least one) and the bytes (`None`: they hold no rows).
fn encode_stretch(
    storage: &Storage,
    table: Table,
    files: &[Stored],
) -> Result<(usize, Option<bytes::Bytes>), LedgerError> {
    let mut writer: Option<(ArrowWriter<Vec<u8>>, arrow_schema::SchemaRef)> = None;
    let mut taken = 0;
    for file in files {
        let bad = |reason: String| LedgerError::BadFile {
            path: format!("{}/{}", storage.location(), file.path),
            reason,
        };
        let batches = schema::decode(storage.get(&file.path)?, table).map_err(bad)?;
        let Some(schema) = batches.first().map(|b| b.schema()) else {
            taken += 1;
            continue;
        };
        if batches
            .iter()
            .any(|b| b.schema().fields() != schema.fields())
        {
            return Err(bad("its row groups differ in schema".into()));
        }
        let w = match &mut writer {
            Some((_, first)) if first.fields() != schema.fields() => break,
            Some((w, _)) => w,
            None => {
                // Decoded batches lack the file's metadata (`strata.table`): the table's
                // schema puts it back.
                let fields = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
                let w = ArrowWriter::try_new(
                    Vec::new(),
                    schema::table_schema(table, fields),
                    Some(schema::writer_properties()),
                )
                .map_err(|e| LedgerError::storage("merging", e))?;
                &mut writer.insert((w, schema)).0
            }
        };
        for batch in &batches {
            w.write(batch)
                .map_err(|e| LedgerError::storage(format!("merging {}", file.path), e))?;
        }
        if w.in_progress_size() >= ROW_GROUP_BYTES {
            w.flush().map_err(|e| LedgerError::storage("merging", e))?;
        }
        taken += 1;
    }
    // `into_inner` writes the footer.
    let out = match writer {
        Some((w, _)) => Some(bytes::Bytes::from(
            w.into_inner()
                .map_err(|e| LedgerError::storage("merging", e))?,
        )),
        None => None,
    };
    Ok((taken.max(1), out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(first: u64, last: u64, size: u64) -> Stored {
        Stored {
            path: format!("d/part-s-{first:06}.parquet"),
            size,
            first,
            last,
        }
    }

    fn ranges(runs: &[&[Stored]]) -> Vec<(u64, u64)> {
        runs.iter()
            .map(|r| (r[0].first, r[r.len() - 1].last))
            .collect()
    }

    #[test]
    fn runs_are_long_enough_small_below_the_floor_and_cut_at_the_target() {
        let small: Vec<Stored> = (1..=40).map(|s| stored(s, s, 1000)).collect();
        assert_eq!(ranges(&runs(&small, u64::MAX)), [(1, 40)]);
        // Too few below the floor: nothing.
        assert!(runs(&small, 16).is_empty());
        assert_eq!(ranges(&runs(&small, 17)), [(1, 16)]);
        // A big file breaks the run, and a stretch too short is left.
        let mut files: Vec<Stored> = (1..=40).map(|s| stored(s, s, 1000)).collect();
        files[20].size = SMALL_FILE;
        assert_eq!(ranges(&runs(&files, u64::MAX)), [(1, 20), (22, 40)]);
        files[30].size = SMALL_FILE;
        assert_eq!(ranges(&runs(&files, u64::MAX)), [(1, 20)]);
        // A sequence number held by two files (a sibling) is left alone.
        let mut files: Vec<Stored> = (1..=40).map(|s| stored(s, s, 1000)).collect();
        files.insert(30, stored(30, 30, 1000));
        assert_eq!(ranges(&runs(&files, u64::MAX)), [(1, 29)]);
        // Cut where the inputs would pass the target.
        let big: Vec<Stored> = (1..=40).map(|s| stored(s, s, MERGED_TARGET / 20)).collect();
        assert_eq!(ranges(&runs(&big, u64::MAX)), [(1, 20), (21, 40)]);
    }
}
