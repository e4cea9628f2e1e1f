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

use std::borrow::Borrow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::Serialize;
use strata_algo::{RolloutBuffer, StepColumns};
use strata_learner::learner_core::id_runs;
use strata_learner::{Correction, LearnerCore, RowSpan, SampleGroup};

use crate::api::Channel;
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::segment::Segment;
use crate::settings::ReleaseMode;
use crate::update_log::UpdateLog;

/// Why the learner stopped.
#[derive(Debug, thiserror::Error)]
enum LearnerError {
    #[error(transparent)]
    Learner(#[from] strata_learner::LearnerError),
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
    /// Seconds from the newest segment's last step to the version trained on it.
    lag_seconds: f64,
    policy_loss: f32,
    value_loss: f32,
    /// Approximate KL over every epoch's minibatches.
    approx_kl: f32,
    /// Over the last epoch's only (what SB3 logs as `train/approx_kl`).
    approx_kl_last_epoch: f32,
    /// Share of samples whose ratio left the clip range.
    clip_fraction: f32,
    seconds: f64,
}

/// Starts the learner thread; it stops when the gateway stops (after the update it is
/// in, leaving what is still queued untrained) or its queue is closed.
///
/// # Errors
/// The thread could not be spawned, or the starting parameters could not be loaded.
pub(crate) fn spawn(
    gateway: Arc<Gateway>,
    rx: Receiver<Box<Segment>>,
) -> std::io::Result<JoinHandle<()>> {
    // The newest of Strata's own versions: an external one has no parameters to go on from.
    let latest = gateway.status().latest;
    let start = (0..=latest)
        .rev()
        .find(|&v| gateway.policies.external(v).is_none() && gateway.policies.exists(v))
        .unwrap_or(latest);
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
    log: UpdateLog,
}

impl Learner {
    fn new(gateway: Arc<Gateway>, params: &[f32]) -> Result<Self, LearnerError> {
        let run = &gateway.settings.run;
        let mut core = LearnerCore::new(run, 0)?;
        core.model_mut().set_flat_params(params)?;
        let log = UpdateLog::open(&gateway.settings.dir);
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
                    if self.gateway.inbox.holds_invalidated(&seg) {
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
        let state_len = self.core.model().state_len();
        let lane = (state_len > 0).then_some(self.gateway.settings.run.ppo.n_steps);
        let (mut buf, groups) = lay_out(&segments, self.core.model().obs_dim(), state_len, lane);
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
            lag_seconds: crate::update_log::lag_seconds(&segments),
            policy_loss: stats.as_ref().map_or(0.0, |s| s.policy_loss),
            value_loss: stats.as_ref().map_or(0.0, |s| s.value_loss),
            approx_kl: stats.as_ref().map_or(0.0, |s| s.approx_kl),
            approx_kl_last_epoch: stats.as_ref().map_or(0.0, |s| s.approx_kl_last_epoch),
            clip_fraction: stats.as_ref().map_or(0.0, |s| s.clip_fraction),
            seconds: t0.elapsed().as_secs_f64(),
        };
        self.log.append(&line);
        Ok(())
    }
}

/// The rollout of `segments`, with each one's rows as a sample group.
///
/// A feed-forward policy's segments follow each other in one lane (`lane` is `None`). A
/// recurrent policy's each get a lane of `lane` steps (segments are cut at `ppo.n_steps`),
/// filled up after the segment's end with rows that are never trained on: every sequence
/// then lies within one segment and starts from the state stored at its first step, as a
/// worker's fragment does. A learner in another process (`strata learner
/// --from-gateways`) lays its segments out with this too.
pub fn lay_out<S: std::borrow::Borrow<Segment>>(
    segments: &[S],
    obs_dim: usize,
    state_len: usize,
    lane: Option<usize>,
) -> (RolloutBuffer, Vec<SampleGroup>) {
    let first: &Segment = segments[0].borrow();
    let dims = (obs_dim, first.action_dim);
    debug_assert_eq!(obs_dim, first.obs_dim);
    let rows: usize = segments.iter().map(|s| s.borrow().len()).sum();
    let (lanes, steps) = match lane {
        Some(n) => (segments.len(), n),
        None => (1, rows),
    };
    let mut buf = RolloutBuffer::with_byte_spans(lanes, steps, dims.0, dims.1, first.byte_spans())
        .with_memory(state_len);
    let mut groups = Vec::with_capacity(segments.len());
    let mut at = 0;
    for (k, s) in segments.iter().map(Borrow::borrow).enumerate() {
        let n = s.len();
        let (span, last) = if lane.is_some() {
            debug_assert!(n <= steps, "a segment longer than a lane");
            let span = RowSpan {
                first: k,
                width: 1,
                stride: lanes,
                count: n,
            };
            for t in 0..n {
                let row = t * lanes + k;
                buf.steps_mut().copy_from(row, s.steps(), t, 1, dims);
                let sl = state_len;
                buf.states[row * sl..(row + 1) * sl]
                    .copy_from_slice(&s.states()[t * sl..(t + 1) * sl]);
            }
            // Rows after the segment's end end at once and weigh nothing.
            for t in n..steps {
                let row = t * lanes + k;
                buf.terminated[row] = true;
                buf.admission[row] = 0.0;
            }
            (span, (n - 1) * lanes + k)
        } else {
            buf.steps_mut().copy_from(at, s.steps(), 0, n, dims);
            (RowSpan::contiguous(at, n), at + n - 1)
        };
        if s.terminated {
            buf.terminated[last] = true;
        } else {
            buf.truncated[last] = true;
            buf.final_values[last] = s.bootstrap;
        }
        groups.push(SampleGroup {
            rows: span,
            version: s.version,
            bucket: s.bucket.clone(),
            sample_runs: id_runs(&s.sample_ids),
            completed_ns: s.completed_at_ns,
        });
        at += n;
    }
    (buf, groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_ledger::Bucket;

    /// A segment of `n` steps of trajectory `t` whose values say where they came from.
    fn segment(t: u64, n: usize, state_len: usize) -> Segment {
        let mut s = Segment::new(t, 0, &Bucket::train(), (2, 1), &[]);
        for i in 0..n {
            let x = (t * 100 + i as u64) as f32;
            let state = vec![x; state_len];
            s.push(
                x as u64,
                &[x, -x],
                &[(i % 2) as f32],
                -0.7,
                0.1,
                1.0,
                &state,
                5,
            );
        }
        s
    }

    #[test]
    fn a_recurrent_policys_segments_get_a_lane_each_and_train_as_sequences() {
        let mut config = strata_config::preset("cartpole-novel").unwrap();
        config.env.normalize_obs = false;
        let state_len = config.network.state_len();
        let lane = config.ppo.n_steps;
        let (mut a, b) = (segment(1, 3, state_len), segment(2, lane, state_len));
        a.terminated = true;
        let mut segments = vec![a, b];
        segments[1].bootstrap = 4.5;
        let (mut buf, groups) = lay_out(&segments, 2, state_len, Some(lane));
        assert_eq!((buf.num_envs, buf.n_steps), (2, lane));
        // Lane 0 is segment a: its 3 steps, then padding that ends at once and weighs 0.
        assert_eq!(
            groups[0].rows.runs().flatten().collect::<Vec<_>>(),
            [0, 2, 4]
        );
        assert_eq!(groups[1].rows.len(), lane);
        let mut row = Vec::new();
        buf.obs.extend_into(4..5, &mut row);
        assert_eq!(row, [102.0, -102.0]);
        assert_eq!(buf.states[4 * state_len], 102.0);
        assert_eq!(buf.states[5 * state_len], 202.0, "lane 1, step 2");
        assert!(buf.terminated[4] && !buf.truncated[4]);
        assert!(buf.truncated[(lane - 1) * 2 + 1] && buf.final_values[(lane - 1) * 2 + 1] == 4.5);
        assert!((3..lane).all(|t| buf.admission[t * 2] == 0.0 && buf.terminated[t * 2]));
        assert!(
            buf.starts.iter().all(|&s| !s),
            "a segment is one trajectory"
        );

        // The learner's update runs on it as sequences; what the padding holds changes
        // nothing.
        let train = |mut buf: RolloutBuffer| {
            let mut core = LearnerCore::new(&config, 0).unwrap();
            core.prepare(&mut buf, Correction::Decoupled);
            let stats = core.train(&buf, 1.0);
            assert!(stats.policy_loss.is_finite() && stats.value_loss > 0.0);
            core.params().to_vec()
        };
        let before = LearnerCore::new(&config, 0).unwrap().params().to_vec();
        let trained = train(buf.clone());
        assert_ne!(trained, before);
        for t in 3..lane {
            buf.rewards[t * 2] = 1e3;
            buf.obs.write(t * 2, &[5.0, 5.0]);
            buf.states[t * 2 * state_len] = 9.0;
        }
        assert_eq!(train(buf), trained);

        // A feed-forward policy's follow each other in one lane.
        let (buf, groups) = lay_out(&segments, 2, 0, None);
        assert_eq!((buf.num_envs, buf.n_steps), (1, 3 + lane));
        assert_eq!(groups[1].rows, RowSpan::contiguous(3, lane));
        assert!(buf.terminated[2] && buf.truncated[2 + lane]);
    }
}
