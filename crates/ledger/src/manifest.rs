//! The sample manifest: every sample's provenance with what was decided about it, as
//! Parquet, CSV or JSON lines, for standard tools.

use std::io::Write;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use serde::Serialize;

use crate::analysis::Index;
use crate::reader::LedgerData;
use crate::samples::{SampleBatch, SampleRecord};
use crate::LedgerError;

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestFormat {
    /// One Parquet file.
    Parquet,
    /// Comma-separated values with a header; lists joined by `;`.
    Csv,
    /// One JSON object per line.
    Json,
}

impl ManifestFormat {
    /// Parses `parquet`, `csv` or `json`.
    ///
    /// # Errors
    /// Names the accepted formats.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "parquet" => Ok(Self::Parquet),
            "csv" => Ok(Self::Csv),
            "json" | "jsonl" => Ok(Self::Json),
            other => Err(format!(
                "unknown manifest format {other:?}; use parquet, csv or json"
            )),
        }
    }
}

/// One manifest row.
#[derive(Clone, Debug, Serialize)]
struct ManifestRow {
    #[serde(flatten)]
    sample: SampleRecord,
    newer_policy_sampling: bool,
    decision: Option<&'static str>,
    weight: Option<f32>,
    rules_version: Option<u64>,
    learner_version: Option<u64>,
    update: Option<u64>,
    invalidation: Option<&'static str>,
}

struct Extra {
    decision: Vec<Option<&'static str>>,
    weight: Vec<Option<f32>>,
    rules_version: Vec<Option<u64>>,
    learner_version: Vec<Option<u64>>,
    update: Vec<Option<u64>>,
    invalidation: Vec<Option<&'static str>>,
}

fn extra(index: &Index<'_>, b: &SampleBatch) -> Extra {
    let mut e = Extra {
        decision: Vec::with_capacity(b.len()),
        weight: Vec::with_capacity(b.len()),
        rules_version: Vec::with_capacity(b.len()),
        learner_version: Vec::with_capacity(b.len()),
        update: Vec::with_capacity(b.len()),
        invalidation: Vec::with_capacity(b.len()),
    };
    for i in 0..b.len() {
        let d = index.decision(b.sample_id[i]);
        e.decision.push(d.map(|d| d.decision.as_str()));
        e.weight.push(d.map(|d| d.weight));
        e.rules_version.push(d.map(|d| d.rules_version));
        e.learner_version.push(d.map(|d| d.learner_version));
        e.update.push(d.map(|d| d.update));
        e.invalidation.push(
            index
                .invalidation(b.sample_id[i], b.trajectory_id[i])
                .map(|r| r.as_str()),
        );
    }
    e
}

/// Little-endian f32 bytes as a JSON array of their numbers (each written so that it
/// reads back as the same f32).
fn f32s(bytes: &[u8]) -> serde_json::Value {
    serde_json::Value::Array(
        bytes
            .chunks_exact(4)
            .map(|c| {
                let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                // The shortest decimal that reads back as this f32 (`0.1`, not the f64
                // widening's `0.10000000149011612`); not finite: null.
                v.is_finite()
                    .then(|| v.to_string().parse::<serde_json::Number>().ok())
                    .flatten()
                    .map_or(serde_json::Value::Null, serde_json::Value::Number)
            })
            .collect(),
    )
}

fn csv_field(out: &mut String, value: &str) {
    if value.contains([',', '"', '\n']) {
        out.push('"');
        out.push_str(&value.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(value);
    }
}

fn csv_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => {
            items.iter().map(csv_value).collect::<Vec<_>>().join(";")
        }
        other => other.to_string(),
    }
}

