//! The gateway's learner: trains PPO on deployed agents' reported steps and publishes each
//! result as a new version.
//!
//! Reported steps arrive as [`Segment`]s: up to `ppo.n_steps` steps of one trajectory
//! (one version), cut at the episode's end (terminal, or bootstrapped from V(last obs)).
//! Invalidations and rollbacks arrive apart, through the gateway's [`crate::LearnerInbox`],
//! read before every update: a segment of a trajectory invalidated before the update
//! started is never trained on.
//! Once `num_envs * n_steps` rows are waiting, the learner makes them proximal (decoupled
//! PPO: agents sample with older versions), applies the admission rules per segment,
//! records the decisions in the ledger, runs the PPO update and publishes the parameters.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::Serialize;
use strata_algo::{RolloutBuffer, StepColumns};
use strata_runtime::learner_core::id_runs;
use strata_runtime::{Correction, LearnerCore, RowSpan, SampleGroup};

use crate::api::Channel;
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::segment::Segment;
use crate::settings::ReleaseMode;

/// Why the learner stopped.
#[derive(Debug, thiserror::Error)]
enum LearnerError {
    #[error(transparent)]
    Runtime(#[from] strata_runtime::RuntimeError),
    #[error("the parameters do not fit the model: {0}")]
    Model(#[from] strata_nn::NnError),
    #[error(transparent)]
    Gateway(#[from] RequestError),
    #[error(transparent)]
    Ledger(#[from] strata_ledger::LedgerError),
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

/// Starts the learner thread; it stops when the gateway stops (after the update it is
/// in, leaving what is still queued untrained) or its queue is closed.
///
/// # Errors
/// The thread could not be spawned, or the starting parameters could not be loaded.
pub fn spawn(gateway: Arc<Gateway>, rx: Receiver<Box<Segment>>) -> std::io::Result<JoinHandle<()>> {
    let start = gateway.status().latest;
    let params = gateway
        .policies
        .served(start)
        .map_err(std::io::Error::other)?
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
            learner.run(&rx);
        })
}

struct Learner {
    gateway: Arc<Gateway>,
    core: LearnerCore,
    waiting: Vec<Segment>,
    rows_waiting: usize,
    /// Rows of invalidated trajectories dropped since the last update.
    rows_skipped: usize,
    base_version: u64,
    updates: u64,
    log: Option<std::fs::File>,
}

impl Learner {
    fn new(gateway: Arc<Gateway>, params: &[f32]) -> Result<Self, LearnerError> {
        let run = &gateway.settings.run;
        let mut core = LearnerCore::new(run, 0)?;
        core.model_mut().set_flat_params(params)?;
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
            rows_skipped: 0,
            base_version,
            updates: 0,
            log,
        })
    }

    fn run(&mut self, rx: &Receiver<Box<Segment>>) {
        let run = &self.gateway.settings.run;
        let batch = run.ppo.n_steps * run.env.num_envs;
        loop {
            if self.gateway.inbox.is_stopping() {
                let queued = rx.len();
                if queued > 0 {
                    tracing::info!(
                        component = "learner",
                        queued,
                        waiting_rows = self.rows_waiting,
                        "stopping: queued segments stay untrained"
                    );
                }
                break;
            }
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(seg) => {
                    if self.gateway.inbox.is_invalidated(seg.trajectory) {
                        self.rows_skipped += seg.len();
                    } else {
                        self.rows_waiting += seg.len();
                        self.waiting.push(*seg);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if let Some(version) = self.gateway.inbox.take_rollback() {
                self.apply_rollback(version);
            }
            if self.rows_waiting >= batch {
                // Trajectories invalidated since their segments arrived.
                let dropped = self.gateway.inbox.drop_invalidated(&mut self.waiting);
                self.rows_waiting -= dropped;
                self.rows_skipped += dropped;
            }
            if self.rows_waiting >= batch {
                if let Err(e) = self.update() {
                    tracing::error!(component = "learner", error = %e, "update failed; the learner stops");
                    break;
                }
            }
        }
    }

    fn apply_rollback(&mut self, version: u64) {
        match self.gateway.policies.served(version) {
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
                tracing::error!(component = "learner", error = %e, "rollback version unreadable")
            }
        }
    }

    fn update(&mut self) -> Result<(), LearnerError> {
        let t0 = Instant::now();
        let segments = std::mem::take(&mut self.waiting);
        self.rows_waiting = 0;
        let skipped = std::mem::take(&mut self.rows_skipped);
        let rows: usize = segments.iter().map(Segment::len).sum();
        if rows == 0 {
            return Ok(());
        }
        let (od, ad) = (self.core.model().obs_dim(), segments[0].action_dim);
        debug_assert_eq!(od, segments[0].obs_dim);
        let mut buf = RolloutBuffer::with_byte_spans(1, rows, od, ad, segments[0].byte_spans());
        let mut groups = Vec::with_capacity(segments.len());
        let mut at = 0;
        for s in &segments {
            let n = s.len();
            buf.steps_mut().copy_from(at, s.steps(), 0, n, (od, ad));
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
        let rules = self.gateway.active_rules()?;
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
        self.gateway.ledger.append_decisions(admitted.decisions)?;
        let channel = match self.gateway.settings.release {
            ReleaseMode::Canary => Channel::Canary,
            _ => Channel::Stable,
        };
        let version = self.gateway.publish_params(
            self.core.params().to_vec(),
            channel,
            crate::gateway::LEARNER,
        )?;
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
            invalidated_skipped: skipped,
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
