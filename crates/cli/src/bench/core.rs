//! `strata bench core`: what a recurrent core costs. The CartPole preset (8 envs x
//! 32 steps, 20 epochs of one 256-step minibatch) trained for the same steps with no core,
//! an LSTM of 64, an LSTM of 256 and a GRU of 64 (one per network, sequences of the whole
//! fragment), in one run: env steps per second and each against the feed-forward policy.

use anyhow::Result;
use serde::Serialize;
use strata_nn::Core;
use strata_runtime::{preset, Trainer};

/// The section's figures.
#[derive(Serialize, Default, Debug)]
pub struct CoreReport {
    /// One row per core.
    pub rows: Vec<CoreRow>,
}

/// One core's run.
#[derive(Serialize, Debug)]
pub struct CoreRow {
    /// `none`, `lstm` or `gru`.
    pub core: String,
    /// Hidden units (0 without a core).
    pub size: usize,
    pub env_steps_per_sec: f64,
    /// Steps per second against the feed-forward policy's.
    pub vs_feed_forward: f64,
}

/// Runs the section: `quick` trains 10k steps a core, else 40k.
pub fn run(quick: bool) -> Result<CoreReport> {
    let steps = if quick { 10_240 } else { 40_960 };
    let mut report = CoreReport::default();
    let mut base = None;
    for (core, size) in [
        (Core::None, 0),
        (Core::Lstm, 64),
        (Core::Lstm, 256),
        (Core::Gru, 64),
    ] {
        let mut c = preset("cartpole").expect("the cartpole preset");
        c.train.total_steps = steps;
        c.report.eval_episodes = 0;
        c.network.core = core;
        if size > 0 {
            c.network.core_size = size;
        }
        let mut trainer = Trainer::new(c)?;
        while !trainer.finished() {
            trainer.iterate()?;
        }
        let rate = trainer.summary().env_steps_per_sec;
        let base_rate = *base.get_or_insert(rate);
        let row = CoreRow {
            core: core.name().into(),
            size,
            env_steps_per_sec: rate,
            vs_feed_forward: rate / base_rate,
        };
        println!(
            "cartpole preset, core {:<4} {:>3}: {:>9.0} steps/s  ({:.2}x the feed-forward policy)",
            row.core, row.size, row.env_steps_per_sec, row.vs_feed_forward
        );
        report.rows.push(row);
    }
    Ok(report)
}
