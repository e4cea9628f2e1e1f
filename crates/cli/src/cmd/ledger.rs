//! `strata ledger`: questions asked of a run's sample ledger, and operator invalidations.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use super::ledger_read::{locate, read_all, read_invalidations_each};
use strata_ledger::{
    metrics, now_ns, recompute, summary, write_manifest, AdmissionRules, Invalidation, Ledger,
    LedgerConfig, LedgerData, ManifestFormat, ReasonCode, SideMetrics, Storage, Target,
};

#[derive(Subcommand, Debug)]
pub enum LedgerCommand {
    /// Per generation: samples, trained, down-weighted, dropped, invalidated by reason.
    Summary(ReadArgs),
    /// Mean return and success rate with and without invalidated samples.
    Metrics(ReadArgs),
    /// What the same samples would have trained under other admission rules.
    Recompute(RecomputeArgs),
    /// Every sample's provenance and what was decided about it, as Parquet, CSV or JSON.
    Manifest(ManifestArgs),
    /// Record an invalidation (append-only; nothing is deleted).
    Invalidate(InvalidateArgs),
    /// Show admission rules: a registered version, or the ones in force.
    Rules(RulesArgs),
    /// Every invalidation: when, what it covers and which gateway issued that, why, who,
    /// and the ledger (gateway) that recorded it.
    Invalidations(ReadArgs),
    /// Sort sample log files into generation partitions (after a crash; never while a run
    /// writes to the same ledger).
    Compact(OneLedgerArgs),
}

#[derive(Args, Debug)]
pub struct RulesArgs {
    /// A ledger directory or object-store URL, or a run directory holding `ledger/`.
    ledger: String,
    /// Rules version (default: the current policy's).
    #[arg(long)]
    version: Option<u64>,
}

#[derive(Args, Debug)]
pub struct ReadArgs {
    /// One or more ledgers, read as one: each a ledger directory or object-store URL, a run
    /// or gateway directory holding `ledger/`, or a directory of those (the gateways and
    /// learner of a run that spans machines).
    #[arg(value_name = "LEDGER", required = true)]
    ledgers: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct OneLedgerArgs {
    /// A ledger directory or object-store URL, or a run directory holding `ledger/`.
    ledger: String,
}

#[derive(Args, Debug)]
pub struct RecomputeArgs {
    #[command(flatten)]
    read: ReadArgs,
    /// Admission rules as TOML or JSON (bare, or a run config's `[admission]` section).
    #[arg(long)]
    rules: PathBuf,
}

#[derive(Args, Debug)]
pub struct ManifestArgs {
    /// One or more ledgers, read as one (as for `summary`).
    #[arg(value_name = "LEDGER", required = true)]
    ledgers: Vec<String>,
    /// `parquet`, `csv` or `json` (JSON lines). A recorded transition's `observation` and
    /// `next_observation` are the stored bytes in Parquet, their numbers (little-endian
    /// f32s read back) in JSON, and those numbers joined by `;` in CSV.
    #[arg(long, default_value = "parquet")]
    format: String,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args, Debug)]
pub struct InvalidateArgs {
    /// A ledger directory or object-store URL, or a run directory holding `ledger/`.
    ledger: String,
    /// Invalidate this trajectory (every sample of it).
    #[arg(long, conflicts_with = "samples")]
    trajectory: Option<u64>,
    /// Invalidate sample ids `FIRST..=LAST` (or one id).
    #[arg(long, value_name = "FIRST[..=LAST]")]
    samples: Option<String>,
    /// Reason code (human_interrupt, observation_stale, operator, ...).
    #[arg(long, default_value = "operator")]
    reason: String,
    /// Why, in words.
    #[arg(long)]
    text: String,
    /// Who (an operator name).
    #[arg(long)]
    author: String,
}

/// The worker faults a training run survived, from its metrics file's last line (`path`
/// a run directory; none for a bare ledger, such as a gateway's).
fn run_faults(path: &Path) -> Option<u64> {
    Some(strata_runtime::RunDir::last_record(path)?.worker_faults)
}