/// The manifest of `data` as Arrow: one batch per sample batch, each sample's stored
/// columns followed by its `bucket`, `decision`, `weight`, `rules_version`,
/// `learner_version` (the version that consumed it), `update` (the update that did; for a
/// trainer elsewhere, the version it produced) and `invalidation` (null where none).
pub fn manifest_batches(data: &LedgerData) -> Vec<RecordBatch> {
    let index = Index::new(data);
    data.samples
        .iter()
        .map(|b| {
            let base = crate::samples::to_arrow(b);
            let e = extra(&index, b);
            let mut fields: Vec<Field> = base
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            let mut columns: Vec<ArrayRef> = base.columns().to_vec();
            fields.push(Field::new("bucket", DataType::Utf8, false));
            columns.push(Arc::new(StringArray::from_iter_values(
                std::iter::repeat_n(&b.bucket, b.len()),
            )));
            fields.push(Field::new("decision", DataType::Utf8, true));
            columns.push(Arc::new(StringArray::from(e.decision)));
            fields.push(Field::new("weight", DataType::Float32, true));
            columns.push(Arc::new(Float32Array::from(e.weight)));
            fields.push(Field::new("rules_version", DataType::UInt64, true));
            columns.push(Arc::new(UInt64Array::from(e.rules_version)));
            fields.push(Field::new("learner_version", DataType::UInt64, true));
            columns.push(Arc::new(UInt64Array::from(e.learner_version)));
            fields.push(Field::new("update", DataType::UInt64, true));
            columns.push(Arc::new(UInt64Array::from(e.update)));
            fields.push(Field::new("invalidation", DataType::Utf8, true));
            columns.push(Arc::new(StringArray::from(e.invalidation)));
            let schema = Arc::new(Schema::new(fields));
            RecordBatch::try_new(schema, columns).expect("manifest columns match")
        })
        .collect()
}

/// Writes the manifest of `data` to `out` (a local file, replaced atomically). Returns the
/// number of rows.
///
/// # Errors
/// [`LedgerError::Storage`] when the file cannot be written.
pub fn write_manifest(
    data: &LedgerData,
    format: ManifestFormat,
    out: &std::path::Path,
) -> Result<u64, LedgerError> {
    let index = Index::new(data);
    let io = |e: std::io::Error| LedgerError::storage(out.display().to_string(), e);
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    // Made with the mode any new file gets (0666 less the umask), not a temporary file's
    // owner-only 0600: the manifest is for whoever reads the run.
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(dir).map_err(io)?;
    let mut rows = 0u64;
    match format {
        ManifestFormat::Parquet => {
            let batches = manifest_batches(data);
            rows = batches.iter().map(|b| b.num_rows() as u64).sum();
            if let Some(first) = batches.first() {
                let mut writer =
                    parquet::arrow::ArrowWriter::try_new(tmp.as_file_mut(), first.schema(), None)
                        .map_err(|e| LedgerError::storage(out.display().to_string(), e))?;
                for b in &batches {
                    writer
                        .write(b)
                        .map_err(|e| LedgerError::storage(out.display().to_string(), e))?;
                }
                writer
                    .close()
                    .map_err(|e| LedgerError::storage(out.display().to_string(), e))?;
            }
        }
        ManifestFormat::Csv | ManifestFormat::Json => {
            let mut w = std::io::BufWriter::new(tmp.as_file_mut());
            let mut header_written = false;
            for b in &data.samples {
                let e = extra(&index, b);
                for i in 0..b.len() {
                    let mut sample = b.row(i);
                    // The text formats give a transition's observations as the numbers
                    // they are (the stored bytes are little-endian f32s); the Parquet
                    // manifest keeps the bytes.
                    let observations = [
                        ("observation", sample.observation.take()),
                        ("next_observation", sample.next_observation.take()),
                    ];
                    let row = ManifestRow {
                        newer_policy_sampling: sample.newer_policy_sampling(),
                        sample,
                        decision: e.decision[i],
                        weight: e.weight[i],
                        rules_version: e.rules_version[i],
                        learner_version: e.learner_version[i],
                        update: e.update[i],
                        invalidation: e.invalidation[i],
                    };
                    let mut value = serde_json::to_value(&row).expect("rows serialise");
                    for (name, bytes) in observations {
                        value[name] = bytes.map_or(serde_json::Value::Null, |b| f32s(&b));
                    }
                    if format == ManifestFormat::Json {
                        serde_json::to_writer(&mut w, &value).map_err(|e| io(e.into()))?;
                        w.write_all(b"\n").map_err(io)?;
                    } else {
                        let obj = value.as_object().expect("an object");
                        let mut line = String::new();
                        if !header_written {
                            let names: Vec<&str> = obj.keys().map(String::as_str).collect();
                            line.push_str(&names.join(","));
                            line.push('\n');
                            header_written = true;
                        }
                        for (k, (_, v)) in obj.iter().enumerate() {
                            if k > 0 {
                                line.push(',');
                            }
                            csv_field(&mut line, &csv_value(v));
                        }
                        line.push('\n');
                        w.write_all(line.as_bytes()).map_err(io)?;
                    }
                    rows += 1;
                }
            }
            w.flush().map_err(io)?;
        }
    }
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(out).map_err(|e| io(e.error))?;
    Ok(rows)
}
