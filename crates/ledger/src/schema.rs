//! Arrow schemas of the ledger's tables and conversion between records and Parquet bytes.
//!
//! Every file carries `strata.table` and `strata.format` in its schema metadata, so a
//! foreign or mismatched Parquet file is recognised and named instead of misread.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{StringBuilder, UInt64Builder};
use arrow_array::{
    Array, ArrayRef, Float32Array, Float64Array, RecordBatch, StringArray,
    TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::arrow_codec::{column, opt_u64, record_batch, timestamp, ts};
use crate::bucket::Bucket;
use crate::record::{
    DecisionKind, DecisionRecord, DuplicateRecord, GenerationRecord, Invalidation, ReasonCode,
    Target,
};

/// The on-disk format version written into every file.
pub const FORMAT: &str = "1";

/// The ledger's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    /// Sample provenance, partitioned `bucket=…/versions=…`.
    Samples,
    /// Admission decisions, partitioned by bucket.
    Decisions,
    /// Append-only invalidations.
    Invalidations,
    /// Repeated idempotency keys.
    Duplicates,
    /// Policy versions bound to admission rules.
    Generations,
}

impl Table {
    /// Directory and metadata name.
    pub fn name(self) -> &'static str {
        match self {
            Table::Samples => "samples",
            Table::Decisions => "decisions",
            Table::Invalidations => "invalidations",
            Table::Duplicates => "duplicates",
            Table::Generations => "generations",
        }
    }

    /// Whether files live under `bucket=…/` directories.
    pub fn by_bucket(self) -> bool {
        matches!(self, Table::Samples | Table::Decisions)
    }

    /// Whether files live under `versions=…/` (a range of policy versions) within their
    /// bucket.
    pub fn by_generation(self) -> bool {
        self == Table::Samples
    }

    /// Every table.
    pub const ALL: [Table; 5] = [
        Table::Samples,
        Table::Decisions,
        Table::Invalidations,
        Table::Duplicates,
        Table::Generations,
    ];
}

/// A table's schema: `fields` with the `strata.table` and `strata.format` metadata.
pub(crate) fn table_schema(table: Table, fields: Vec<Field>) -> SchemaRef {
    let metadata = HashMap::from([
        ("strata.table".to_string(), table.name().to_string()),
        ("strata.format".to_string(), FORMAT.to_string()),
    ]);
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

/// Schema of the decisions table.
pub fn decisions_schema() -> SchemaRef {
    use DataType::{Float32, Float64, UInt64, Utf8};
    table_schema(
        Table::Decisions,
        vec![
            Field::new("first_sample", UInt64, false),
            Field::new("last_sample", UInt64, false),
            Field::new("policy_version", UInt64, false),
            Field::new("learner_version", UInt64, false),
            Field::new("update", UInt64, false),
            Field::new("rules_version", UInt64, false),
            Field::new("rules_hash", Utf8, false),
            Field::new("decision", Utf8, false),
            Field::new("weight", Float32, false),
            Field::new("kl", Float64, true),
            Field::new("age_versions", UInt64, false),
            Field::new("age_seconds", Float64, false),
            Field::new("decided_at", timestamp(), false),
        ],
    )
}

/// Schema of the invalidations table.
pub fn invalidations_schema() -> SchemaRef {
    use DataType::{UInt64, Utf8};
    table_schema(
        Table::Invalidations,
        vec![
            Field::new("target", Utf8, false),
            Field::new("first_sample", UInt64, true),
            Field::new("last_sample", UInt64, true),
            Field::new("trajectory_id", UInt64, true),
            Field::new("reason_code", Utf8, false),
            Field::new("reason", Utf8, false),
            Field::new("author", Utf8, false),
            Field::new("rules_version", UInt64, false),
            Field::new("at", timestamp(), false),
        ],
    )
}

/// Schema of the duplicates table.
pub fn duplicates_schema() -> SchemaRef {
    use DataType::{UInt64, Utf8};
    table_schema(
        Table::Duplicates,
        vec![
            Field::new("idempotency_key", Utf8, false),
            Field::new("original_sample", UInt64, false),
            Field::new("bucket", Utf8, false),
            Field::new("at", timestamp(), false),
        ],
    )
}

/// Schema of the generations table.
pub fn generations_schema() -> SchemaRef {
    use DataType::{UInt64, Utf8};
    table_schema(
        Table::Generations,
        vec![
            Field::new("policy_version", UInt64, false),
            Field::new("config_hash", Utf8, false),
            Field::new("rules_version", UInt64, false),
            Field::new("rules_hash", Utf8, false),
            Field::new("operation", Utf8, false),
            Field::new("author", Utf8, false),
            Field::new("at", timestamp(), false),
        ],
    )
}

/// Decisions as an Arrow batch.
pub fn decisions_to_arrow(rows: &[DecisionRecord]) -> RecordBatch {
    let u = |f: fn(&DecisionRecord) -> u64| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<UInt64Array>())
    };
    record_batch(
        decisions_schema(),
        vec![
            u(|r| r.first_sample),
            u(|r| r.last_sample),
            u(|r| r.policy_version),
            u(|r| r.learner_version),
            u(|r| r.update),
            u(|r| r.rules_version),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| &r.rules_hash),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.decision.as_str()),
            )),
            Arc::new(
                rows.iter()
                    .map(|r| Some(r.weight))
                    .collect::<Float32Array>(),
            ),
            Arc::new(rows.iter().map(|r| r.kl).collect::<Float64Array>()),
            u(|r| r.age_versions),
            Arc::new(
                rows.iter()
                    .map(|r| Some(r.age_seconds))
                    .collect::<Float64Array>(),
            ),
            ts(rows.iter().map(|r| r.decided_at_ns).collect()),
        ],
    )
}