/// Runs a `strata ledger` command.
///
/// # Errors
/// A missing or unreadable ledger (the file named), bad rules or arguments.
pub fn run(command: LedgerCommand) -> Result<()> {
    match command {
        LedgerCommand::Summary(args) => {
            let data = read_all(&args.ledgers)?;
            let rows = summary(&data);
            if args.json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!(
                "{:<10} {:>10} {:>9} {:>9} {:>13} {:>9} {:>9} {:>9}  invalidated",
                "bucket",
                "generation",
                "samples",
                "trained",
                "down_weighted",
                "dropped",
                "undecided",
                "newer"
            );
            let mut totals = [0u64; 6];
            for g in &rows {
                let invalid: Vec<String> = g
                    .invalidated
                    .iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect();
                println!(
                    "{:<10} {:>10} {:>9} {:>9} {:>13} {:>9} {:>9} {:>9}  {}",
                    g.bucket,
                    g.generation,
                    g.samples,
                    g.trained,
                    g.down_weighted,
                    g.dropped,
                    g.undecided,
                    g.newer_policy_sampling,
                    if invalid.is_empty() {
                        "-".into()
                    } else {
                        invalid.join(",")
                    }
                );
                for (t, v) in totals.iter_mut().zip([
                    g.samples,
                    g.trained,
                    g.down_weighted,
                    g.dropped,
                    g.undecided,
                    g.newer_policy_sampling,
                ]) {
                    *t += v;
                }
            }
            let invalid: u64 = rows.iter().flat_map(|g| g.invalidated.values()).sum();
            println!(
                "{:<10} {:>10} {:>9} {:>9} {:>13} {:>9} {:>9} {:>9}  {invalid}",
                "total",
                rows.len(),
                totals[0],
                totals[1],
                totals[2],
                totals[3],
                totals[4],
                totals[5]
            );
            println!(
                "duplicates (repeated idempotency keys, not stored): {}",
                data.duplicates.len()
            );
            let one = match args.ledgers.as_slice() {
                [one] => Some(Path::new(one)),
                _ => None,
            };
            if let Some(faults) = one.and_then(run_faults) {
                println!(
                    "worker faults (fragments lost to a failed worker or env process, not stored): {faults}"
                );
            }
            Ok(())
        }
        LedgerCommand::Metrics(args) => {
            let data = read_all(&args.ledgers)?;
            let m = metrics(&data);
            if args.json {
                println!("{}", serde_json::to_string_pretty(&m)?);
                return Ok(());
            }
            let line = |name: &str, s: &SideMetrics| {
                println!(
                    "{name:<26} {:>9} {:>12} {:>13}",
                    s.episodes,
                    s.mean_return.map_or("-".into(), |v| format!("{v:.3}")),
                    s.success_rate.map_or("-".into(), |v| format!("{v:.4}"))
                );
            };
            println!(
                "{:<26} {:>9} {:>12} {:>13}",
                "", "episodes", "mean return", "success rate"
            );
            line("all samples", &m.all);
            line("without invalidated", &m.valid);
            line("invalidated episodes", &m.invalidated);
            println!(
                "difference (all - without): mean return {}, success rate {}",
                m.mean_return_difference
                    .map_or("-".into(), |v| format!("{v:+.3}")),
                m.success_rate_difference
                    .map_or("-".into(), |v| format!("{v:+.4}"))
            );
            Ok(())
        }
        LedgerCommand::Recompute(args) => {
            let text = std::fs::read_to_string(&args.rules)
                .with_context(|| format!("reading {}", args.rules.display()))?;
            let rules = AdmissionRules::parse(&text)
                .with_context(|| format!("rules in {}", args.rules.display()))?;
            let data = read_all(&args.read.ledgers)?;
            let rows = recompute(&data, &rules)?;
            if args.read.json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!("rules {} (hash {})", rules.rule.as_str(), rules.hash());
            println!(
                "{:<10} {:>10} {:>9}  {:>26}  {:>26} {:>9}",
                "bucket",
                "generation",
                "samples",
                "recorded t/d/x (weight)",
                "recomputed t/d/x (weight)",
                "changed"
            );
            let (mut rec, mut new, mut changed, mut samples) = (0.0, 0.0, 0, 0);
            for r in &rows {
                println!(
                    "{:<10} {:>10} {:>9}  {:>26}  {:>26} {:>9}",
                    r.bucket,
                    r.generation,
                    r.samples,
                    format!(
                        "{}/{}/{} ({:.1})",
                        r.recorded[0], r.recorded[1], r.recorded[2], r.recorded_weight
                    ),
                    format!(
                        "{}/{}/{} ({:.1})",
                        r.recomputed[0], r.recomputed[1], r.recomputed[2], r.recomputed_weight
                    ),
                    r.changed
                );
                rec += r.recorded_weight;
                new += r.recomputed_weight;
                changed += r.changed;
                samples += r.samples;
            }
            println!(
                "total: {samples} samples, {changed} decisions change, trained weight {rec:.1} -> {new:.1}"
            );
            Ok(())
        }
        LedgerCommand::Manifest(args) => {
            let format = ManifestFormat::parse(&args.format).map_err(anyhow::Error::msg)?;
            let data = read_all(&args.ledgers)?;
            let rows = write_manifest(&data, format, &args.out)?;
            println!("{rows} samples written to {}", args.out.display());
            Ok(())
        }
        LedgerCommand::Invalidate(args) => invalidate(args),
        LedgerCommand::Invalidations(args) => {
            super::ledger_invalidations::list(&read_invalidations_each(&args.ledgers)?, args.json)
        }
        LedgerCommand::Compact(args) => {
            let storage = Storage::open(&locate(&args.ledger)?)?;
            // Compaction moves a writer's files: never while one holds the ledger.
            let _held = storage.lock()?;
            let rows = strata_ledger::recover(&storage)?;
            println!("{rows} samples moved from the log into generation partitions");
            Ok(())
        }
        LedgerCommand::Rules(args) => {
            // Read-only: a running trainer or gateway may hold the ledger.
            let storage = Storage::open(&locate(&args.ledger)?)?;
            let stored = strata_ledger::stored_rules(&storage)?;
            let rules_of = |v: u64| {
                stored
                    .get(&v)
                    .cloned()
                    .ok_or(strata_ledger::LedgerError::UnknownRulesVersion(v))
            };
            let (policy, rules) = match args.version {
                Some(v) => (None, rules_of(v)?),
                None => {
                    let current = LedgerData::read_generations(&storage)?
                        .last()
                        .map(|g| (g.policy_version, g.rules_version))
                        .context("no policy version is bound to admission rules yet")?;
                    (Some(current.0), rules_of(current.1)?)
                }
            };
            if let Some(p) = policy {
                println!("# in force with policy version {p}");
            }
            println!("# rules version {} (hash {})", rules.version, rules.hash);
            print!("{}", rules.rules.to_toml());
            Ok(())
        }
    }
}

