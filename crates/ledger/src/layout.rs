//! Where everything lives in a ledger: the one module that names storage paths.
//!
//! ```text
//! samples/bucket=<b>/versions=<v0>-<v1>/part-<session>-<n>-to<id>.parquet   compacted samples
//! wal/samples/bucket=<b>/part-<session>-<n>-to<id>.parquet               sample log (not yet compacted)
//! wal/appends/bucket=<b>/<session>-<n>.arrows                     append log (durable appends)
//! decisions/bucket=<b>/part-….parquet
//! invalidations/ duplicates/ generations/ part-….parquet
//! rules/v<version>.json
//! ```

use std::ops::RangeInclusive;

use crate::bucket::Bucket;
use crate::schema::Table;
use crate::storage::Storage;
use crate::LedgerError;

/// The sample log: one file per bucket per flush, compacted into `samples/` later.
pub const SAMPLES_LOG: &str = "wal/samples";

/// The append log of durable appends (local ledgers).
pub(crate) const APPEND_LOG: &str = "wal/appends";

/// Where registered admission rules live.
pub(crate) const RULES_DIR: &str = "rules";

/// The registered admission rules of `version`.
pub(crate) fn rules_path(version: u64) -> String {
    format!("{RULES_DIR}/v{version:06}.json")
}

/// The directory a bucket's rows of `table` are written to (a sample log file for
/// samples, which compaction later partitions by generation).
pub(crate) fn bucket_dir(table: Table, bucket: &str) -> String {
    let root = match table {
        Table::Samples => SAMPLES_LOG,
        other => other.name(),
    };
    format!("{root}/bucket={bucket}")
}

/// Policy versions per sample partition (`versions=0-999`, `versions=1000-1999`, ...).
/// A gateway's learner or a fast run publishes several versions a second: a directory per
/// version made compaction write hundreds of small files a second (a 16-agent gateway:
/// 67,000 in 150 s, most of each file its footer), so inodes ran out long before bytes.
pub const VERSIONS_PER_PARTITION: u64 = 1000;

/// The versions of the partition that holds `version`.
pub(crate) fn partition_of(version: u64) -> RangeInclusive<u64> {
    let first = version - version % VERSIONS_PER_PARTITION;
    first..=first + (VERSIONS_PER_PARTITION - 1)
}

/// A compacted sample file's path, in the partition of `versions`.
pub(crate) fn partition_path(bucket: &str, versions: &RangeInclusive<u64>, name: &str) -> String {
    format!(
        "{}/bucket={bucket}/versions={}-{}/{name}",
        Table::Samples.name(),
        versions.start(),
        versions.end()
    )
}

/// A data file's name in `dir` for a writer's session and sequence number.
pub(crate) fn data_file(dir: &str, session: &str, seq: u64) -> String {
    format!("{dir}/part-{session}-{seq:06}.parquet")
}

/// A sample file's name in `dir`: as [`data_file`], with the highest sample id it holds
/// (`-to<id>`), which compaction keeps in the names of the files it makes from it. A
/// ledger's newest samples and its highest id are then found from its file names alone.
pub(crate) fn sample_file(dir: &str, session: &str, seq: u64, last_id: u64) -> String {
    format!("{dir}/part-{session}-{seq:06}-to{last_id}.parquet")
}

/// A merged file's name in `dir`: the rows of a session's files `first..=last` (by
/// sequence number) of that directory, with the highest sample id for sample files. It
/// sorts where its first input did, and supersedes every file of the session in that
/// range ([`drop_superseded`]).
pub(crate) fn merged_file(
    dir: &str,
    session: &str,
    seqs: &RangeInclusive<u64>,
    last_id: Option<u64>,
) -> String {
    let to = last_id.map(|id| format!("-to{id}")).unwrap_or_default();
    format!(
        "{dir}/part-{session}-{:06}-thru-{:06}{to}.parquet",
        seqs.start(),
        seqs.end()
    )
}

/// What a data file's name says: the writer session that wrote it and the sequence numbers
/// its rows came from (one for a written file, a range for a merged one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileSeqs<'a> {
    pub session: &'a str,
    pub seqs: RangeInclusive<u64>,
}

impl FileSeqs<'_> {
    /// Whether the name is a merged file's.
    pub fn merged(&self) -> bool {
        self.seqs.start() != self.seqs.end()
    }
}

