//! The live view of a running training, for the Prometheus endpoint and the terminal
//! monitor: what the learner last published (after every update) merged, when asked,
//! with what is true this instant (heartbeats, worker versions, buffer slots).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::buffer::ExperienceBuffer;
use crate::telemetry::{Activity, Heartbeat};
use strata_learner::MemoryPolicyStore;

/// One component (a worker or the learner) as of now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ComponentView {
    /// `worker-0`, `learner`, `inference`.
    pub name: String,
    /// What it is doing, in words.
    pub state: String,
    /// Seconds since its last heartbeat.
    pub heartbeat_age_seconds: f64,
    /// The policy version it samples with (workers; the learner's latest for the learner).
    pub policy_version: Option<u64>,
    /// Times it was restarted.
    pub restarts: u32,
}

/// The experience buffer's slots.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BufferView {
    /// Slots in all (workers x (max policy lag + 1)).
    pub slots: usize,
    /// Holding a complete fragment the learner has not consumed yet.
    pub ready: usize,
    /// Being written by a worker now.
    pub writing: usize,
}

/// The sample ledger's writer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LedgerView {
    /// Rows handed to the writer.
    pub rows_received: u64,
    /// Rows in files.
    pub rows_written: u64,
    /// Rows waiting for the next flush (the writer's queue).
    pub rows_buffered: u64,
    /// Files written.
    pub files_written: u64,
    /// Bytes written.
    pub bytes_written: u64,
}

/// A training as of one instant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveSnapshot {
    /// Env name.
    pub env: String,
    /// `sync` or `async`.
    pub mode: String,
    /// Config hash.
    pub config_hash: String,
    /// Seconds since the trainer started.
    pub uptime_seconds: f64,
    /// Env steps trained on.
    pub global_step: u64,
    /// The step budget.
    pub total_steps: u64,
    /// Updates done.
    pub updates: u64,
    /// Latest published policy version.
    pub policy_version: u64,
    /// Env steps per second over the last few seconds of updates.
    pub env_steps_per_sec: f64,
    /// Mean return of recent episodes.
    pub mean_return: Option<f64>,
    /// Latest evaluation: (version, mean return).
    pub last_eval: Option<(u64, f64)>,
    /// Policy lag of the last batch: min, mean, max.
    pub lag: (u64, f64, u64),
    /// Largest lag admitted.
    pub max_policy_lag: u64,
    /// Fragments lost so far.
    pub invalid_fragments: usize,
    /// Samples admission dropped so far.
    pub dropped_samples: u64,
    /// The experience buffer.
    pub buffer: BufferView,
    /// Fragments the learner holds ahead of their turn.
    pub early_fragments: usize,
    /// Workers, in order.
    pub workers: Vec<ComponentView>,
    /// The learner (and the central inference thread, when there is one).
    pub others: Vec<ComponentView>,
    /// The ledger, when the run keeps one.
    pub ledger: Option<LedgerView>,
    /// Whether the run has ended.
    pub finished: bool,
}

/// What only the learner knows, published after each update.
#[derive(Clone, Debug, Default)]
pub(crate) struct LearnerView {
    pub(crate) snapshot: LiveSnapshot,
    pub(crate) restarts: Vec<u32>,
    /// (seconds since start, step) of recent updates, for the recent rate.
    pub(crate) recent: VecDeque<(f64, u64)>,
}

/// A cheap, cloneable handle on a training's live view, usable from any thread.
#[derive(Clone)]
pub struct LiveHandle {
    pub(crate) epoch: Instant,
    pub(crate) learner: Arc<Mutex<LearnerView>>,
    pub(crate) beats: Arc<Mutex<Vec<Arc<Heartbeat>>>>,
    pub(crate) store: Arc<MemoryPolicyStore>,
    pub(crate) buffer: Arc<ExperienceBuffer>,
    pub(crate) workers: usize,
}

/// Seconds of updates the recent rate averages over.
const RATE_WINDOW_SECONDS: f64 = 5.0;

impl LiveHandle {
    /// The training as of now.
    pub fn snapshot(&self) -> LiveSnapshot {
        let (mut snap, restarts) = {
            let view = self.learner.lock();
            (view.snapshot.clone(), view.restarts.clone())
        };
        snap.uptime_seconds = self.epoch.elapsed().as_secs_f64();
        let versions = self.store.worker_versions();
        let beats = self.beats.lock().clone();
        let mut writing = 0;
        snap.workers.clear();
        snap.others.clear();
        for (i, beat) in beats.iter().enumerate() {
            let (silence, activity) = beat.silence();
            let mut view = ComponentView {
                name: beat.name.clone(),
                state: activity.describe().to_string(),
                heartbeat_age_seconds: silence.as_secs_f64(),
                policy_version: None,
                restarts: 0,
            };
            if i < self.workers {
                writing += usize::from(activity == Activity::Collecting);
                view.policy_version = versions.get(i).copied();
                view.restarts = restarts.get(i).copied().unwrap_or(0);
                snap.workers.push(view);
            } else {
                if beat.name == "learner" {
                    view.policy_version = Some(snap.policy_version);
                }
                snap.others.push(view);
            }
        }
        snap.buffer = BufferView {
            slots: self.buffer.slot_count(),
            ready: self.buffer.ready_count(),
            writing,
        };
        snap
    }
}

impl LearnerView {
    /// Records an update at `seconds` since start with `step` trained, and returns the
    /// rate over the last few seconds of updates.
    pub(crate) fn rate(&mut self, seconds: f64, step: u64) -> f64 {
        self.recent.push_back((seconds, step));
        while self.recent.len() > 2
            && seconds - self.recent.front().map_or(seconds, |r| r.0) > RATE_WINDOW_SECONDS
        {
            self.recent.pop_front();
        }
        match (self.recent.front(), self.recent.back()) {
            (Some(a), Some(b)) if b.0 > a.0 => (b.1 - a.1) as f64 / (b.0 - a.0),
            _ => 0.0,
        }
    }
}
