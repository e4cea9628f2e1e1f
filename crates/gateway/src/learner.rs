//! The gateway's learner: trains PPO on deployed agents' reported steps and publishes each
//! result as a new version.
//!
//! Reported steps arrive as [`Segment`]s: up to `ppo.n_steps` steps of one trajectory
//! (one version), cut at the episode's end (terminal, or bootstrapped from V(last obs)).
//! Once `num_envs * n_steps` rows are waiting, the learner makes them proximal (decoupled
//! PPO: agents sample with older versions), applies the admission rules per segment,
//! records the decisions in the ledger, runs the PPO update and publishes the parameters.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use strata_algo::RolloutBuffer;
use strata_runtime::learner_core::id_runs;
use strata_runtime::{Correction, LearnerCore, RowSpan, SampleGroup};

use crate::api::Channel;
use crate::gateway::Gateway;
use crate::settings::ReleaseMode;

/// Consecutive reported steps of one trajectory.
#[derive(Clone, Debug)]
pub struct Segment {
    /// The trajectory.
    pub trajectory: u64,
    /// The version that produced it.
    pub version: u64,
    /// Its ledger bucket.
    pub bucket: String,
    obs_dim: usize,
    action_dim: usize,
    /// Sample ids, in order.
    pub sample_ids: Vec<u64>,
    obs: Vec<f32>,
    actions: Vec<f32>,
    log_probs: Vec<f32>,
    values: Vec<f32>,
    rewards: Vec<f32>,
    /// Completion time of the last step.
    pub completed_at_ns: i64,
    /// Ended in a terminal state (else the value is bootstrapped).
    pub terminated: bool,
    /// V(observation after the last step), when not terminal.
    pub bootstrap: f32,
}

impl Segment {
    /// An empty segment.
    pub fn new(
        trajectory: u64,
        version: u64,
        bucket: &str,
        obs_dim: usize,
        action_dim: usize,
    ) -> Self {
        Segment {
            trajectory,
            version,
            bucket: bucket.to_string(),
            obs_dim,
            action_dim,
            sample_ids: Vec::new(),
            obs: Vec::new(),
            actions: Vec::new(),
            log_probs: Vec::new(),
            values: Vec::new(),
            rewards: Vec::new(),
            completed_at_ns: 0,
            terminated: false,
            bootstrap: 0.0,
        }
    }

    /// Steps held.
    pub fn len(&self) -> usize {
        self.sample_ids.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.sample_ids.is_empty()
    }

    /// Adds a step.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        sample_id: u64,
        obs: &[f32],
        action: &[f32],
        log_prob: f32,
        value: f32,
        reward: f32,
        completed_at_ns: i64,
    ) {
        self.sample_ids.push(sample_id);
        self.obs.extend_from_slice(obs);
        self.actions.extend_from_slice(action);
        self.log_probs.push(log_prob);
        self.values.push(value);
        self.rewards.push(reward);
        self.completed_at_ns = completed_at_ns;
    }
}

/// One line of `learner.jsonl`.
#[derive(Debug, Serialize)]
struct UpdateLine {
    update: u64,
    version: u64,
    rows: usize,
    segments: usize,
    trained: u64,
    down_weighted: u64,
    dropped: u64,
    invalidated_skipped: usize,
    mean_age_versions: f64,
    mean_kl: f64,
    policy_loss: f32,
    value_loss: f32,
    approx_kl: f32,
    seconds: f64,
}

/// Starts the learner thread; it stops when `stop` is set or the queue closes.
///
/// # Errors
/// The thread could not be spawned, or the starting parameters could not be loaded.
pub fn spawn(
    gateway: Arc<Gateway>,
    rx: Receiver<Segment>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    let start = gateway.status().latest;
    let params = gateway
        .policies
        .get(start)
        .map_err(|e| std::io::Error::other(e.message))?
        .params
        .clone();
    std::thread::Builder::new()
        .name("strata-gateway-learner".into())
        .spawn(move || {
            let mut learner = match Learner::new(gateway, &params) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(component = "learner", error = %e, "learner could not start");
                    return;
                }
            };
            learner.run(&rx, &stop);
        })
}

struct Learner {
    gateway: Arc<Gateway>,
    core: LearnerCore,
    waiting: Vec<Segment>,
    rows_waiting: usize,
    base_version: u64,
    updates: u64,
    log: Option<std::fs::File>,
}