/// Parses `part-<session>-<seq>[-thru-<seq>][-to<id>[-<k>]].parquet` (`-<k>`: compaction's
/// numbered sibling of a log file's partition file); `None` for another name.
pub(crate) fn file_seqs(path: &str) -> Option<FileSeqs<'_>> {
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let stem = file_name(path)
        .strip_prefix("part-")?
        .strip_suffix(".parquet")?;
    let stem = match stem.rsplit_once("-to") {
        Some((rest, tail)) => {
            let id = tail.split_once('-').map_or(
                tail,
                |(id, k)| {
                    if number(k).is_some() {
                        id
                    } else {
                        ""
                    }
                },
            );
            if number(id).is_some() {
                rest
            } else {
                stem
            }
        }
        None => stem,
    };
    let (session, seqs) = match stem.split_once("-thru-") {
        Some((head, last)) => {
            let (session, first) = head.rsplit_once('-')?;
            (session, number(first)?..=number(last)?)
        }
        None => {
            let (session, seq) = stem.rsplit_once('-')?;
            let seq = number(seq)?;
            (session, seq..=seq)
        }
    };
    (!session.is_empty() && seqs.start() <= seqs.end()).then_some(FileSeqs { session, seqs })
}

/// `paths` (sorted) without the files a merged file of the same directory and session
/// supersedes: after a merge its inputs are removed, but a crash or a reader listing in
/// between may still see them, and their rows must count once.
pub(crate) fn drop_superseded(paths: Vec<String>) -> Vec<String> {
    use std::collections::HashMap;
    let dir = |p: &str| p.rsplit_once('/').map_or("", |(d, _)| d).to_string();
    // The merged ranges of each directory and session.
    let mut merged: HashMap<(String, &str), Vec<RangeInclusive<u64>>> = HashMap::new();
    for path in &paths {
        if let Some(f) = file_seqs(path).filter(FileSeqs::merged) {
            merged
                .entry((dir(path), f.session))
                .or_default()
                .push(f.seqs);
        }
    }
    if merged.is_empty() {
        return paths;
    }
    let superseded = |path: &String| {
        let Some(f) = file_seqs(path) else {
            return false;
        };
        merged.get(&(dir(path), f.session)).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|r| *r != f.seqs && r.contains(f.seqs.start()) && r.contains(f.seqs.end()))
        })
    };
    let keep: Vec<bool> = paths.iter().map(|p| !superseded(p)).collect();
    paths
        .into_iter()
        .zip(keep)
        .filter_map(|(p, k)| k.then_some(p))
        .collect()
}

