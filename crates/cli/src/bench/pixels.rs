//! `strata bench pixels`: the most a pixel preset could do on this machine, and where its
//! runs stand. For the Atari and MinAtar presets, a few updates in sync mode, where
//! collection and learning take turns with the machine to themselves, give one update's
//! learning alone (forward, backward and Adam over the update's minibatches) and one
//! rollout's collection alone (the learner waiting for its fragments: the envs, inference,
//! the workers' bookkeeping). They imply two ceilings: taking turns, `steps / (collect +
//! learn)`, and perfectly overlapped, `steps / max(collect, learn)`. Then the preset as it
//! runs and in async mode at lag 1 (collection beside learning), each against both.
//! Needs Python with Gymnasium, ale-py and MinAtar (`STRATA_PYTHON`).

use anyhow::{Context, Result};
use serde::Serialize;
use strata_ledger::{Ledger, LedgerConfig};
use strata_runtime::{preset, Mode, RunConfig, Trainer, UpdateRecord};

/// The section's figures.
#[derive(Serialize, Default, Debug)]
pub struct PixelsReport {
    /// One row per preset.
    pub rows: Vec<PixelsRow>,
}

/// One preset's pieces, ceilings and runs.
#[derive(Serialize, Debug)]
pub struct PixelsRow {
    /// The env (`gym:ALE/Breakout-v5`).
    pub env: String,
    /// Env steps per update (`env.num_envs x ppo.n_steps`).
    pub steps_per_update: u64,
    /// Mean seconds of one update's learning alone over the measured updates.
    pub learn_seconds: f64,
    /// Mean seconds of one rollout's collection alone over the measured updates.
    pub collect_seconds: f64,
    /// Mean seconds of the rest of a sync update (GAE, admission, publishing, the
    /// rollout's copies and ledger rows).
    pub rest_seconds: f64,
    /// Steps per second collection and learning allow taking turns.
    pub ceiling_in_turns: f64,
    /// Steps per second they allow perfectly overlapped.
    pub ceiling_overlapped: f64,
    /// The preset's own mode (`sync` or `async`).
    pub preset_mode: String,
    /// The preset as it runs, steps per second over the measured updates.
    pub preset_steps_per_sec: f64,
    /// The preset in async mode at lag 1, steps per second.
    pub async_steps_per_sec: f64,
}

/// The presets measured with the updates each run measures (an update of either takes
/// about two seconds: 1,024 Atari steps, 32,768 MinAtar ones); `quick`: the smallest
/// alone.
fn envs(quick: bool) -> &'static [(&'static str, usize)] {
    if quick {
        &[("gym:MinAtar/Breakout-v1", 2)]
    } else {
        &[
            ("gym:ALE/Breakout-v5", 5),
            ("gym:MinAtar/Breakout-v1", 5),
            ("gym:MinAtar/SpaceInvaders-v1", 5),
        ]
    }
}

