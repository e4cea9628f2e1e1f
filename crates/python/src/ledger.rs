//! `strata.ledger`: a ledger's tables as Arrow IPC streams, for pyarrow.

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use strata_ledger::{LedgerData, Storage};

use crate::error;

/// The tables [`ledger_table`] serves.
const TABLES: &[&str] = &[
    "samples",
    "decisions",
    "invalidations",
    "duplicates",
    "generations",
];

/// Reads every table of the ledgers at `locations` (directories or object-store URLs) as
/// one: the gateways and learner of a run that spans machines.
fn read(py: Python<'_>, locations: &[String]) -> PyResult<LedgerData> {
    if locations.is_empty() {
        return Err(PyValueError::new_err("no ledger location given"));
    }
    py.detach(|| {
        let mut parts = Vec::with_capacity(locations.len());
        for location in locations {
            let storage = Storage::open(location)?;
            parts.push((location.clone(), LedgerData::read(&storage)?));
        }
        strata_ledger::union(parts)
    })
    .map_err(error)
}

/// Keeps the manifest rows with no invalidation.
fn valid_only(batch: &RecordBatch) -> PyResult<RecordBatch> {
    let column = batch
        .column_by_name("invalidation")
        .expect("the manifest has an invalidation column");
    let invalidation = column
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("invalidation is a string column");
    let keep: BooleanArray = (0..invalidation.len())
        .map(|i| Some(invalidation.is_null(i)))
        .collect();
    arrow_select::filter::filter_record_batch(batch, &keep).map_err(error)
}

/// Table `table` of the ledgers at `locations` (read as one) as an Arrow IPC stream: `samples` (every
/// sample's provenance with its decision and invalidation; without the invalidated ones
/// when `include_invalidated` is false), `decisions`, `invalidations`, `duplicates` or
/// `generations`.
#[pyfunction]
#[pyo3(signature = (locations, table, include_invalidated=true))]
pub(crate) fn ledger_table<'py>(
    py: Python<'py>,
    locations: Vec<String>,
    table: &str,
    include_invalidated: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    if !TABLES.contains(&table) {
        return Err(PyValueError::new_err(format!(
            "unknown ledger table {table:?} (tables: {})",
            TABLES.join(", ")
        )));
    }
    let data = read(py, &locations)?;
    let mut batches = match table {
        "samples" => strata_ledger::manifest_batches(&data),
        "decisions" => vec![strata_ledger::decisions_to_arrow(&data.decisions)],
        "invalidations" => vec![strata_ledger::invalidations_to_arrow(&data.invalidations)],
        "duplicates" => vec![strata_ledger::duplicates_to_arrow(&data.duplicates)],
        _ => vec![strata_ledger::generations_to_arrow(&data.generations)],
    };
    if table == "samples" && !include_invalidated {
        batches = batches.iter().map(valid_only).collect::<PyResult<_>>()?;
    }
    let schema = match batches.first() {
        Some(b) => b.schema(),
        // A ledger with no samples yet: an empty table of the samples' columns.
        None => strata_ledger::manifest_batches(&LedgerData {
            samples: vec![strata_ledger::SampleBatch::new(
                &strata_ledger::Bucket::train(),
                "",
                0,
            )],
            ..LedgerData::default()
        })[0]
            .schema(),
    };
    let mut out = Vec::new();
    {
        let mut writer =
            arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).map_err(error)?;
        for b in &batches {
            writer.write(b).map_err(error)?;
        }
        writer.finish().map_err(error)?;
    }
    Ok(PyBytes::new(py, &out))
}

/// The ledgers' (read as one) per-generation summary and their metrics with and without invalidated
/// samples (what `strata ledger summary` and `metrics` print), as JSON.
#[pyfunction]
pub(crate) fn ledger_report(py: Python<'_>, locations: Vec<String>) -> PyResult<String> {
    let data = read(py, &locations)?;
    let report = serde_json::json!({
        "summary": strata_ledger::summary(&data),
        "metrics": strata_ledger::metrics(&data),
    });
    Ok(report.to_string())
}
