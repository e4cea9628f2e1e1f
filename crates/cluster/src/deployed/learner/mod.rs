//! The learner of deployed agents across machines (`strata learner --from-gateways`):
//! trains on the segments every gateway of the run publishes, under the admission rules a
//! gateway alone applies, and publishes versions every gateway imports.
//!
//! One update, in this order, so that a learner killed anywhere retrains nothing twice:
//! 1. take every message stored so far (a segment waits; an invalidation is in force from
//!    now on) and leave out the segments an invalidation covers;
//! 2. admit and train, as a gateway's own learner does (decoupled PPO: agents sample with
//!    older versions);
//! 3. checkpoint: weights, optimiser and counters, with the ids of the segments trained
//!    and the update's decisions; complete once written;
//! 4. write the decisions to the learner's ledger, publish the version (and, releasing
//!    automatically, move the run's serving pointer to it);
//! 5. acknowledge every message the update settled: the stream lets them go.
//!
//! A learner resumed from its newest checkpoint writes the decisions that checkpoint
//! holds if its ledger lacks them, publishes its version if the run lacks it, and
//! acknowledges without training a redelivered segment it already trained.

mod intake;
mod versions;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::PullConsumer;
use serde::Serialize;
use strata_gateway::{
    lag_seconds, lay_out, ReleaseMode, Segment, ServingPointer, SharedRelease, UpdateLog,
};
use strata_learner::{Correction, LearnerCore, Progress, TrainerState};
use strata_ledger::{Ledger, LedgerConfig, LedgerData, VersionedRules};
use strata_runtime::RunConfig;

use crate::deployed::checkpoint::{Checkpoints, Side, TRAINED_UPDATES};
use crate::deployed::stream::Deployed;
use crate::link::{Link, Unacked};
use crate::names::{CURRENT_KEY, INVALIDATIONS_CONSUMER, LATEST_KEY, SEGMENTS_CONSUMER};
use crate::records;
use crate::serving::NatsRelease;
use crate::stop::Stop;
use crate::{ClusterError, Meeting, SharedConfig};

/// Messages taken in one fetch.
const FETCH: usize = 256;
/// How often the serving pointer is read for an operator's rollback.
const POINTER_EVERY: Duration = Duration::from_millis(250);
/// The ledger's author for this learner's decisions and versions.
const AUTHOR: &str = "learner";

/// How a deployed learner runs.
#[derive(Clone, Debug)]
pub struct DeployedOptions {
    /// Its directory: `checkpoints/`, `ledger/`, `learner.jsonl`.
    pub dir: PathBuf,
    /// `Auto`: each version becomes the run's stable version after the cooldown (the
    /// learner moves the serving pointer); `Canary`: each becomes the gateways' canary
    /// candidate and an operator promotes.
    pub release: ReleaseMode,
    /// Stop after this many updates (none: until stopped).
    pub max_updates: Option<u64>,
    /// Start the run afresh even though it has versions on the server (its versions,
    /// serving pointer and unacknowledged segments are dropped). Without it a learner with
    /// no checkpoint refuses a run that has versions: it is another learner's, or this
    /// one's started on another directory.
    pub overwrite: bool,
}

/// What a deployed learner did, when it stops.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeployedReport {
    /// Updates made, in all (a resumed learner counts its earlier ones).
    pub updates: u64,
    /// The newest version published.
    pub version: u64,
    /// Segments trained by this process.
    pub segments_trained: u64,
    /// Segments left out because an invalidation covered them.
    pub segments_invalidated: u64,
    /// Redelivered segments already trained before a restart (acknowledged, not trained).
    pub segments_already_trained: u64,
    /// Invalidations received.
    pub invalidations: u64,
    /// Messages that could not be read (another run's config or format), acknowledged
    /// and left out.
    pub unreadable: u64,
}

