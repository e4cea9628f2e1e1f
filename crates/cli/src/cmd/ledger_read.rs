//! Where `strata ledger` finds the ledgers it is asked about: a ledger directory or URL, a
//! run or gateway directory holding `ledger/`, or a directory of those (the gateways and
//! learner of a run that spans machines), read as one.

use std::path::Path;

use anyhow::{bail, Result};
use strata_ledger::{LedgerData, Storage};

/// The tables a ledger directory holds; one of them makes a directory a ledger.
const TABLES: [&str; 5] = [
    "samples",
    "decisions",
    "invalidations",
    "generations",
    "rules",
];

/// The ledger location for a path or URL: a run directory's `ledger/`, or the path itself.
///
/// # Errors
/// A path that does not exist or holds no ledger.
pub(super) fn locate(ledger: &str) -> Result<String> {
    if ledger.contains("://") {
        return Ok(ledger.to_string());
    }
    let path = Path::new(ledger);
    if !path.exists() {
        bail!("{ledger}: no such directory");
    }
    match ledger_dir(path) {
        Some(dir) => Ok(dir),
        None => bail!(
            "{}: not a ledger (none of {} is there) and no ledger/ inside",
            path.display(),
            TABLES.join(", ")
        ),
    }
}

/// `path` itself or its `ledger/`, if it is a ledger.
fn ledger_dir(path: &Path) -> Option<String> {
    let inner = path.join("ledger");
    let dir = if inner.is_dir() {
        inner
    } else {
        path.to_path_buf()
    };
    TABLES
        .iter()
        .any(|t| dir.join(t).exists())
        .then(|| dir.to_string_lossy().into_owned())
}

/// Every ledger `ledgers` name: each a ledger (see [`locate`]) or a directory whose
/// subdirectories are (taken in name order).
///
/// # Errors
/// A name that is neither.
pub(super) fn locate_all(ledgers: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for name in ledgers {
        let path = Path::new(name);
        if name.contains("://") || !path.is_dir() || ledger_dir(path).is_some() {
            out.push(locate(name)?);
            continue;
        }
        let mut inside: Vec<String> = std::fs::read_dir(path)?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| ledger_dir(&e.path()))
            .collect();
        if inside.is_empty() {
            // Says what a ledger is.
            locate(name)?;
        }
        inside.sort();
        out.append(&mut inside);
    }
    Ok(out)
}

/// Each ledger `ledgers` name, with its location.
///
/// # Errors
/// A missing or unreadable ledger (the file named).
pub(super) fn read_each(ledgers: &[String]) -> Result<Vec<(String, LedgerData)>> {
    let mut parts = Vec::new();
    for location in locate_all(ledgers)? {
        let storage = Storage::open(&location)?;
        let data = LedgerData::read(&storage)?;
        parts.push((location, data));
    }
    Ok(parts)
}

/// The invalidations of each ledger `ledgers` name, with its location, reading no sample.
///
/// # Errors
/// A missing or unreadable ledger (the file named).
pub(super) fn read_invalidations_each(
    ledgers: &[String],
) -> Result<Vec<(String, Vec<strata_ledger::Invalidation>)>> {
    let mut out = Vec::new();
    for location in locate_all(ledgers)? {
        let storage = Storage::open(&location)?;
        let invalidations = LedgerData::read_invalidations(&storage)?;
        out.push((location, invalidations));
    }
    Ok(out)
}

/// The ledgers `ledgers` name, read as one ([`strata_ledger::union`]).
///
/// # Errors
/// A missing or unreadable ledger (the file named), or ledgers whose sample ids overlap.
pub(super) fn read_all(ledgers: &[String]) -> Result<LedgerData> {
    Ok(strata_ledger::union(read_each(ledgers)?)?)
}