impl Learner {
    fn new(gateway: Arc<Gateway>, params: &[f32]) -> Result<Self, String> {
        let run = &gateway.settings.run;
        let mut core = LearnerCore::new(run, 0).map_err(|e| e.to_string())?;
        core.model_mut()
            .set_flat_params(params)
            .map_err(|e| e.to_string())?;
        let log_path = gateway.settings.dir.join("learner.jsonl");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| tracing::warn!(component = "learner", path = %log_path.display(), error = %e, "no learner log"))
            .ok();
        let base_version = gateway.status().latest;
        Ok(Learner {
            gateway,
            core,
            waiting: Vec::new(),
            rows_waiting: 0,
            base_version,
            updates: 0,
            log,
        })
    }

    fn run(&mut self, rx: &Receiver<Segment>, stop: &AtomicBool) {
        let run = &self.gateway.settings.run;
        let batch = run.ppo.n_steps * run.env.num_envs;
        while !stop.load(Ordering::Relaxed) {
            self.apply_rollback();
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(seg) => {
                    self.rows_waiting += seg.len();
                    self.waiting.push(seg);
                }
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.rows_waiting >= batch {
                if let Err(e) = self.update() {
                    tracing::error!(component = "learner", error = %e, "update failed; the learner stops");
                    break;
                }
            }
        }
    }

    fn apply_rollback(&mut self) {
        let Some(version) = self.gateway.reset_learner.lock().expect("reset").take() else {
            return;
        };
        match self.gateway.policies.get(version) {
            Ok(p) => match self.core.model_mut().set_flat_params(&p.params) {
                Ok(()) => {
                    self.base_version = version;
                    tracing::info!(
                        component = "learner",
                        version,
                        "continuing from rolled-back version"
                    );
                }
                Err(e) => {
                    tracing::error!(component = "learner", error = %e, "rollback parameters do not fit")
                }
            },
            Err(e) => {
                tracing::error!(component = "learner", error = %e.message, "rollback version unreadable")
            }
        }
    }

    fn update(&mut self) -> Result<(), String> {
        let t0 = Instant::now();
        let segments = std::mem::take(&mut self.waiting);
        self.rows_waiting = 0;
        let (segments, skipped): (Vec<Segment>, Vec<Segment>) = {
            let invalid = self.gateway.invalidated.lock().expect("invalidated");
            segments
                .into_iter()
                .partition(|s| !invalid.contains(s.trajectory))
        };
        let rows: usize = segments.iter().map(Segment::len).sum();
        if rows == 0 {
            return Ok(());
        }
        let (od, ad) = (self.core.model().obs_dim(), segments[0].action_dim);
        debug_assert_eq!(od, segments[0].obs_dim);
        let mut buf = RolloutBuffer::new(1, rows, od, ad);
        let mut groups = Vec::with_capacity(segments.len());
        let mut at = 0;
        for s in &segments {
            let n = s.len();
            buf.obs[at * od..(at + n) * od].copy_from_slice(&s.obs);
            buf.actions[at * ad..(at + n) * ad].copy_from_slice(&s.actions);
            buf.log_probs[at..at + n].copy_from_slice(&s.log_probs);
            buf.values[at..at + n].copy_from_slice(&s.values);
            buf.rewards[at..at + n].copy_from_slice(&s.rewards);
            let last = at + n - 1;
            if s.terminated {
                buf.terminated[last] = true;
            } else {
                buf.truncated[last] = true;
                buf.final_values[last] = s.bootstrap;
            }
            groups.push(SampleGroup {
                rows: RowSpan::contiguous(at, n),
                version: s.version,
                bucket: s.bucket.clone(),
                sample_runs: id_runs(&s.sample_ids),
                completed_ns: s.completed_at_ns,
            });
            at += n;
        }
        // Agents sample with older versions: always decoupled PPO.
        self.core.prepare(&mut buf, Correction::Decoupled);
        let rules = self.gateway.active_rules().map_err(|e| e.message)?;
        let update = self.updates + 1;
        let admitted = self.core.admit(
            &mut buf,
            &groups,
            &rules.rules,
            Some(&rules),
            self.base_version,
            update,
        );
        let counts = &admitted.counts;
        let stats = (counts.trained + counts.down_weighted > 0).then(|| self.core.train(&buf, 1.0));
        self.gateway
            .ledger
            .append_decisions(admitted.decisions)
            .map_err(|e| e.to_string())?;
        let channel = match self.gateway.settings.release {
            ReleaseMode::Canary => Channel::Canary,
            _ => Channel::Stable,
        };
        let version = self
            .gateway
            .publish_params(self.core.params().to_vec(), channel, "learner")
            .map_err(|e| e.message)?;
        self.base_version = version;
        self.updates = update;
        self.gateway
            .counters
            .updates
            .store(update, Ordering::Relaxed);
        let line = UpdateLine {
            update,
            version,
            rows,
            segments: segments.len(),
            trained: counts.trained,
            down_weighted: counts.down_weighted,
            dropped: counts.dropped,
            invalidated_skipped: skipped.iter().map(Segment::len).sum(),
            mean_age_versions: admitted.age_versions_sum / rows as f64,
            mean_kl: admitted.kl_sum / rows as f64,
            policy_loss: stats.as_ref().map_or(0.0, |s| s.policy_loss),
            value_loss: stats.as_ref().map_or(0.0, |s| s.value_loss),
            approx_kl: stats.as_ref().map_or(0.0, |s| s.approx_kl),
            seconds: t0.elapsed().as_secs_f64(),
        };
        if let Some(f) = self.log.as_mut() {
            let mut text = serde_json::to_vec(&line).expect("update line serialises");
            text.push(b'\n');
            let _ = f.write_all(&text);
        }
        Ok(())
    }
}