/// The highest sample id a sample file holds (at most), from its name; `None` for a file
/// of a ledger written before names carried it.
pub(crate) fn last_sample_id(path: &str) -> Option<u64> {
    let name = file_name(path);
    let (_, rest) = name.rsplit_once("-to")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The `bucket=…` and `versions=…` directories of a file's path: its bucket and the
/// policy versions it may hold (a ledger written before partitions held ranges has
/// `generation=<v>` directories, one version each). A bucket directory whose name is not
/// a bucket's, or a range that does not parse, counts as none.
pub(crate) fn partition(path: &str) -> (Option<Bucket>, Option<RangeInclusive<u64>>) {
    let mut bucket = None;
    let mut versions = None;
    for part in path.split('/') {
        if let Some(b) = part.strip_prefix("bucket=") {
            bucket = Bucket::new(b).ok();
        } else if let Some(range) = part.strip_prefix("versions=") {
            versions = range
                .split_once('-')
                .and_then(|(a, b)| Some(a.parse().ok()?..=b.parse().ok()?));
        } else if let Some(g) = part.strip_prefix("generation=") {
            versions = g.parse().ok().map(|g| g..=g);
        }
    }
    (bucket, versions)
}

/// The file name (`part-….parquet`) of a path.
pub(crate) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The ledger's data files of `table` (staging files of interrupted writes are not listed).
///
/// # Errors
/// [`LedgerError::Storage`].
pub fn table_files(storage: &Storage, table: Table) -> Result<Vec<String>, LedgerError> {
    parquet_files(storage, table.name())
}

/// Every stored sample file, newest first: by the highest sample id its name carries
/// ([`crate::layout::last_sample_id`]), with that id; files of ledgers written before names
/// carried it come last, with `None`.
///
/// # Errors
/// [`LedgerError::Storage`].
pub(crate) fn sample_files_newest_first(
    storage: &Storage,
) -> Result<Vec<(String, Option<u64>)>, LedgerError> {
    let mut files: Vec<(String, Option<u64>)> = sample_files(storage)?
        .into_iter()
        .map(|(path, _)| {
            let last = last_sample_id(&path);
            (path, last)
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.1));
    Ok(files)
}

/// The sample table's files: partition files, then log files (`true`). A partition file
/// named like a log file still present is a leftover of an interrupted compaction: the
/// log file is the authority, and the stray is left out.
pub(crate) fn sample_files(storage: &Storage) -> Result<Vec<(String, bool)>, LedgerError> {
    let logs = log_files(storage)?;
    let log_names: std::collections::HashSet<&str> = logs.iter().map(|p| file_name(p)).collect();
    let mut paths: Vec<(String, bool)> = table_files(storage, Table::Samples)?
        .into_iter()
        .filter(|p| !log_names.contains(file_name(p)))
        .map(|p| (p, false))
        .collect();
    paths.extend(logs.iter().map(|p| (p.clone(), true)));
    Ok(paths)
}

/// Sample log files present now.
pub(crate) fn log_files(storage: &Storage) -> Result<Vec<String>, LedgerError> {
    parquet_files(storage, SAMPLES_LOG)
}

/// The data files under `dir`, without those a merged file supersedes.
fn parquet_files(storage: &Storage, dir: &str) -> Result<Vec<String>, LedgerError> {
    Ok(drop_superseded(
        storage
            .list(dir)?
            .into_iter()
            .filter(|p| p.ends_with(".parquet"))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_file_names_its_highest_id() {
        let log = sample_file("wal/samples/bucket=train", "18a-2f", 12, 40_961);
        assert_eq!(
            log,
            "wal/samples/bucket=train/part-18a-2f-000012-to40961.parquet"
        );
        assert_eq!(last_sample_id(&log), Some(40_961));
        // Compaction's numbered sibling of the same log.
        let sibling = partition_path(
            "train",
            &partition_of(3),
            &file_name(&log).replace(".parquet", "-1.parquet"),
        );
        assert_eq!(last_sample_id(&sibling), Some(40_961));
        assert_eq!(
            last_sample_id("wal/samples/bucket=train/part-x-000001.parquet"),
            None
        );
    }

    #[test]
    fn file_names_say_their_session_and_sequence_numbers() {
        fn seqs(p: &str) -> Option<(&str, RangeInclusive<u64>)> {
            file_seqs(p).map(|f| (f.session, f.seqs))
        }
        assert_eq!(
            seqs("decisions/bucket=train/part-18a-2f-000012.parquet"),
            Some(("18a-2f", 12..=12))
        );
        assert_eq!(
            seqs("x/part-18a-2f-000012-to409.parquet"),
            Some(("18a-2f", 12..=12))
        );
        assert_eq!(
            seqs("x/part-18a-2f-000012-to409-1.parquet"),
            Some(("18a-2f", 12..=12))
        );
        let merged = merged_file("x", "18a-2f", &(3..=12), Some(409));
        assert_eq!(merged, "x/part-18a-2f-000003-thru-000012-to409.parquet");
        assert_eq!(seqs(&merged), Some(("18a-2f", 3..=12)));
        assert_eq!(last_sample_id(&merged), Some(409));
        assert_eq!(
            seqs(&merged_file("x", "ab", &(3..=12), None)),
            Some(("ab", 3..=12))
        );
        for foreign in [
            "x/data.parquet",
            "x/part-000012.parquet",
            "x/part-ab-12x.parquet",
        ] {
            assert_eq!(seqs(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn a_merged_file_supersedes_its_inputs_in_its_directory_and_session_only() {
        let paths: Vec<String> = [
            "d/part-a-000001.parquet",
            "d/part-a-000002-thru-000004.parquet",
            "d/part-a-000002.parquet",
            "d/part-a-000003.parquet",
            "d/part-a-000005.parquet",
            "d/part-b-000003.parquet",
            "e/part-a-000003.parquet",
        ]
        .map(String::from)
        .to_vec();
        let kept = drop_superseded(paths);
        assert_eq!(
            kept,
            [
                "d/part-a-000001.parquet",
                "d/part-a-000002-thru-000004.parquet",
                "d/part-a-000005.parquet",
                "d/part-b-000003.parquet",
                "e/part-a-000003.parquet",
            ]
        );
    }

    #[test]
    fn paths_parse_back() {
        let path = partition_path("train", &partition_of(1_007), "part-x-000001.parquet");
        assert_eq!(
            path,
            "samples/bucket=train/versions=1000-1999/part-x-000001.parquet"
        );
        assert_eq!(partition(&path), (Some(Bucket::train()), Some(1000..=1999)));
        assert_eq!(partition_of(999), 0..=999);
        // A ledger written before: one version per directory.
        assert_eq!(
            partition("samples/bucket=train/generation=7/part-x-000001.parquet"),
            (Some(Bucket::train()), Some(7..=7))
        );
        assert_eq!(file_name(&path), "part-x-000001.parquet");
        assert_eq!(
            bucket_dir(Table::Samples, "canary"),
            "wal/samples/bucket=canary"
        );
        assert_eq!(
            bucket_dir(Table::Decisions, "train"),
            "decisions/bucket=train"
        );
        assert_eq!(
            data_file("decisions/bucket=train", "ab", 12),
            "decisions/bucket=train/part-ab-000012.parquet"
        );
        assert_eq!(rules_path(3), "rules/v000003.json");
    }
}