/// Invalidations as an Arrow batch.
pub fn invalidations_to_arrow(rows: &[Invalidation]) -> RecordBatch {
    let (mut kind, mut first, mut last, mut traj) = (
        StringBuilder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
    );
    for r in rows {
        match r.target {
            Target::Samples { first: f, last: l } => {
                kind.append_value("samples");
                first.append_value(f);
                last.append_value(l);
                traj.append_null();
            }
            Target::Trajectory { id } => {
                kind.append_value("trajectory");
                first.append_null();
                last.append_null();
                traj.append_value(id);
            }
        }
    }
    record_batch(
        invalidations_schema(),
        vec![
            Arc::new(kind.finish()),
            Arc::new(first.finish()),
            Arc::new(last.finish()),
            Arc::new(traj.finish()),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.reason.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.text))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| &r.author),
            )),
            Arc::new(
                rows.iter()
                    .map(|r| Some(r.rules_version))
                    .collect::<UInt64Array>(),
            ),
            ts(rows.iter().map(|r| r.at_ns).collect()),
        ],
    )
}

/// Duplicates as an Arrow batch.
pub fn duplicates_to_arrow(rows: &[DuplicateRecord]) -> RecordBatch {
    record_batch(
        duplicates_schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| &r.idempotency_key),
            )),
            Arc::new(
                rows.iter()
                    .map(|r| Some(r.original_sample))
                    .collect::<UInt64Array>(),
            ),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| &r.bucket),
            )),
            ts(rows.iter().map(|r| r.at_ns).collect()),
        ],
    )
}

/// Generation bindings as an Arrow batch.
pub fn generations_to_arrow(rows: &[GenerationRecord]) -> RecordBatch {
    let s = |f: fn(&GenerationRecord) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(f)))
    };
    let u = |f: fn(&GenerationRecord) -> u64| -> ArrayRef {
        Arc::new(rows.iter().map(|r| Some(f(r))).collect::<UInt64Array>())
    };
    record_batch(
        generations_schema(),
        vec![
            u(|r| r.policy_version),
            s(|r| &r.config_hash),
            u(|r| r.rules_version),
            s(|r| &r.rules_hash),
            s(|r| &r.operation),
            s(|r| &r.author),
            ts(rows.iter().map(|r| r.at_ns).collect()),
        ],
    )
}

/// Encodes one batch as a Parquet file (Snappy; dictionaries only for repeated strings).
///
/// # Errors
/// Parquet encoding errors (not expected for valid batches).
pub fn encode(batch: &RecordBatch) -> Result<Bytes, parquet::errors::ParquetError> {
    let mut out = Vec::with_capacity(batch.num_rows() * 64);
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(writer_properties()))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(Bytes::from(out))
}

