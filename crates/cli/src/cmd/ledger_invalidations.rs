//! `strata ledger invalidations`: every invalidation in one or more ledgers, with who made
//! it, why, where it was recorded, and which gateway issued what it covers (a run that
//! spans machines: gateway `N`'s ids are `N << 40` on).

use anyhow::Result;
use serde::Serialize;
use strata_gateway::ids::gateway_of;
use strata_ledger::{Invalidation, Target};

/// One invalidation, as listed.
#[derive(Debug, Serialize)]
struct Listed {
    at_ns: i64,
    /// The ledger that recorded it (the gateway or run it was made through).
    recorded_in: String,
    reason: String,
    author: String,
    text: String,
    target: Target,
    /// The gateway whose ids the target lies in (0: a gateway alone or a training run).
    issued_by_gateway: u64,
}

/// Prints every invalidation of `parts`, oldest first, as a table or JSON.
///
/// # Errors
/// Output that cannot be written.
pub(super) fn list(parts: &[(String, Vec<Invalidation>)], json: bool) -> Result<()> {
    let mut rows: Vec<Listed> = parts
        .iter()
        .flat_map(|(location, invalidations)| {
            invalidations.iter().map(move |i| Listed {
                at_ns: i.at_ns,
                recorded_in: location.clone(),
                reason: i.reason.as_str().to_string(),
                author: i.author.clone(),
                text: i.text.clone(),
                target: i.target,
                issued_by_gateway: match i.target {
                    Target::Trajectory { id } => gateway_of(id),
                    Target::Samples { first, .. } => gateway_of(first),
                },
            })
        })
        .collect();
    rows.sort_by_key(|r| r.at_ns);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "{:<16} {:<28} {:>7} {:<20} {:<16} recorded in: why",
        "when (UTC)", "target", "gateway", "reason", "author"
    );
    for r in &rows {
        let target = match r.target {
            Target::Trajectory { id } => format!("trajectory {id}"),
            Target::Samples { first, last } => format!("samples {first}..={last}"),
        };
        println!(
            "{:<16} {:<28} {:>7} {:<20} {:<16} {}: {}",
            when(r.at_ns),
            target,
            r.issued_by_gateway,
            r.reason,
            r.author,
            r.recorded_in,
            r.text
        );
    }
    println!("{} invalidations", rows.len());
    Ok(())
}

/// `at_ns` as `YYYYMMDD-HHMMSS` (UTC).
fn when(at_ns: i64) -> String {
    let since_epoch = std::time::Duration::from_nanos(at_ns.max(0) as u64);
    strata_runtime::utc_stamp(std::time::UNIX_EPOCH + since_epoch)
}