fn invalidate(args: InvalidateArgs) -> Result<()> {
    let target = match (args.trajectory, &args.samples) {
        (Some(id), None) => Target::Trajectory { id },
        (None, Some(range)) => {
            let parse = |s: &str| {
                s.trim()
                    .parse::<u64>()
                    .with_context(|| format!("--samples: {s:?} is not a sample id"))
            };
            let (first, last) = match range.split_once("..=") {
                Some((a, b)) => (parse(a)?, parse(b)?),
                None => (parse(range)?, parse(range)?),
            };
            if first > last {
                bail!("--samples {range}: the first id is after the last");
            }
            Target::Samples { first, last }
        }
        _ => bail!("give --trajectory ID or --samples FIRST..=LAST"),
    };
    let reason = ReasonCode::parse(&args.reason).map_err(anyhow::Error::msg)?;
    if strata_ledger::is_blank(&args.text) || args.author.trim().is_empty() {
        bail!("--text and --author must say why and who");
    }
    let location = locate(&args.ledger)?;
    let storage = Storage::open(&location)?;
    // One writer: a run or gateway writing this ledger refuses us here, before anything is
    // read or written. Held until the invalidation is durable.
    let lock = storage.lock()?;
    // What the invalidation would mark, checked before anything is written: an
    // invalidation is append-only and can never be taken back.
    let data = LedgerData::read(&storage)?;
    let marked = samples_marked(&data, target);
    let Some(marked) = marked else {
        bail!("{}", unknown_target(&data, target));
    };
    drop(data);
    let config = LedgerConfig::new(location.clone());
    let ledger = match lock {
        Some(held) => Ledger::open_held(&config, held)?,
        None => Ledger::open(&config)?,
    };
    let rules_version = ledger.current().map_or(0, |(_, r)| r.version);
    ledger.invalidate(Invalidation {
        target,
        reason,
        text: args.text,
        author: args.author,
        rules_version,
        at_ns: now_ns(),
    })?;
    ledger.close()?;
    let what = match target {
        Target::Trajectory { id } => format!("trajectory {id}"),
        Target::Samples { first, last } => format!("samples {first}..={last}"),
    };
    println!(
        "invalidated {what}: {marked} sample{} marked ({}), recorded in {location}",
        if marked == 1 { "" } else { "s" },
        reason.as_str()
    );
    Ok(())
}

/// How many stored samples `target` covers, or `None` when it names nothing the ledger
/// ever issued (a trajectory with no sample, a range past the last id).
fn samples_marked(data: &LedgerData, target: Target) -> Option<u64> {
    let ids = || {
        data.samples
            .iter()
            .flat_map(|b| b.sample_id.iter().copied())
    };
    match target {
        Target::Trajectory { id } => {
            let n = data
                .samples
                .iter()
                .flat_map(|b| b.trajectory_id.iter())
                .filter(|t| **t == id)
                .count() as u64;
            (n > 0).then_some(n)
        }
        Target::Samples { first, last } => {
            let issued = ids().max().is_some_and(|max| last <= max);
            issued.then(|| ids().filter(|i| (first..=last).contains(i)).count() as u64)
        }
    }
}

/// Why `target` names nothing in the ledger, with what it does hold.
fn unknown_target(data: &LedgerData, target: Target) -> String {
    match target {
        Target::Trajectory { id } => {
            let range = data
                .samples
                .iter()
                .flat_map(|b| b.trajectory_id.iter().copied())
                .fold(None, |acc: Option<(u64, u64)>, t| {
                    Some(acc.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))))
                });
            match range {
                None => format!("no trajectory {id}: the ledger holds no samples yet; nothing recorded"),
                Some((lo, hi)) => format!(
                    "no trajectory {id} in the ledger (its trajectories are numbered {lo} to {hi}); nothing recorded"
                ),
            }
        }
        Target::Samples { last, .. } => {
            match data.samples.iter().flat_map(|b| b.sample_id.iter().copied()).max() {
                None => format!("no sample {last}: the ledger holds no samples yet; nothing recorded"),
                Some(max) => format!(
                    "sample {last} is not in the ledger (its sample ids go up to {max}); nothing recorded"
                ),
            }
        }
    }
}
