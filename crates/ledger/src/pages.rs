//! Reads that cost a page, not the history: a trainer's page of admitted samples and the
//! check of its report read only the row groups that can hold the ids asked for.
//!
//! A [`PageReader`] learns each sample file's row groups and their `sample_id` spans once,
//! from the file's footer (files never change in place: a flush, compaction or merge
//! writes new ones), and keeps the decision and invalidation records of each file it read.
//! A call lists the ledger, reads the footers of files it has not seen, forgets files that
//! are gone, then decodes row groups in the order of their first id until the page is
//! full: rows below the first id of every group not yet read are final and go onto the
//! page in id order. A ledger of weeks answers a page in the time of the page.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;

use crate::admitted::{AdmittedPage, AdmittedQuery, Page, TrainedReport};
use crate::analysis::{trajectory_reasons, Index};
use crate::layout::{sample_files, table_files};
use crate::reader::LedgerData;
use crate::record::{DecisionRecord, Invalidation, ReasonCode, Target};
use crate::rules::VersionedRules;
use crate::samples::SampleBatch;
use crate::schema::Table;
use crate::storage::Storage;
use crate::LedgerError;

/// The ids one row group of a sample file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Group {
    first: u64,
    last: u64,
    index: usize,
}

/// What a sample file holds, learnt once from its footer.
#[derive(Clone, Debug)]
struct SampleFile {
    is_log: bool,
    groups: Vec<Group>,
}

/// Where a span of ids is read from.
#[derive(Clone, Debug)]
enum Source {
    /// A row group of a stored file.
    Group {
        path: String,
        is_log: bool,
        index: usize,
    },
    /// Rows durable only in the append log (read at the start of the call).
    Logged(usize),
}

/// Ids `first..=last`, readable from `source`.
#[derive(Clone, Debug)]
struct Span {
    first: u64,
    last: u64,
    source: Source,
}

/// Reads pages of a ledger that a writer may be appending to, compacting and merging
/// while it reads. Keep one per ledger and call it again: what it learnt of the files is
/// what makes a page cheap.
#[derive(Default)]
pub struct PageReader {
    samples: HashMap<String, SampleFile>,
    decisions: HashMap<String, Vec<DecisionRecord>>,
    /// Decision files in listing order (file order breaks ties between decisions).
    decision_order: Vec<String>,
    invalidations: HashMap<String, Vec<Invalidation>>,
    /// Invalidation files in listing order (file order decides which reason is kept).
    invalidation_order: Vec<String>,
    /// Invalidated trajectories, rebuilt when the invalidation files change.
    trajectories: HashMap<u64, ReasonCode>,
}

impl std::fmt::Debug for PageReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageReader")
            .field("sample_files", &self.samples.len())
            .field("decision_files", &self.decisions.len())
            .field("invalidation_files", &self.invalidations.len())
            .finish()
    }
}

impl PageReader {
    /// A reader that knows no file yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The admitted samples from `query.from` on under `rules`: one page of at most
    /// `query.limit`, as [`crate::admitted()`] answers over the whole ledger.
    ///
    /// # Errors
    /// [`LedgerError::BadFile`] naming an unreadable file, or a storage failure.
    pub fn admitted(
        &mut self,
        storage: &Storage,
        rules: &VersionedRules,
        query: &AdmittedQuery,
    ) -> Result<AdmittedPage, LedgerError> {
        self.settled(|reader| reader.admitted_once(storage, rules, query))
    }

    /// The decisions `report` becomes under `rules`, as [`crate::trained_decisions`]
    /// answers over the whole ledger (the inner `Err` says which sample is refused).
    ///
    /// # Errors
    /// [`LedgerError::BadFile`] naming an unreadable file, or a storage failure.
    pub fn trained_decisions(
        &mut self,
        storage: &Storage,
        rules: &VersionedRules,
        report: &TrainedReport,
    ) -> Result<Result<Vec<DecisionRecord>, String>, LedgerError> {
        self.settled(|reader| reader.trained_once(storage, rules, report))
    }

