//! Arrow schemas of the ledger's tables and conversion between records and Parquet bytes.
//!
//! Every file carries `strata.table` and `strata.format` in its schema metadata, so a
//! foreign or mismatched Parquet file is recognised and named instead of misread.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{StringBuilder, UInt64Builder};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float32Array, Float64Array, ListArray, RecordBatch, StringArray,
    TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::record::{
    DecisionKind, DecisionRecord, DuplicateRecord, GenerationRecord, Invalidation, ReasonCode,
    SampleBatch, Target,
};

/// The on-disk format version written into every file.
pub const FORMAT: &str = "1";

/// The ledger's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    /// Sample provenance, partitioned `bucket=…/generation=…`.
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

    /// Whether files live under `generation=…/` within their bucket.
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

fn timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

fn f32_list() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Float32, false)))
}

fn schema(table: Table, fields: Vec<Field>) -> SchemaRef {
    let metadata = HashMap::from([
        ("strata.table".to_string(), table.name().to_string()),
        ("strata.format".to_string(), FORMAT.to_string()),
    ]);
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

/// Schema of the samples table (bucket and generation are in the path).
pub fn samples_schema() -> SchemaRef {
    use DataType::{Boolean, Float32, Float64, UInt32, UInt64, Utf8};
    schema(
        Table::Samples,
        vec![
            Field::new("sample_id", UInt64, false),
            Field::new("episode_id", UInt64, false),
            Field::new("trajectory_id", UInt64, false),
            Field::new("step", UInt32, false),
            Field::new("policy_version", UInt64, false),
            Field::new("config_hash", Utf8, false),
            Field::new("issued_at", timestamp(), false),
            Field::new("completed_at", timestamp(), false),
            Field::new("obs_count", UInt32, false),
            Field::new("obs_hash", UInt64, false),
            Field::new("obs_min", f32_list(), false),
            Field::new("obs_max", f32_list(), false),
            Field::new("obs_mean", f32_list(), false),
            Field::new("env_clock", UInt64, false),
            Field::new("sampler_version", UInt64, false),
            Field::new("newer_policy_sampling", Boolean, false),
            Field::new("idempotency_key", Utf8, true),
            Field::new("reward", Float32, false),
            Field::new("terminated", Boolean, false),
            Field::new("truncated", Boolean, false),
            Field::new("episode_return", Float64, true),
            Field::new("success", Boolean, true),
        ],
    )
}

/// Schema of the decisions table.
pub fn decisions_schema() -> SchemaRef {
    use DataType::{Float32, Float64, UInt64, Utf8};
    schema(
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
    schema(
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
    schema(
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
    schema(
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

fn ts(values: Vec<i64>) -> ArrayRef {
    Arc::new(TimestampNanosecondArray::from(values).with_timezone("UTC"))
}

fn list(values: &[f32], width: usize, rows: usize) -> ArrayRef {
    let field = Arc::new(Field::new_list_field(DataType::Float32, false));
    Arc::new(ListArray::new(
        field,
        OffsetBuffer::from_lengths(std::iter::repeat_n(width, rows)),
        Arc::new(Float32Array::from(values.to_vec())),
        None,
    ))
}

fn record_batch(schema: SchemaRef, columns: Vec<ArrayRef>) -> RecordBatch {
    RecordBatch::try_new(schema, columns).expect("columns match the schema")
}

/// Samples as an Arrow batch.
pub fn samples_to_arrow(b: &SampleBatch) -> RecordBatch {
    let n = b.len();
    let newer: BooleanArray = b
        .sampler_version
        .iter()
        .zip(&b.policy_version)
        .map(|(s, p)| Some(s > p))
        .collect();
    let config_hash = StringArray::from_iter_values(std::iter::repeat_n(&b.config_hash, n));
    record_batch(
        samples_schema(),
        vec![
            Arc::new(UInt64Array::from(b.sample_id.clone())),
            Arc::new(UInt64Array::from(b.episode_id.clone())),
            Arc::new(UInt64Array::from(b.trajectory_id.clone())),
            Arc::new(UInt32Array::from(b.step.clone())),
            Arc::new(UInt64Array::from(b.policy_version.clone())),
            Arc::new(config_hash),
            ts(b.issued_at_ns.clone()),
            ts(b.completed_at_ns.clone()),
            Arc::new(UInt32Array::from(b.obs_count.clone())),
            Arc::new(UInt64Array::from(b.obs_hash.clone())),
            list(&b.obs_min, b.obs_dim, n),
            list(&b.obs_max, b.obs_dim, n),
            list(&b.obs_mean, b.obs_dim, n),
            Arc::new(UInt64Array::from(b.env_clock.clone())),
            Arc::new(UInt64Array::from(b.sampler_version.clone())),
            Arc::new(newer),
            Arc::new(StringArray::from(b.idempotency_key.clone())),
            Arc::new(Float32Array::from(b.reward.clone())),
            Arc::new(BooleanArray::from(b.terminated.clone())),
            Arc::new(BooleanArray::from(b.truncated.clone())),
            Arc::new(Float64Array::from(b.episode_return.clone())),
            Arc::new(BooleanArray::from(b.success.clone())),
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
    let mut props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        // Chunk-level min/max is what readers prune on; page indexes cost per file.
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Chunk)
        .set_offset_index_disabled(true)
        .set_max_row_group_row_count(Some(1 << 20));
    for name in [
        "config_hash",
        "rules_hash",
        "decision",
        "reason_code",
        "author",
    ] {
        props = props.set_column_dictionary_enabled(ColumnPath::from(name), true);
    }
    let mut out = Vec::with_capacity(batch.num_rows() * 64);
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props.build()))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(Bytes::from(out))
}

/// Decodes a ledger file of `table`, checking it is one.
///
/// # Errors
/// A message saying what is wrong: not Parquet, another table, a missing column.
pub fn decode(bytes: Bytes, table: Table) -> Result<Vec<RecordBatch>, String> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| format!("not a readable Parquet file: {e}"))?;
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

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T, String> {
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| format!("column {name} is missing"))?;
    array
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| format!("column {name} has type {}", array.data_type()))
}

fn opt_u64(a: &UInt64Array, i: usize) -> Option<u64> {
    a.is_valid(i).then(|| a.value(i))
}

fn list_values<'a>(batch: &'a RecordBatch, name: &str) -> Result<(&'a [f32], usize), String> {
    let l = column::<ListArray>(batch, name)?;
    let values = l
        .values()
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| format!("column {name} does not hold float32 lists"))?;
    let width = if l.is_empty() {
        0
    } else {
        l.value_length(0) as usize
    };
    if (0..l.len()).any(|i| l.value_length(i) as usize != width) {
        return Err(format!("column {name}: rows of different widths"));
    }
    let start = l.value_offsets()[0] as usize;
    Ok((&values.values()[start..start + width * l.len()], width))
}