/// Rows in a row group of a ledger file, at most.
pub(crate) const ROW_GROUP_ROWS: usize = 8 * 1024;

/// How every ledger file is written.
pub(crate) fn writer_properties() -> WriterProperties {
    let mut props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        // Chunk-level min/max is what readers prune on; page indexes cost per file.
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Chunk)
        .set_offset_index_disabled(true)
        // A trainer's page decodes the row groups holding its ids: groups of a few
        // thousand rows keep a page's cost that of the page, in a file of any size.
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
    for name in [
        "config_hash",
        "rules_hash",
        "decision",
        "reason_code",
        "author",
    ] {
        props = props.set_column_dictionary_enabled(ColumnPath::from(name), true);
    }
    props.build()
}

/// Decodes a ledger file of `table`, checking it is one.
///
/// # Errors
/// A message saying what is wrong: not Parquet, another table, a missing column.
pub fn decode(bytes: Bytes, table: Table) -> Result<Vec<RecordBatch>, String> {
    decode_columns(bytes, table, None)
}

/// As [`decode`], reading only the named top-level `columns` (all with `None`): what a
/// scan of a large ledger for a few columns decodes.
///
/// # Errors
/// As [`decode`], or a column the file lacks.
pub fn decode_columns(
    bytes: Bytes,
    table: Table,
    columns: Option<&[&str]>,
) -> Result<Vec<RecordBatch>, String> {
    decode_selected(bytes, table, columns, None)
}

/// As [`decode_columns`], of the row groups `row_groups` alone (all with `None`): what a
/// read of one page of a large file decodes.
///
/// # Errors
/// As [`decode_columns`], or a row group the file lacks.
pub(crate) fn decode_selected(
    bytes: Bytes,
    table: Table,
    columns: Option<&[&str]>,
    row_groups: Option<Vec<usize>>,
) -> Result<Vec<RecordBatch>, String> {
    let mut builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| format!("not a readable Parquet file: {e}"))?;
    if let Some(groups) = row_groups {
        let held = builder.metadata().num_row_groups();
        if let Some(g) = groups.iter().find(|&&g| g >= held) {
            return Err(format!("no row group {g} (the file has {held})"));
        }
        builder = builder.with_row_groups(groups);
    }
    if let Some(columns) = columns {
        let schema = builder.schema();
        let roots = columns
            .iter()
            .map(|c| {
                schema
                    .index_of(c)
                    .map_err(|_| format!("no column {c} in a {} file", table.name()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mask =
            parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), roots.iter().copied());
        builder = builder.with_projection(mask);
    }
    let metadata = builder.schema().metadata();
    match metadata.get("strata.table") {
        Some(name) if name == table.name() => {}
        Some(name) => return Err(format!("a {name} file where {} belong", table.name())),
        None => {
            return Err(format!(
                "not a Strata ledger file (no strata.table metadata; expected {})",
                table.name()
            ))
        }
    }
    if metadata.get("strata.format").map(String::as_str) != Some(FORMAT) {
        return Err(format!(
            "ledger format {:?}, this build reads {FORMAT}",
            metadata.get("strata.format")
        ));
    }
    let reader = builder
        .with_batch_size(64 * 1024)
        .build()
        .map_err(|e| e.to_string())?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("corrupt data: {e}"))
}

/// Decision rows of a decisions file (bucket from the path).
///
/// # Errors
/// A missing or mistyped column, or an unknown decision name.
pub fn decisions_from_arrow(
    batch: &RecordBatch,
    bucket: &Bucket,
    out: &mut Vec<DecisionRecord>,
) -> Result<(), String> {
    let u64s = |name| column::<UInt64Array>(batch, name);
    let (first, last, policy, learner, update, rules, age) = (
        u64s("first_sample")?,
        u64s("last_sample")?,
        u64s("policy_version")?,
        u64s("learner_version")?,
        u64s("update")?,
        u64s("rules_version")?,
        u64s("age_versions")?,
    );
    let rules_hash = column::<StringArray>(batch, "rules_hash")?;
    let decision = column::<StringArray>(batch, "decision")?;
    let weight = column::<Float32Array>(batch, "weight")?;
    let kl = column::<Float64Array>(batch, "kl")?;
    let age_seconds = column::<Float64Array>(batch, "age_seconds")?;
    let at = column::<TimestampNanosecondArray>(batch, "decided_at")?;
    for i in 0..batch.num_rows() {
        out.push(DecisionRecord {
            first_sample: first.value(i),
            last_sample: last.value(i),
            bucket: bucket.clone(),
            policy_version: policy.value(i),
            learner_version: learner.value(i),
            update: update.value(i),
            rules_version: rules.value(i),
            rules_hash: rules_hash.value(i).to_string(),
            decision: DecisionKind::parse(decision.value(i))
                .ok_or_else(|| format!("unknown decision {:?}", decision.value(i)))?,
            weight: weight.value(i),
            kl: kl.is_valid(i).then(|| kl.value(i)),
            age_versions: age.value(i),
            age_seconds: age_seconds.value(i),
            decided_at_ns: at.value(i),
        });
    }
    Ok(())
}