    /// Runs `read` again, with a fresh listing, while a file it listed vanished before it
    /// was read (the owner compacts and merges while it writes; the rows are then in files
    /// the next listing shows).
    fn settled<T>(
        &mut self,
        mut read: impl FnMut(&mut Self) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let mut pause = Duration::from_millis(1);
        for _ in 0..8 {
            match read(self) {
                Err(e) if e.is_not_found() => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(64));
                }
                other => return other,
            }
        }
        read(self)
    }

    fn admitted_once(
        &mut self,
        storage: &Storage,
        rules: &VersionedRules,
        query: &AdmittedQuery,
    ) -> Result<AdmittedPage, LedgerError> {
        // The append log before the listing: rows a flush moves meanwhile are in a file
        // the listing shows, or still in what was read here.
        let (logged, _) = crate::append_log::logged(storage)?;
        self.refresh(storage)?;
        let from = query.from;
        let decisions: Vec<&DecisionRecord> = self
            .decisions_in_order()
            .filter(|d| d.last_sample >= from)
            .collect();
        let index = Index::from_parts(
            decisions,
            self.ranges(|_, last| last >= from),
            Cow::Borrowed(&self.trajectories),
        );
        let spans = self.spans(&logged, |_, last| last >= from);
        let mut batches: Vec<SampleBatch> = logged;
        let mut files = FileCache::default();
        let mut heap: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
        let mut page = Page::new(query);
        let mut last_offered: Option<u64> = None;
        for next in 0..=spans.len() {
            // Rows below the first id of every span not yet read are final.
            let bound = spans.get(next).map(|s| s.first);
            while let Some(&Reverse((id, b, i))) = heap.peek() {
                if bound.is_some_and(|first| id >= first) {
                    break;
                }
                heap.pop();
                if last_offered == Some(id) {
                    continue; // read from two files (a compaction between listing and read)
                }
                last_offered = Some(id);
                if page.offer(&index, rules, query, &batches[b], i).is_break() {
                    return Ok(page.page);
                }
            }
            let Some(span) = spans.get(next) else { break };
            let added = read_span(storage, span, &mut files, &mut batches)?;
            for b in added {
                let batch = &batches[b];
                for (i, &id) in batch.sample_id.iter().enumerate() {
                    if id >= from {
                        heap.push(Reverse((id, b, i)));
                    }
                }
            }
        }
        Ok(page.page)
    }

    fn trained_once(
        &mut self,
        storage: &Storage,
        rules: &VersionedRules,
        report: &TrainedReport,
    ) -> Result<Result<Vec<DecisionRecord>, String>, LedgerError> {
        let mut wanted: Vec<u64> = report.samples.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let (Some(&low), Some(&high)) = (wanted.first(), wanted.last()) else {
            return Ok(crate::admitted::trained_decisions(
                &LedgerData::default(),
                rules,
                report,
            ));
        };
        let (logged, _) = crate::append_log::logged(storage)?;
        self.refresh(storage)?;
        let holds_wanted = |first: u64, last: u64| {
            let k = wanted.partition_point(|&w| w < first);
            k < wanted.len() && wanted[k] <= last
        };
        let spans = self.spans(&logged, holds_wanted);
        let mut batches = Vec::new();
        let mut files = FileCache::default();
        let mut logged = logged.into_iter().map(Some).collect::<Vec<_>>();
        for span in &spans {
            match &span.source {
                Source::Logged(b) => batches.extend(logged[*b].take()),
                Source::Group { .. } => {
                    let mut read = Vec::new();
                    read_span(storage, span, &mut files, &mut read)?;
                    batches.extend(read);
                }
            }
        }
        let data = LedgerData {
            samples: batches,
            decisions: self
                .decisions_in_order()
                .filter(|d| d.last_sample >= low && d.first_sample <= high)
                .cloned()
                .collect(),
            invalidations: self
                .invalidation_order
                .iter()
                .flat_map(|p| &self.invalidations[p])
                .filter(|inv| match inv.target {
                    Target::Samples { first, last } => last >= low && first <= high,
                    Target::Trajectory { .. } => true,
                })
                .cloned()
                .collect(),
            ..LedgerData::default()
        };
        Ok(crate::admitted::trained_decisions(&data, rules, report))
    }

    /// The invalidated sample ranges `keep` accepts, in file order.
    fn ranges(&self, keep: impl Fn(u64, u64) -> bool) -> Vec<(u64, u64, ReasonCode)> {
        self.invalidation_order
            .iter()
            .flat_map(|p| &self.invalidations[p])
            .filter_map(|inv| match inv.target {
                Target::Samples { first, last } if keep(first, last) => {
                    Some((first, last, inv.reason))
                }
                _ => None,
            })
            .collect()
    }

    /// Every span `keep` accepts, stored or logged, by first id.
    fn spans(&self, logged: &[SampleBatch], keep: impl Fn(u64, u64) -> bool) -> Vec<Span> {
        let mut spans: Vec<Span> = self
            .samples
            .iter()
            .flat_map(|(path, file)| {
                file.groups.iter().map(move |g| Span {
                    first: g.first,
                    last: g.last,
                    source: Source::Group {
                        path: path.clone(),
                        is_log: file.is_log,
                        index: g.index,
                    },
                })
            })
            .chain(logged.iter().enumerate().filter_map(|(b, batch)| {
                let first = batch.sample_id.iter().copied().min()?;
                let last = batch.sample_id.iter().copied().max()?;
                Some(Span {
                    first,
                    last,
                    source: Source::Logged(b),
                })
            }))
            .filter(|s| keep(s.first, s.last))
            .collect();
        spans.sort_by_key(|s| s.first);
        spans
    }

    /// The decision records it holds, in file order.
    fn decisions_in_order(&self) -> impl Iterator<Item = &DecisionRecord> {
        self.decision_order
            .iter()
            .flat_map(|p| self.decisions.get(p).into_iter().flatten())
    }

    /// Brings what it knows of the files up to the ledger's listing now.
    fn refresh(&mut self, storage: &Storage) -> Result<(), LedgerError> {
        let listed = sample_files(storage)?;
        let present: HashSet<&str> = listed.iter().map(|(p, _)| p.as_str()).collect();
        self.samples.retain(|p, _| present.contains(p.as_str()));
        for (path, is_log) in &listed {
            if !self.samples.contains_key(path) {
                let groups = row_groups(storage, path, storage.get(path)?)?;
                self.samples.insert(
                    path.clone(),
                    SampleFile {
                        is_log: *is_log,
                        groups,
                    },
                );
            }
        }
        let decisions = table_files(storage, Table::Decisions)?;
        let present: HashSet<&str> = decisions.iter().map(String::as_str).collect();
        self.decisions.retain(|p, _| present.contains(p.as_str()));
        for path in &decisions {
            if !self.decisions.contains_key(path) {
                let data = read_whole(storage, Table::Decisions, path)?;
                self.decisions.insert(path.clone(), data.decisions);
            }
        }
        self.decision_order = decisions;
        let invalidations = table_files(storage, Table::Invalidations)?;
        if invalidations != self.invalidation_order {
            let mut known = std::mem::take(&mut self.invalidations);
            for path in &invalidations {
                let records = match known.remove(path) {
                    Some(records) => records,
                    None => read_whole(storage, Table::Invalidations, path)?.invalidations,
                };
                self.invalidations.insert(path.clone(), records);
            }
            self.trajectories =
                trajectory_reasons(invalidations.iter().flat_map(|p| &self.invalidations[p]));
            self.invalidation_order = invalidations;
        }
        Ok(())
    }
}