/// Appends the rows of a samples file to `out` (bucket and config hash from the rows).
///
/// # Errors
/// A missing or mistyped column, or rows of mixed config hashes within `out`.
pub fn samples_from_arrow(batch: &RecordBatch, out: &mut Vec<SampleBatch>) -> Result<(), String> {
    let u64s = |name| column::<UInt64Array>(batch, name);
    let (sample_id, episode_id, trajectory_id) = (
        u64s("sample_id")?,
        u64s("episode_id")?,
        u64s("trajectory_id")?,
    );
    let (policy_version, obs_hash, env_clock, sampler_version) = (
        u64s("policy_version")?,
        u64s("obs_hash")?,
        u64s("env_clock")?,
        u64s("sampler_version")?,
    );
    let step = column::<UInt32Array>(batch, "step")?;
    let obs_count = column::<UInt32Array>(batch, "obs_count")?;
    let config_hash = column::<StringArray>(batch, "config_hash")?;
    let issued = column::<TimestampNanosecondArray>(batch, "issued_at")?;
    let completed = column::<TimestampNanosecondArray>(batch, "completed_at")?;
    let (obs_min, w) = list_values(batch, "obs_min")?;
    let (obs_max, _) = list_values(batch, "obs_max")?;
    let (obs_mean, _) = list_values(batch, "obs_mean")?;
    let key = column::<StringArray>(batch, "idempotency_key")?;
    let reward = column::<Float32Array>(batch, "reward")?;
    let terminated = column::<BooleanArray>(batch, "terminated")?;
    let truncated = column::<BooleanArray>(batch, "truncated")?;
    let episode_return = column::<Float64Array>(batch, "episode_return")?;
    let success = column::<BooleanArray>(batch, "success")?;
    for i in 0..batch.num_rows() {
        let hash = config_hash.value(i);
        let fits = out
            .last()
            .is_some_and(|b| b.config_hash == hash && b.obs_dim == w);
        if !fits {
            out.push(SampleBatch::new("unknown", hash, w));
        }
        let b = out.last_mut().expect("pushed");
        b.sample_id.push(sample_id.value(i));
        b.episode_id.push(episode_id.value(i));
        b.trajectory_id.push(trajectory_id.value(i));
        b.step.push(step.value(i));
        b.policy_version.push(policy_version.value(i));
        b.issued_at_ns.push(issued.value(i));
        b.completed_at_ns.push(completed.value(i));
        b.obs_count.push(obs_count.value(i));
        b.obs_hash.push(obs_hash.value(i));
        b.obs_min.extend_from_slice(&obs_min[i * w..(i + 1) * w]);
        b.obs_max.extend_from_slice(&obs_max[i * w..(i + 1) * w]);
        b.obs_mean.extend_from_slice(&obs_mean[i * w..(i + 1) * w]);
        b.env_clock.push(env_clock.value(i));
        b.sampler_version.push(sampler_version.value(i));
        b.idempotency_key
            .push(key.is_valid(i).then(|| key.value(i).to_string()));
        b.reward.push(reward.value(i));
        b.terminated.push(terminated.value(i));
        b.truncated.push(truncated.value(i));
        b.episode_return
            .push(episode_return.is_valid(i).then(|| episode_return.value(i)));
        b.success
            .push(success.is_valid(i).then(|| success.value(i)));
    }
    Ok(())
}

/// Decision rows of a decisions file (bucket from the path).
///
/// # Errors
/// A missing or mistyped column, or an unknown decision name.
pub fn decisions_from_arrow(
    batch: &RecordBatch,
    bucket: &str,
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
            bucket: bucket.to_string(),
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
            bucket: bucket.value(i).to_string(),
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