/// Runs the section: each run has one warm-up update (env processes starting, buffers
/// growing) before the updates it measures.
pub fn run(quick: bool) -> Result<PixelsReport> {
    let mut report = PixelsReport::default();
    println!(
        "pixel presets: one update's learning alone and one rollout's collection alone (sync, \
         means over the updates), the ceilings they imply, and the runs against them"
    );
    for &(env, updates) in envs(quick) {
        let mut config = preset(env).with_context(|| format!("no preset for {env}"))?;
        config.report.eval_episodes = 0;
        let preset_mode = config.runtime.mode;

        let mut sync = config.clone();
        sync.runtime.mode = Mode::Sync;
        let turns = run_updates(sync, updates)?;
        // Means, as the rates are totals over the same updates: a sync run's rate then
        // cannot pass the ceiling in turns (its wall is learning + collection + the rest),
        // where the upper median of two updates' pieces set the ceiling below the rate
        // whenever one update was slower.
        let mean = |piece: fn(&Update) -> f64| {
            turns.iter().map(piece).sum::<f64>() / turns.len().max(1) as f64
        };
        let (learn, collect, rest) = (mean(|u| u.learn), mean(|u| u.collect), mean(|u| u.rest));
        let steps = (config.env.num_envs * config.ppo.n_steps) as u64;
        let preset_rate = match preset_mode {
            Mode::Sync => rate(&turns, steps),
            Mode::Async => rate(&run_updates(config.clone(), updates)?, steps),
        };
        let mut overlapped = config;
        overlapped.runtime.mode = Mode::Async;
        overlapped.admission.max_policy_lag = 1;
        let async_rate = rate(&run_updates(overlapped, updates)?, steps);
        let row = PixelsRow {
            env: env.to_string(),
            steps_per_update: steps,
            learn_seconds: learn,
            collect_seconds: collect,
            rest_seconds: rest,
            ceiling_in_turns: steps as f64 / (collect + learn),
            ceiling_overlapped: steps as f64 / collect.max(learn),
            preset_mode: mode_name(preset_mode).into(),
            preset_steps_per_sec: preset_rate,
            async_steps_per_sec: async_rate,
        };
        print_row(&row);
        report.rows.push(row);
    }
    Ok(report)
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Sync => "sync",
        Mode::Async => "async",
    }
}

fn print_row(r: &PixelsRow) {
    println!(
        "  {}: {} steps an update; learning alone {:.2} s, collection alone {:.2} s, the rest \
         {:.2} s; ceiling {:.0} steps/s in turns, {:.0} overlapped",
        r.env,
        r.steps_per_update,
        r.learn_seconds,
        r.collect_seconds,
        r.rest_seconds,
        r.ceiling_in_turns,
        r.ceiling_overlapped
    );
    println!(
        "    preset ({}): {:.0} steps/s ({:.0}% of in turns, {:.0}% of overlapped); async lag 1: \
         {:.0} steps/s ({:.0}% of overlapped)",
        r.preset_mode,
        r.preset_steps_per_sec,
        100.0 * r.preset_steps_per_sec / r.ceiling_in_turns,
        100.0 * r.preset_steps_per_sec / r.ceiling_overlapped,
        r.async_steps_per_sec,
        100.0 * r.async_steps_per_sec / r.ceiling_overlapped
    );
}

/// One measured update's pieces, in seconds.
struct Update {
    learn: f64,
    collect: f64,
    rest: f64,
    wall: f64,
}

/// Trains `config` for one warm-up update and then `updates` more; the measured updates'
/// pieces (differences of the cumulative records).
fn run_updates(mut config: RunConfig, updates: usize) -> Result<Vec<Update>> {
    let steps = (config.env.num_envs * config.ppo.n_steps) as u64;
    config.train.total_steps = steps * (updates as u64 + 1);
    let ledgered = config.ledger.enabled;
    let mut trainer = Trainer::new(config)?;
    // A ledger as `strata train` keeps one, in a directory of its own.
    let dir = tempfile::tempdir()?;
    if ledgered {
        trainer.attach_ledger(Ledger::open(&LedgerConfig::new(
            dir.path().to_string_lossy(),
        ))?)?;
    }
    let mut previous: Option<UpdateRecord> = None;
    let mut out = Vec::with_capacity(updates);
    while !trainer.finished() {
        let record = trainer.iterate()?;
        if let Some(p) = &previous {
            let (t, s) = (&record.time, &p.time);
            let learn =
                (t.forward + t.backward + t.optimizer) - (s.forward + s.backward + s.optimizer);
            let collect = t.buffer_wait - s.buffer_wait;
            let wall = record.wall_seconds - p.wall_seconds;
            out.push(Update {
                learn,
                collect,
                rest: wall - learn - collect,
                wall,
            });
        }
        previous = Some(record);
    }
    Ok(out)
}

/// Steps per second over the measured updates.
fn rate(updates: &[Update], steps: u64) -> f64 {
    let wall: f64 = updates.iter().map(|u| u.wall).sum();
    (updates.len() as u64 * steps) as f64 / wall.max(1e-9)
}
