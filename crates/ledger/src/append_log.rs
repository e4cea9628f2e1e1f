//! The durable append log of a local ledger: rows appended with
//! [`crate::Ledger::append_samples_durable`] are written here as Arrow IPC stream messages
//! and synced (`fdatasync` of an open file: a fraction of a millisecond, where a new
//! Parquet file costs several), then buffered as usual. Once a flush has put them into the
//! sample log, the append-log files are removed. After a crash, readers merge the rows
//! not yet in the sample log, and the ledger's owner moves them there when it reopens.
//!
//! ```text
//! wal/appends/bucket=<bucket>/<session>-<n>.arrows
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;

use crate::samples::SampleBatch;

use crate::bucket::Bucket;
use crate::layout::APPEND_LOG;

/// The open append-log files of one writer, one per bucket.
pub(crate) struct AppendLog {
    root: PathBuf,
    session: String,
    seq: u64,
    open: HashMap<Bucket, (PathBuf, StreamWriter<std::io::BufWriter<File>>)>,
}

impl AppendLog {
    /// An append log under `root` (files are created on first use).
    pub(crate) fn new(root: &Path, session: &str) -> Self {
        AppendLog {
            root: root.to_path_buf(),
            session: session.to_string(),
            seq: 0,
            open: HashMap::new(),
        }
    }

    /// Appends `batches` (bucket, rows) and syncs the data of every file written.
    pub(crate) fn append(&mut self, batches: &[(Bucket, RecordBatch)]) -> std::io::Result<()> {
        let mut touched: Vec<Bucket> = Vec::new();
        for (bucket, batch) in batches {
            if !self.open.contains_key(bucket) {
                let dir = self.root.join(APPEND_LOG).join(format!("bucket={bucket}"));
                std::fs::create_dir_all(&dir)?;
                self.seq += 1;
                let path = dir.join(format!("{}-{:06}.arrows", self.session, self.seq));
                let file = File::create(&path)?;
                let writer = StreamWriter::try_new(
                    std::io::BufWriter::with_capacity(64 * 1024, file),
                    &crate::samples::arrow_schema(),
                )
                .map_err(std::io::Error::other)?;
                // The new name must survive a crash too.
                File::open(&dir)?.sync_all()?;
                self.open.insert(bucket.clone(), (path, writer));
            }
            let (_, writer) = self.open.get_mut(bucket).expect("opened above");
            writer.write(batch).map_err(std::io::Error::other)?;
            writer.flush().map_err(std::io::Error::other)?;
            if !touched.contains(bucket) {
                touched.push(bucket.clone());
            }
        }
        for bucket in touched {
            self.open[&bucket].1.get_ref().get_ref().sync_data()?;
        }
        Ok(())
    }

    /// Whether any file is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Removes every file: their rows are durable in the sample log now.
    pub(crate) fn retire(&mut self) -> std::io::Result<()> {
        for (_, (path, writer)) in self.open.drain() {
            drop(writer);
            std::fs::remove_file(&path)?;
        }
        Ok(())
    }
}

