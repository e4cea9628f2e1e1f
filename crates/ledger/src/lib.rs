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
mod compactor;
mod config;
mod curves;
mod error;
mod handle;
mod integrity;
mod layout;
mod manifest;
mod merge;
mod open;
mod pages;
mod pending;
mod reader;
mod record;
mod registry;
mod rules;
mod samples;
mod sched;
mod schema;
mod storage;
mod union;
mod writer;
mod writer_shared;

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
pub use union::union;
pub use writer::WriterStats;

pub use handle::{Ledger, Queued};
pub use integrity::KEY_WINDOW;
pub use layout::VERSIONS_PER_PARTITION;
pub use registry::stored_rules;
