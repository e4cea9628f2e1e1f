//! `strata bench` ledger figures: provenance rows ingested per second (to durable Parquet
//! files), and training throughput with the ledger on vs off in the same process.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use strata_ledger::{Ledger, LedgerConfig, SampleBatch};
use strata_runtime::{preset, Trainer};

/// The ledger section's figures.
#[derive(Serialize, Default, Debug)]
pub struct LedgerReport {
    /// Rows from first append until durable in the sample log, per second.
    pub ingest_rows_per_sec: f64,
    /// Rows per second sorted from the log into generation partitions (at close).
    pub compact_rows_per_sec: f64,
    /// Rows per second of Parquet encoding alone (writer thread).
    pub encode_rows_per_sec: f64,
    /// Bytes per stored row.
    pub bytes_per_row: f64,
    /// CartPole training with the ledger off (median of the runs).
    pub train_steps_per_sec_off: f64,
    /// ... and on.
    pub train_steps_per_sec_on: f64,
    /// `on / off`: the ledger's cost on training throughput.
    pub train_ratio_on_off: f64,
}

/// A batch of `rows` CartPole-shaped samples with ids from `first`.
fn batch(first: u64, rows: usize) -> SampleBatch {
    let od = 4;
    let mut b = SampleBatch::new(&strata_ledger::Bucket::train(), "0123456789abcdef", od);
    for i in 0..rows {
        let id = first + i as u64;
        let x = (id % 997) as f32 * 1e-3;
        b.sample_id.push(id);
        b.episode_id.push(id - id % 200);
        b.trajectory_id.push(id - id % 32);
        b.step.push((id % 200) as u32);
        b.policy_version.push(7);
        b.issued_at_ns
            .push(1_700_000_000_000_000_000 + id as i64 * 1000);
        b.completed_at_ns
            .push(1_700_000_000_000_000_500 + id as i64 * 1000);
        b.obs_count.push(1);
        b.obs_hash.push(id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for k in 0..od {
            let v = x + k as f32;
            b.obs_min.push(v);
            b.obs_max.push(v);
            b.obs_mean.push(v);
        }
        b.env_clock.push(id + 1);
        b.sampler_version.push(7);
        b.idempotency_key.push(None);
        b.reward.push(1.0);
        let end = id % 200 == 199;
        b.terminated.push(end);
        b.truncated.push(false);
        b.episode_return.push(end.then_some(200.0));
        b.success.push(end.then_some(false));
        b.worker.push(Some(0));
        b.action.push(None);
        b.behaviour_log_prob.push(None);
        b.observation.push(None);
        b.next_observation.push(None);
        b.fragment.push(Some(id / 256));
    }
    b
}

fn ingest(batches: usize, rows: usize) -> Result<(f64, f64, f64, f64)> {
    let dir = tempfile::tempdir()?;
    let prepared: Vec<SampleBatch> = (0..batches)
        .map(|k| batch((k * rows) as u64, rows))
        .collect();
    let ledger = Ledger::open(&LedgerConfig {
        flush_rows: rows,
        flush_interval: Duration::from_secs(60),
        ..LedgerConfig::new(dir.path().to_string_lossy())
    })?;
    let start = Instant::now();
    for b in prepared {
        ledger.append_samples(b)?;
    }
    ledger.flush()?;
    let seconds = start.elapsed().as_secs_f64();
    let stats = ledger.stats();
    let compacting = Instant::now();
    ledger.close()?;
    let compact_seconds = compacting.elapsed().as_secs_f64();
    let total = (batches * rows) as f64;
    Ok((
        total / seconds,
        total / compact_seconds,
        total / stats.encode_seconds.max(1e-9),
        stats.bytes_written as f64 / total,
    ))
}

fn train(steps: u64, with_ledger: bool) -> Result<f64> {
    let mut c = preset("cartpole").expect("built-in preset");
    c.train.total_steps = steps;
    c.ledger.enabled = with_ledger;
    let mut trainer = Trainer::new(c)?;
    let dir = tempfile::tempdir()?;
    if with_ledger {
        trainer.attach_ledger(Ledger::open(&LedgerConfig::new(
            dir.path().to_string_lossy(),
        ))?)?;
    }
    while !trainer.finished() {
        trainer.iterate()?;
    }
    if let Some(stats) = trainer.close_ledger()? {
        tracing::info!(?stats, "ledger writer during training");
    }
    Ok(trainer.summary().env_steps_per_sec)
}

/// The middle value (the upper of the two middle ones for an even count).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures and prints the ledger figures.
///
/// # Errors
/// Storage or training failures.
pub fn run(quick: bool) -> Result<LedgerReport> {
    let mut r = LedgerReport::default();
    let (batches, rows) = if quick { (8, 65_536) } else { (32, 65_536) };
    (
        r.ingest_rows_per_sec,
        r.compact_rows_per_sec,
        r.encode_rows_per_sec,
        r.bytes_per_row,
    ) = ingest(batches, rows)?;
    println!(
        "ledger ingest, {} rows to the durable log: {:>10.0} rows/s  (encoding alone {:.0} rows/s, {:.1} bytes/row; compaction {:.0} rows/s)",
        batches * rows,
        r.ingest_rows_per_sec,
        r.encode_rows_per_sec,
        r.bytes_per_row,
        r.compact_rows_per_sec
    );
    let (steps, reps) = if quick { (40_000, 1) } else { (100_000, 5) };
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        // Alternated so drift on a shared machine hits both alike.
        off.push(train(steps, false)?);
        on.push(train(steps, true)?);
    }
    r.train_steps_per_sec_off = median(off);
    r.train_steps_per_sec_on = median(on);
    r.train_ratio_on_off = r.train_steps_per_sec_on / r.train_steps_per_sec_off;
    println!(
        "cartpole training, ledger off / on:  {:>10.0} / {:.0} steps/s  (on/off {:.3}, median of {reps})",
        r.train_steps_per_sec_off, r.train_steps_per_sec_on, r.train_ratio_on_off
    );
    Ok(r)
}