/// Whole files read during one call, by path: a page or a report that needs several row
/// groups of one file fetches it once.
#[derive(Default)]
struct FileCache(HashMap<String, Bytes>);

impl FileCache {
    fn get(&mut self, storage: &Storage, path: &str) -> Result<Bytes, LedgerError> {
        if let Some(bytes) = self.0.get(path) {
            return Ok(bytes.clone());
        }
        let bytes = storage.get(path)?;
        self.0.insert(path.to_string(), bytes.clone());
        Ok(bytes)
    }
}

/// Reads `span`'s rows into `batches` (a logged span is there already); the indices of
/// the batches it added.
fn read_span(
    storage: &Storage,
    span: &Span,
    files: &mut FileCache,
    batches: &mut Vec<SampleBatch>,
) -> Result<Vec<usize>, LedgerError> {
    match &span.source {
        Source::Logged(b) => Ok(vec![*b]),
        Source::Group {
            path,
            is_log,
            index,
        } => {
            let mut data = LedgerData::default();
            data.read_bytes(
                storage,
                Table::Samples,
                path,
                *is_log,
                files.get(storage, path)?,
                Some(vec![*index]),
            )?;
            let start = batches.len();
            batches.extend(data.samples);
            Ok((start..batches.len()).collect())
        }
    }
}

/// Every row of the (decision or invalidation) file at `path`.
fn read_whole(storage: &Storage, table: Table, path: &str) -> Result<LedgerData, LedgerError> {
    let mut data = LedgerData::default();
    data.read_bytes(storage, table, path, false, storage.get(path)?, None)?;
    Ok(data)
}

/// The row groups of the sample file `bytes` at `path`, with their `sample_id` spans from
/// the footer's statistics (a group without them spans every id).
fn row_groups(storage: &Storage, path: &str, bytes: Bytes) -> Result<Vec<Group>, LedgerError> {
    use parquet::file::metadata::ParquetMetaDataReader;
    use parquet::file::statistics::Statistics;
    let bad = |reason: String| LedgerError::BadFile {
        path: format!("{}/{path}", storage.location()),
        reason,
    };
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&bytes)
        .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
    let column = metadata
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().string() == "sample_id")
        .ok_or_else(|| bad("no sample_id column".into()))?;
    Ok(metadata
        .row_groups()
        .iter()
        .enumerate()
        .filter(|(_, g)| g.num_rows() > 0)
        .map(|(index, g)| {
            let (first, last) = match g.column(column).statistics() {
                Some(Statistics::Int64(s)) => match (s.min_opt(), s.max_opt()) {
                    (Some(&min), Some(&max)) => (min as u64, max as u64),
                    _ => (0, u64::MAX),
                },
                _ => (0, u64::MAX),
            };
            Group { first, last, index }
        })
        .collect())
}