/// One line of `learner.jsonl`.
#[derive(Serialize)]
struct UpdateLine {
    update: u64,
    version: u64,
    rows: usize,
    segments: usize,
    gateways: Vec<u16>,
    trained: u64,
    down_weighted: u64,
    dropped: u64,
    invalidated_skipped: u64,
    mean_age_versions: f64,
    /// Seconds from the newest segment's last step to the version's publication.
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

/// A segment waiting for an update, with what acknowledges it.
struct Waiting {
    segment: Segment,
    gateway: u16,
    id: String,
    ack: Unacked,
}

/// Runs the learner of run `meeting.run` on `config` (a resumed learner's checkpoint
/// brings its own) until `stop` is raised or `options.max_updates` are made.
///
/// # Errors
/// [`ClusterError`] when NATS cannot be reached, the directory is another run's or in
/// use, or a checkpoint cannot be written.
pub fn run_deployed_learner(
    meeting: &Meeting,
    config: RunConfig,
    options: &DeployedOptions,
    stop: &Stop,
) -> Result<DeployedReport, ClusterError> {
    if options.release == ReleaseMode::Manual {
        return Err(ClusterError::Config(
            "a learner publishes versions: release `auto` or `canary`".into(),
        ));
    }
    std::fs::create_dir_all(&options.dir)
        .map_err(|e| ClusterError::Config(format!("{}: {e}", options.dir.display())))?;
    let _lock = strata_dirlock::DirLock::acquire(&options.dir, "learner directory")
        .map_err(|e| ClusterError::Config(e.to_string()))?;
    let mut learner = DeployedLearner::open(meeting, config, options, stop)?;
    match learner.run() {
        // Stopped mid-update: what its checkpoint holds is settled when it resumes.
        Ok(()) | Err(ClusterError::Stopped) => Ok(learner.report),
        Err(e) => Err(e),
    }
}

struct DeployedLearner<'a> {
    link: Arc<Link>,
    options: &'a DeployedOptions,
    stop: &'a Stop,
    config: RunConfig,
    config_hash: String,
    core: LearnerCore,
    progress: Progress,
    ledger: Ledger,
    rules: VersionedRules,
    checkpoints: Checkpoints,
    side: Side,
    release: NatsRelease,
    /// The pointer revision this learner last wrote or saw, and the version it named.
    pointer_seen: Option<(u64, u64)>,
    pointer_read_at: Instant,
    /// The version an operator rolled the run back to, which the held parameters are,
    /// until the next update.
    rolled_back_to: Option<u64>,
    segments: PullConsumer,
    invalidations: PullConsumer,
    byte_spans: Vec<std::ops::Range<usize>>,
    waiting: Vec<Waiting>,
    rows_waiting: usize,
    /// Messages settled without training (invalidations, segments left out), acknowledged
    /// with the next checkpoint.
    settled: Vec<Unacked>,
    skipped_since_update: u64,
    log: UpdateLog,
    report: DeployedReport,
}

impl<'a> DeployedLearner<'a> {
    fn open(
        meeting: &Meeting,
        config: RunConfig,
        options: &'a DeployedOptions,
        stop: &'a Stop,
    ) -> Result<Self, ClusterError> {
        let checkpoints = Checkpoints::new(&options.dir);
        let resumed = checkpoints.newest()?;
        let mut config = match &resumed {
            Some((state, _)) => state.config.clone(),
            None => config,
        };
        config.validate()?;
        strata_runtime::resolve_env(&mut config)?;
        if config.env.normalize_obs || config.env.normalize_reward {
            return Err(ClusterError::Config(
                "gateways serve policies on raw observations and rewards: set env.normalize_obs and env.normalize_reward to false".into(),
            ));
        }
        let config_hash = match &resumed {
            Some((state, _)) => state.config_hash.clone(),
            None => config.config_hash(),
        };
        let mut core = LearnerCore::new(&config, 0)?;
        let mut progress = Progress::default();
        let mut side = Side::default();
        if let Some((state, s)) = resumed {
            core.model_mut()
                .load_tensors(&state.tensors)
                .map_err(strata_runtime::RuntimeError::from)?;
            core.ppo_mut().set_rng(state.ppo_rng);
            progress = state.progress;
            side = s;
        }
        let ledger = Ledger::open(&LedgerConfig::new(
            options.dir.join("ledger").display().to_string(),
        ))
        .map_err(|e| ClusterError::Config(format!("the learner's ledger: {e}")))?;
        let rules = ledger
            .register_rules(&config.admission)
            .map_err(|e| ClusterError::Config(format!("admission rules: {e}")))?;
        let link = Link::connect_until(meeting, stop)?;
        link.ensure_deployed_streams()?;
        let fresh = progress.updates == 0 && side.update == 0;
        if fresh && !options.overwrite {
            if let Some(v) = records::latest_version(&link)? {
                return Err(ClusterError::Config(format!(
                    "run `{}` already has versions (up to {v}) at {} and {} holds no checkpoint: start this learner on the directory of the learner that made them to resume it, or pass --overwrite to start the run afresh (its versions, serving pointer and unacknowledged segments are dropped)",
                    meeting.run,
                    meeting.url,
                    options.dir.display()
                )));
            }
        }
        if fresh {
            // A fresh run under a name used before: nothing of the earlier run may be
            // taken for this one's.
            link.purge_deployed()?;
            link.purge_objects()?;
            link.delete(LATEST_KEY)?;
            link.delete(CURRENT_KEY)?;
        }
        records::store_config(
            &link,
            &SharedConfig {
                config: config.to_toml(),
                config_hash: config_hash.clone(),
            },
        )?;
        let spec = strata_config::env_spec(&config)?;
        let release = NatsRelease::new(Arc::clone(&link));
        let segments = link.fresh_deployed_consumer(Deployed::Segments, SEGMENTS_CONSUMER)?;
        let invalidations =
            link.fresh_deployed_consumer(Deployed::Invalidations, INVALIDATIONS_CONSUMER)?;
        let log = UpdateLog::open(&options.dir);
        let mut learner = DeployedLearner {
            link,
            options,
            stop,
            config_hash,
            core,
            ledger,
            rules,
            checkpoints,
            release,
            pointer_seen: None,
            pointer_read_at: Instant::now(),
            rolled_back_to: None,
            segments,
            invalidations,
            byte_spans: spec.image_ranges(),
            waiting: Vec::new(),
            rows_waiting: 0,
            settled: Vec::new(),
            skipped_since_update: 0,
            log,
            report: DeployedReport {
                updates: progress.updates,
                version: progress.policy_version,
                ..DeployedReport::default()
            },
            progress,
            side,
            config,
        };
        learner.settle_restart()?;
        Ok(learner)
    }