/// Invalidation rows.
///
/// # Errors
/// A missing or mistyped column, an unknown reason code or target.
pub fn invalidations_from_arrow(
    batch: &RecordBatch,
    out: &mut Vec<Invalidation>,
) -> Result<(), String> {
    let target = column::<StringArray>(batch, "target")?;
    let first = column::<UInt64Array>(batch, "first_sample")?;
    let last = column::<UInt64Array>(batch, "last_sample")?;
    let traj = column::<UInt64Array>(batch, "trajectory_id")?;
    let code = column::<StringArray>(batch, "reason_code")?;
    let text = column::<StringArray>(batch, "reason")?;
    let author = column::<StringArray>(batch, "author")?;
    let rules = column::<UInt64Array>(batch, "rules_version")?;
    let at = column::<TimestampNanosecondArray>(batch, "at")?;
    for i in 0..batch.num_rows() {
        let t = match (
            target.value(i),
            opt_u64(first, i),
            opt_u64(last, i),
            opt_u64(traj, i),
        ) {
            ("samples", Some(first), Some(last), _) => Target::Samples { first, last },
            ("trajectory", _, _, Some(id)) => Target::Trajectory { id },
            (other, ..) => return Err(format!("row {i}: bad target {other:?}")),
        };
        out.push(Invalidation {
            target: t,
            reason: ReasonCode::parse(code.value(i))?,
            text: text.value(i).to_string(),
            author: author.value(i).to_string(),
            rules_version: rules.value(i),
            at_ns: at.value(i),
        });
    }
    Ok(())
}

/// Duplicate rows.
///
/// # Errors
/// A missing or mistyped column.
pub fn duplicates_from_arrow(
    batch: &RecordBatch,
    out: &mut Vec<DuplicateRecord>,
) -> Result<(), String> {
    let key = column::<StringArray>(batch, "idempotency_key")?;
    let original = column::<UInt64Array>(batch, "original_sample")?;
    let bucket = column::<StringArray>(batch, "bucket")?;
    let at = column::<TimestampNanosecondArray>(batch, "at")?;
    for i in 0..batch.num_rows() {
        out.push(DuplicateRecord {
            idempotency_key: key.value(i).to_string(),
            original_sample: original.value(i),
            bucket: Bucket::new(bucket.value(i)).map_err(|e| e.to_string())?,
            at_ns: at.value(i),
        });
    }
    Ok(())
}

/// Generation rows.
///
/// # Errors
/// A missing or mistyped column.
pub fn generations_from_arrow(
    batch: &RecordBatch,
    out: &mut Vec<GenerationRecord>,
) -> Result<(), String> {
    let policy = column::<UInt64Array>(batch, "policy_version")?;
    let config = column::<StringArray>(batch, "config_hash")?;
    let rules = column::<UInt64Array>(batch, "rules_version")?;
    let rules_hash = column::<StringArray>(batch, "rules_hash")?;
    let operation = column::<StringArray>(batch, "operation")?;
    let author = column::<StringArray>(batch, "author")?;
    let at = column::<TimestampNanosecondArray>(batch, "at")?;
    for i in 0..batch.num_rows() {
        out.push(GenerationRecord {
            policy_version: policy.value(i),
            config_hash: config.value(i).to_string(),
            rules_version: rules.value(i),
            rules_hash: rules_hash.value(i).to_string(),
            operation: operation.value(i).to_string(),
            author: author.value(i).to_string(),
            at_ns: at.value(i),
        });
    }
    Ok(())
}
