//! `strata bench ledger-reads`: what a read costs as a ledger grows. Ledgers of 10^5,
//! 10^6 and 10^7 rows (generated: external trainers' transitions, most decided in runs of
//! 256 as a learner's updates decide them, about a tenth undecided, 2% of trajectories and a
//! few sample ranges invalidated), then a trainer's admitted page of 1,000 and the check of
//! its report of that page (p50 and p99 over pages at random cursors, the reader warm), and the
//! whole-ledger analyses (summary, metrics) timed once each.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use strata_ledger::{
    AdmissionRules, AdmittedQuery, Bucket, DecisionKind, DecisionRecord, Invalidation, Ledger,
    LedgerConfig, LedgerData, PageReader, ReasonCode, SampleBatch, Storage, Target, TrainedReport,
    VersionedRules,
};

/// One ledger size's figures.
#[derive(Serialize, Debug, Default)]
pub struct ReadFigures {
    /// Sample rows in the ledger.
    pub rows: u64,
    /// Sample files it is stored in.
    pub files: usize,
    /// Seconds to generate it (write, flush, compact).
    pub generate_secs: f64,
    /// The first page of a fresh reader, which reads every file's footer (ms).
    pub first_page_ms: f64,
    /// An admitted page of 1,000 rows: median and 99th percentile (ms).
    pub page_p50_ms: f64,
    /// See `page_p50_ms`.
    pub page_p99_ms: f64,
    /// The check of a trained report of 1,000 samples (ms).
    pub report_p50_ms: f64,
    /// See `report_p50_ms`.
    pub report_p99_ms: f64,
    /// Reading the whole ledger (s).
    pub read_all_secs: f64,
    /// `summary` over it (s).
    pub summary_secs: f64,
    /// `metrics` over it (s).
    pub metrics_secs: f64,
}

const OBS_DIM: usize = 4;
/// The smallest ledger the suite measures.
const MIN_ROWS: u64 = 10_000;
/// Samples one decision record covers (one learner update of the generated ledger).
const DECIDED_RUN: u64 = 256;

/// Rows `ids`: trajectories of 16 steps, the version rising every 50,000 ids; each
/// with a stored transition, as an agent that records what its own model did leaves.
fn rows(ids: std::ops::Range<u64>) -> SampleBatch {
    let mut b = SampleBatch::new(&Bucket::train(), "0123456789abcdef", OBS_DIM);
    let bytes = vec![0u8; 4 * OBS_DIM];
    for id in ids {
        let step = (id % 16) as u32;
        b.sample_id.push(id);
        b.episode_id.push(id / 64);
        b.trajectory_id.push(id / 16);
        b.step.push(step);
        b.policy_version.push(id / 50_000);
        b.issued_at_ns
            .push(1_700_000_000_000_000_000 + id as i64 * 1000);
        b.completed_at_ns
            .push(1_700_000_000_000_000_500 + id as i64 * 1000);
        b.obs_count.push(1);
        b.obs_hash.push(id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for k in 0..OBS_DIM {
            let v = (id % 97) as f32 + k as f32;
            b.obs_min.push(v);
            b.obs_max.push(v);
            b.obs_mean.push(v);
        }
        b.env_clock.push(u64::from(step) * 2 + 1);
        b.sampler_version.push(id / 50_000);
        b.idempotency_key.push(None);
        b.reward.push(1.0);
        let end = step == 15;
        b.terminated.push(end);
        b.truncated.push(false);
        b.episode_return.push(end.then_some(16.0));
        b.success.push(None);
        b.worker.push(None);
        b.action.push(Some("1".into()));
        b.behaviour_log_prob.push(Some(-0.69));
        b.observation.push(Some(bytes.clone()));
        b.next_observation.push(Some(bytes.clone()));
        b.fragment.push(None);
    }
    b
}

/// Writes a ledger of `n` rows into `dir`; its rules.
fn generate(dir: &Path, n: u64) -> Result<VersionedRules> {
    let ledger = Ledger::open(&LedgerConfig {
        flush_rows: 1 << 16,
        flush_interval: Duration::from_secs(3600),
        ..LedgerConfig::new(dir.to_str().expect("a UTF-8 path"))
    })?;
    let rules = ledger.register_rules(&AdmissionRules::default())?;
    let chunk = 1u64 << 16;
    let mut first = 0;
    while first < n {
        let last = (first + chunk).min(n);
        ledger.append_samples(rows(first..last))?;
        // Decided in runs of 256, but one run in ten (undecided: shed, or not yet
        // trained), and the newest 5,000 rows undecided (a trainer's next pages).
        let decided_to = last.min(n.saturating_sub(5_000));
        let mut decisions = Vec::new();
        let mut run = first;
        while run + DECIDED_RUN <= decided_to {
            if (run / DECIDED_RUN) % 10 != 7 {
                decisions.push(DecisionRecord {
                    first_sample: run,
                    last_sample: run + DECIDED_RUN - 1,
                    bucket: Bucket::train(),
                    policy_version: run / 50_000,
                    learner_version: run / 50_000,
                    update: run / DECIDED_RUN,
                    rules_version: rules.version,
                    rules_hash: rules.hash.clone(),
                    decision: DecisionKind::Trained,
                    weight: 1.0,
                    kl: None,
                    age_versions: 0,
                    age_seconds: 0.5,
                    decided_at_ns: 1_700_000_000_000_000_000 + run as i64 * 1000,
                });
            }
            run += DECIDED_RUN;
        }
        ledger.append_decisions(decisions)?;
        // 2% of trajectories invalidated (one in fifty), a sample range now and then.
        let trajectories = (first / 16..last / 16).filter(|t| t % 50 == 13);
        let mut pending = Vec::new();
        for t in trajectories {
            pending.push(ledger.invalidate_pending(Invalidation {
                target: Target::Trajectory { id: t },
                reason: ReasonCode::VersionSwitch,
                text: "generated".into(),
                author: "bench".into(),
                rules_version: rules.version,
                at_ns: 1,
            })?);
        }
        pending.push(ledger.invalidate_pending(Invalidation {
            target: Target::Samples {
                first: first + 100,
                last: first + 131,
            },
            reason: ReasonCode::Operator,
            text: "generated".into(),
            author: "bench".into(),
            rules_version: rules.version,
            at_ns: 1,
        })?);
        for p in pending {
            p.wait()?;
        }
        first = last;
    }
    ledger.close()?;
    Ok(rules)
}

/// The median and 99th percentile of `times`, in ms.
fn percentiles(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let at = |q: f64| {
        let i = ((times.len() as f64 - 1.0) * q).round() as usize;
        times[i].as_secs_f64() * 1e3
    };
    (at(0.5), at(0.99))
}

/// A reproducible stream of cursors.
struct Cursors(u64);

impl Cursors {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below.max(1)
    }
}