/// The append-log files under a local ledger root.
pub(crate) fn files(root: &Path) -> std::io::Result<Vec<(Bucket, PathBuf)>> {
    let dir = root.join(APPEND_LOG);
    let mut out = Vec::new();
    let Ok(buckets) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    for b in buckets {
        let b = b?;
        let name = b.file_name().to_string_lossy().into_owned();
        let Some(bucket) = name
            .strip_prefix("bucket=")
            .and_then(|b| Bucket::new(b).ok())
        else {
            continue;
        };
        for f in std::fs::read_dir(b.path())? {
            let path = f?.path();
            if path.extension().is_some_and(|e| e == "arrows") {
                out.push((bucket.clone(), path));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Reads one append-log file; a torn last message (the writer died mid-append, before the
/// sync that would have acknowledged it) ends the file.
pub(crate) fn read(bucket: &Bucket, path: &Path) -> Result<Vec<SampleBatch>, String> {
    let mut out = Vec::new();
    let file = match File::open(path) {
        Ok(f) => f,
        // Retired by its writer since it was listed: its rows are in the sample log.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e.to_string()),
    };
    let reader = match StreamReader::try_new(std::io::BufReader::new(file), None) {
        Ok(r) => r,
        // Not even a schema: created, never acknowledged.
        Err(_) => return Ok(out),
    };
    for batch in reader {
        let Ok(batch) = batch else { break };
        let mut decoded = Vec::new();
        crate::samples::from_arrow(&batch, &mut decoded)?;
        for mut b in decoded {
            b.bucket = bucket.clone();
            out.push(b);
        }
    }
    Ok(out)
}

/// Every row in a local ledger's append log, and its files (none for an object store).
///
/// # Errors
/// An unreadable append-log file.
pub(crate) fn logged(
    storage: &crate::Storage,
) -> Result<(Vec<SampleBatch>, Vec<PathBuf>), crate::LedgerError> {
    let Some(root) = storage.local_root() else {
        return Ok((Vec::new(), Vec::new()));
    };
    let found =
        files(root).map_err(|e| crate::LedgerError::storage("listing the append log", e))?;
    let mut rows = Vec::new();
    for (bucket, path) in &found {
        rows.extend(
            read(bucket, path).map_err(|reason| crate::LedgerError::BadFile {
                path: path.display().to_string(),
                reason,
            })?,
        );
    }
    Ok((rows, found.into_iter().map(|(_, p)| p).collect()))
}

/// As [`stranded`], for a ledger too large to hold: the append log's rows are read first
/// (what a crash left unflushed: a flush interval's worth), then the stored samples are
/// scanned one file at a time for those rows' ids.
///
/// # Errors
/// An unreadable append-log or sample file.
pub(crate) fn stranded_scanning(
    storage: &crate::Storage,
) -> Result<(Vec<SampleBatch>, Vec<PathBuf>), crate::LedgerError> {
    let (rows, paths) = logged(storage)?;
    if rows.is_empty() {
        return Ok((rows, paths));
    }
    let wanted: std::collections::HashSet<u64> = rows
        .iter()
        .flat_map(|b| b.sample_id.iter().copied())
        .collect();
    let mut in_log = std::collections::HashSet::new();
    // Only a file whose highest id reaches the oldest wanted row can hold one (a file of
    // an older ledger, whose name does not say, is read).
    let oldest = wanted.iter().copied().min().unwrap_or(0);
    let files = crate::layout::sample_files_newest_first(storage)?;
    let candidates = files
        .iter()
        .filter(|(_, last)| last.is_none_or(|last| last >= oldest))
        .map(|(p, _)| p.as_str());
    crate::LedgerData::scan_sample_ids(storage, candidates, |ids, _, _| {
        in_log.extend(ids.iter().filter(|id| wanted.contains(id)));
        std::ops::ControlFlow::Continue(())
    })?;
    Ok((keep_missing(rows, &in_log), paths))
}

/// The rows of `batches` whose ids are not in `stored`.
fn keep_missing(
    batches: Vec<SampleBatch>,
    stored: &std::collections::HashSet<u64>,
) -> Vec<SampleBatch> {
    let mut out = Vec::new();
    for b in batches {
        let keep: Vec<usize> = (0..b.len())
            .filter(|&i| !stored.contains(&b.sample_id[i]))
            .collect();
        let mut kept = SampleBatch::new(&b.bucket, &b.config_hash, b.obs_dim);
        for i in keep {
            kept.extend_from(&b, i..i + 1);
        }
        if !kept.is_empty() {
            out.push(kept);
        }
    }
    out
}

/// The rows of the append log (`logged`, as [`logged`] read it) that are not among
/// `stored`'s samples (read without the append log: not flushed yet, or a writer died
/// before flushing them), and the append-log files to remove once they are in the sample
/// log.
///
/// Read the append log before the stored samples: a flush that moves rows from the one to
/// the other in between then leaves them in what was read second (the writer retires an
/// append-log file only after its rows are in the sample log), never in neither.
pub(crate) fn stranded(
    (rows, paths): (Vec<SampleBatch>, Vec<PathBuf>),
    stored: &crate::LedgerData,
) -> (Vec<SampleBatch>, Vec<PathBuf>) {
    if rows.is_empty() {
        return (rows, paths);
    }
    let in_log: std::collections::HashSet<u64> = stored
        .samples
        .iter()
        .flat_map(|b| b.sample_id.iter().copied())
        .collect();
    (keep_missing(rows, &in_log), paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_rows_read_back_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = AppendLog::new(dir.path(), "s");
        let mut b = SampleBatch::new(&"train".parse().unwrap(), "cafe", 1);
        let record = crate::SampleRecord {
            sample_id: 5,
            episode_id: 1,
            trajectory_id: 1,
            step: 0,
            policy_version: 2,
            config_hash: "cafe".into(),
            issued_at_ns: 1,
            completed_at_ns: 2,
            obs_count: 1,
            obs_hash: 3,
            obs_min: vec![0.0],
            obs_max: vec![1.0],
            obs_mean: vec![0.5],
            env_clock: 1,
            sampler_version: 2,
            bucket: "train".parse().unwrap(),
            idempotency_key: Some("k".into()),
            reward: 1.0,
            terminated: false,
            truncated: false,
            episode_return: None,
            success: None,
            worker: None,
            fragment: None,
            action: None,
            behaviour_log_prob: None,
            observation: None,
            next_observation: None,
        };
        b.push(&record).unwrap();
        let arrow = crate::samples::to_arrow(&b);
        log.append(&[(Bucket::train(), arrow.clone())]).unwrap();
        log.append(&[(Bucket::train(), arrow)]).unwrap();
        let found = files(dir.path()).unwrap();
        assert_eq!(found.len(), 1);
        let path = &found[0].1;
        // A torn third message.
        let len = std::fs::metadata(path).unwrap().len();
        let bytes = std::fs::read(path).unwrap();
        std::fs::write(
            path,
            [&bytes[..], &bytes[len as usize / 2..len as usize * 3 / 4]].concat(),
        )
        .unwrap();
        let back = read(&Bucket::train(), path).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].row(0), record);
        log.retire().unwrap();
        assert!(files(dir.path()).unwrap().is_empty());
    }
}