    /// Makes the run and the ledger agree with the newest checkpoint: its decisions
    /// written, its version published, the serving pointer set.
    fn settle_restart(&mut self) -> Result<(), ClusterError> {
        if self.side.update > 0 {
            let written = LedgerData::read(self.ledger.storage())
                .map_err(|e| ClusterError::Config(format!("the learner's ledger: {e}")))?
                .decisions
                .iter()
                .map(|d| d.update)
                .max()
                .unwrap_or(0);
            if written < self.side.update && !self.side.decisions.is_empty() {
                tracing::info!(
                    component = "learner",
                    update = self.side.update,
                    "writing the decisions of the checkpointed update the last learner did not"
                );
                self.write_decisions(self.side.decisions.clone())?;
            }
        }
        let published = records::latest_version(&self.link)?;
        if published.is_none_or(|v| v < self.progress.policy_version) {
            self.publish()?;
        }
        let current = self.release.read().map_err(ClusterError::Wire)?;
        match (current, self.side.pointer) {
            // Nobody moved the pointer since the checkpoint, so the checkpointed version's
            // move never happened: make it now.
            (Some((pointer, revision)), Some((seen, _)))
                if revision == seen
                    && self.options.release == ReleaseMode::Auto
                    && pointer.version < self.progress.policy_version =>
            {
                self.pointer_seen = Some((revision, pointer.version));
                self.move_pointer(self.progress.policy_version)?;
            }
            // From where the pointer stood at the checkpoint: a move down since (an
            // operator's rollback while this learner was away) is followed.
            (Some(_), Some(seen)) => {
                self.pointer_seen = Some(seen);
                self.follow_rollback()?;
            }
            // A learner starting afresh on a run whose pointer exists: a later move down
            // from where it is now is an operator's rollback.
            (Some((pointer, revision)), None) => {
                self.pointer_seen = Some((revision, pointer.version))
            }
            (None, _) => {
                let pointer = ServingPointer {
                    version: self.progress.policy_version,
                    rules_version: self.rules.version,
                    immediate: true,
                    rules: Some(self.rules.rules.clone()),
                    by_learner: true,
                };
                self.pointer_seen = self
                    .release
                    .swap(None, &pointer)
                    .map_err(ClusterError::Wire)?
                    .map(|revision| (revision, pointer.version));
            }
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), ClusterError> {
        let batch = self.config.ppo.n_steps * self.config.env.num_envs;
        while !self.stop.is_raised() {
            if self
                .options
                .max_updates
                .is_some_and(|m| self.progress.updates >= m)
            {
                break;
            }
            match self.take(Duration::from_millis(200)) {
                Ok(_) => {}
                Err(ClusterError::Stopped) => break,
                Err(e) => {
                    tracing::warn!(component = "learner", error = %e, "reading the deployed stream: retrying");
                    if self.stop.pause(Duration::from_millis(500)) {
                        break;
                    }
                }
            }
            if self.pointer_read_at.elapsed() >= POINTER_EVERY {
                if let Err(e) = self.follow_rollback() {
                    tracing::warn!(component = "learner", error = %e, "reading the serving pointer: retrying");
                }
            }
            if self.rows_waiting >= batch {
                // Every invalidation stored before the update starts is in force for it.
                match self.drain() {
                    Ok(()) => {}
                    Err(ClusterError::Stopped) => break,
                    Err(e) => {
                        tracing::warn!(component = "learner", error = %e, "draining the deployed stream: retrying");
                        continue;
                    }
                }
                self.leave_out_invalidated();
                if self.rows_waiting >= batch {
                    self.update()?;
                }
            }
        }
        Ok(())
    }

    fn update(&mut self) -> Result<(), ClusterError> {
        let t0 = Instant::now();
        // The oldest segments up to one batch; later ones wait for the next update.
        let batch = self.config.ppo.n_steps * self.config.env.num_envs;
        let mut rows_taken = 0;
        let take = self
            .waiting
            .iter()
            .take_while(|w| {
                let more = rows_taken < batch;
                rows_taken += w.segment.len();
                more
            })
            .count();
        let waiting: Vec<Waiting> = self.waiting.drain(..take).collect();
        self.rows_waiting = self.waiting.iter().map(|w| w.segment.len()).sum();
        // Laid out from where they wait: no copy of their rows.
        let segments: Vec<&Segment> = waiting.iter().map(|w| &w.segment).collect();
        let rows: usize = segments.iter().map(|s| s.len()).sum();
        let state_len = self.core.model().state_len();
        let lane = (state_len > 0).then_some(self.config.ppo.n_steps);
        let (mut buf, groups) = lay_out(&segments, self.core.model().obs_dim(), state_len, lane);
        self.core.prepare(&mut buf, Correction::Decoupled);
        let update = self.progress.updates + 1;
        let admitted = self.core.admit(
            &mut buf,
            &groups,
            &self.rules.rules,
            Some(&self.rules),
            self.base_version(),
            update,
        );
        let counts = admitted.counts.clone();
        let stats = (counts.trained + counts.down_weighted > 0).then(|| self.core.train(&buf, 1.0));
        let version = self.progress.policy_version + 1;
        self.progress.updates = update;
        self.progress.policy_version = version;
        self.progress.global_step += rows as u64;
        let ids: Vec<String> = waiting.iter().map(|w| w.id.clone()).collect();
        self.side.trained.push_back((update, ids));
        while self.side.trained.len() > TRAINED_UPDATES {
            self.side.trained.pop_front();
        }
        self.side.update = update;
        self.side.pointer = self.pointer_seen;
        self.side.version = version;
        self.side.decisions = admitted.decisions.clone();
        self.rolled_back_to = None;
        self.checkpoints.save(&self.state(), &self.side)?;
        self.write_decisions(admitted.decisions)?;
        self.publish()?;
        if self.options.release == ReleaseMode::Auto {
            self.move_pointer(version)?;
        }
        let mut acks: Vec<Unacked> = std::mem::take(&mut self.settled);
        let mut gateways: Vec<u16> = waiting.iter().map(|w| w.gateway).collect();
        gateways.sort_unstable();
        gateways.dedup();
        // Measured once the version is out, before the acknowledgements.
        let lag = lag_seconds(segments.iter().copied());
        let segment_count = segments.len();
        acks.extend(waiting.into_iter().map(|w| w.ack));
        crate::link::retrying(
            "acknowledging trained segments",
            || self.link.ack_all(&acks),
            self.stop,
        );
        self.report.updates = update;
        self.report.version = version;
        self.report.segments_trained += segment_count as u64;
        let line = UpdateLine {
            update,
            version,
            rows,
            segments: segment_count,
            gateways,
            trained: counts.trained,
            down_weighted: counts.down_weighted,
            dropped: counts.dropped,
            invalidated_skipped: std::mem::take(&mut self.skipped_since_update),
            mean_age_versions: admitted.age_versions_sum / rows.max(1) as f64,
            lag_seconds: lag,
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

    fn state(&self) -> TrainerState {
        TrainerState {
            config: self.config.clone(),
            config_hash: self.config_hash.clone(),
            continued_from: None,
            progress: self.progress.clone(),
            normalizer: Default::default(),
            workers: Vec::new(),
            ppo_rng: self.core.ppo().rng().clone(),
            tensors: self.core.model().tensors(),
        }
    }

    fn write_decisions(
        &self,
        decisions: Vec<strata_ledger::DecisionRecord>,
    ) -> Result<(), ClusterError> {
        let ledger = |e: strata_ledger::LedgerError| {
            ClusterError::Config(format!("the learner's ledger: {e}"))
        };
        self.ledger.append_decisions(decisions).map_err(ledger)?;
        self.ledger.flush().map_err(ledger)
    }
}