fn measure(n: u64, calls: usize) -> Result<ReadFigures> {
    let dir = tempfile::tempdir()?;
    let t0 = Instant::now();
    let rules = generate(dir.path(), n)?;
    let mut f = ReadFigures {
        rows: n,
        generate_secs: t0.elapsed().as_secs_f64(),
        ..ReadFigures::default()
    };
    let storage = Storage::open(dir.path().to_str().expect("a UTF-8 path"))?;
    let mut reader = PageReader::new();
    let query = |from: u64| AdmittedQuery {
        from,
        before: None,
        limit: 1_000,
        learner_version: n / 50_000,
        bucket: None,
        now_ns: 1_800_000_000_000_000_000,
    };
    let t = Instant::now();
    let first = reader.admitted(&storage, &rules, &query(n - 5_000))?;
    f.first_page_ms = t.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(
        first.rows.len() == 1_000,
        "the newest undecided rows fill a page: {} rows",
        first.rows.len()
    );
    let mut cursors = Cursors(0x9E37_79B9_7F4A_7C15);
    let mut pages = Vec::with_capacity(calls);
    let mut reports = Vec::with_capacity(calls);
    let kl = std::collections::BTreeMap::new();
    for _ in 0..calls {
        let from = cursors.next(n);
        let t = Instant::now();
        let page = reader.admitted(&storage, &rules, &query(from))?;
        pages.push(t.elapsed());
        // The trainer reports what it read: the page's samples.
        let ids: Vec<u64> = page.rows.iter().map(|r| r.sample.sample_id).collect();
        let t = Instant::now();
        let checked = reader.trained_decisions(
            &storage,
            &rules,
            &TrainedReport {
                version: n / 50_000 + 1,
                base_version: n / 50_000,
                samples: &ids,
                kl: &kl,
                now_ns: 1_800_000_000_000_000_000,
            },
        )?;
        reports.push(t.elapsed());
        if let Err(refused) = checked {
            anyhow::bail!("the report of an admitted page was refused: {refused}");
        }
    }
    (f.page_p50_ms, f.page_p99_ms) = percentiles(pages);
    (f.report_p50_ms, f.report_p99_ms) = percentiles(reports);
    let t = Instant::now();
    let data = LedgerData::read(&storage)?;
    f.read_all_secs = t.elapsed().as_secs_f64();
    f.files = data.files;
    let t = Instant::now();
    std::hint::black_box(strata_ledger::summary(&data));
    f.summary_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    std::hint::black_box(strata_ledger::metrics(&data));
    f.metrics_secs = t.elapsed().as_secs_f64();
    Ok(f)
}

/// Figures for ledgers of each of `sizes` rows.
///
/// # Errors
/// A ledger that cannot be written or read.
pub fn run(sizes: &[u64], calls: usize) -> Result<Vec<ReadFigures>> {
    // The first page is read among the newest 5,000 rows, whose undecided ones fill it.
    if let Some(small) = sizes.iter().find(|&&n| n < MIN_ROWS) {
        anyhow::bail!("--ledger-rows: each size must be at least {MIN_ROWS} rows, got {small}");
    }
    let mut out = Vec::new();
    for &n in sizes {
        let f = measure(n, calls)?;
        print_row(&f);
        out.push(f);
    }
    Ok(out)
}

/// The table's header.
pub fn print_header() {
    println!("ledger reads (a page of 1,000; a trained report of 1,000; whole-ledger analyses):");
    println!(
        "  {:>10} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "rows",
        "files",
        "1st page",
        "page p50",
        "page p99",
        "rep p50",
        "rep p99",
        "read all",
        "summary",
        "metrics"
    );
}

fn print_row(f: &ReadFigures) {
    println!(
        "  {:>10} {:>6} {:>7.1}ms {:>7.1}ms {:>7.1}ms {:>7.1}ms {:>7.1}ms {:>8.2}s {:>7.2}s {:>7.2}s",
        f.rows,
        f.files,
        f.first_page_ms,
        f.page_p50_ms,
        f.page_p99_ms,
        f.report_p50_ms,
        f.report_p99_ms,
        f.read_all_secs,
        f.summary_secs,
        f.metrics_secs
    );
}
