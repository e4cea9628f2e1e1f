//! Beyond one machine: the learner, rollout workers and gateways of one run as separate
//! processes over NATS JetStream.
//!
//! A run is named (`--run NAME`); everything it keeps on the server carries the name:
//!
//! | what | where | |
//! | --- | --- | --- |
//! | fragments | stream `STRATA_<run>_FRAGMENTS`, subject `strata.<run>.fragments.w<w>` | work-queue retention, file storage, deduplicated by message id |
//! | config, newest version, assignments, claims, serving pointer | key-value bucket `strata_<run>` | `current` moves by compare-and-swap |
//! | every policy version, workers' start states | object store `strata_<run>_objects` | |
//! | heartbeats, failures, version announcements | core NATS subjects | nothing kept |
//!
//! The learner ([`prepare_learner`], `strata learner`) is Strata's trainer whose workers
//! are [`RemoteWorkers`]: one proxy per logical worker (`runtime.workers`) that assigns it,
//! takes its fragments from the stream in order, and stands for it exactly as a local
//! worker thread would, restarts included. Worker processes ([`run_worker_process`],
//! `strata worker`, any number, on any machine) claim logical workers and run the same
//! rollout worker a one-process training runs as a thread, so a run is the same whether
//! its workers are threads or processes (deterministic mode gives the same weights).
//! Gateways ([`serve_run`], `strata serve --nats`) import every version the learner
//! publishes and serve the one the run's shared pointer names, moved by compare-and-swap
//! so that of two operators promoting at once through two gateways exactly one wins.
//!
//! # Durability
//!
//! A fragment's publish is acknowledged once the stream has stored it; the stream's
//! server is started with `sync_interval: always` (the tests and docs/beyond-one-machine.md do), so that ack
//! means written to disk, and a fragment acknowledged survives a server restart or crash.
//! The learner acknowledges a fragment to the stream only after the update that trained
//! on it is in a checkpoint (every update by default): a learner killed at any point
//! resumes from its newest checkpoint and is handed again every fragment not yet
//! acknowledged, and trains on each fragment number once. Re-published messages (a
//! worker retrying a publish whose ack it lost) are dropped by the stream within its
//! two-minute deduplication window and by the learner's proxies after it (a fragment
//! number is taken once).

mod access;
mod deployed;
mod learner;
mod link;
mod names;
mod protocol;
mod records;
mod serving;
mod stop;
mod wire;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use strata_runtime::{resolve_env, RunConfig, RuntimeError, StoreError, Trainer, TrainerState};

/// Updates between a distributed learner's checkpoints when `train.checkpoint_every` is
/// unset.
pub const CHECKPOINT_UPDATES: u64 = 16;

pub use access::{NatsAccess, NatsCredentials};
pub use deployed::{
    deployed_messages, feed_run, run_deployed_learner, DeployedOptions, DeployedReport,
    FeedCounters,
};
pub use learner::{RemoteWorkers, Traffic};
pub use serving::{run_config, serve_run, NatsRelease};
pub use stop::Stop;
pub use worker::{run_worker_process, WorkerOptions, WorkerReport, MACHINE_KEYS};

/// What went wrong between processes.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A setting that cannot work (a run name, a config a worker may not change).
    #[error("{0}")]
    Config(String),
    /// The server refused or failed a call.
    #[error("NATS: cannot {what}: {reason}")]
    Nats {
        /// What was being done.
        what: String,
        /// What the server or client said.
        reason: String,
    },
    /// The server did not answer in time.
    #[error("NATS: {what} did not finish within {after:?} (is the server at the URL, with JetStream on?)")]
    Timeout {
        /// What was being done.
        what: String,
        /// How long it was waited for.
        after: Duration,
    },
    /// A message that is not what the protocol says.
    #[error("message: {0}")]
    Wire(String),
    /// The run could not be built or trained.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A policy version could not be adopted.
    #[error("policy: {0}")]
    Policy(#[from] StoreError),
    /// Stopped on request before it finished.
    #[error("stopped")]
    Stopped,
}

impl From<strata_runtime::ConfigError> for ClusterError {
    /// A config that could not build what it asks for: as a run reports it.
    fn from(e: strata_runtime::ConfigError) -> Self {
        ClusterError::Runtime(e.into())
    }
}

impl From<strata_learner::LearnerError> for ClusterError {
    /// A learner that could not be built or checkpointed: as a run reports it.
    fn from(e: strata_learner::LearnerError) -> Self {
        ClusterError::Runtime(e.into())
    }
}

impl ClusterError {
    fn nats(what: impl Into<String>, e: impl std::fmt::Display) -> Self {
        ClusterError::Nats {
            what: what.into(),
            reason: e.to_string(),
        }
    }
}

/// Where the learner and workers of a run meet.
#[derive(Clone, Debug)]
pub struct Meeting {
    /// The NATS server (`nats://127.0.0.1:4222`).
    pub url: String,
    /// The run's name.
    pub run: String,
    /// How long one NATS call may take.
    pub timeout: Duration,
    /// TLS and credentials for the server.
    pub access: NatsAccess,
}

/// Fragments in run `meeting.run`'s stream that the learner has not acknowledged yet
/// (published, not yet trained on and checkpointed).
///
/// # Errors
/// [`ClusterError`] when the server cannot be reached or the run has no stream.
pub fn pending_fragments(meeting: &Meeting) -> Result<u64, ClusterError> {
    link::Link::connect(meeting)?.stream_messages()
}

/// The newest version run `meeting.run`'s learner published, if any.
///
/// # Errors
/// [`ClusterError`] when the server cannot be reached.
pub fn published_version(meeting: &Meeting) -> Result<Option<u64>, ClusterError> {
    records::latest_version(&*link::Link::connect(meeting)?)
}

/// The config key's value: the run config and its hash, as the learner holds them.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct SharedConfig {
    pub(crate) config: String,
    pub(crate) config_hash: String,
}

/// Prepares run `meeting.run` on the server and returns its learner: a trainer whose
/// workers are worker processes. A fresh run (`resume` none) clears what an earlier run
/// of that name left (fragments, assignments, claims); a resumed one keeps the stream, so
/// every fragment not yet acknowledged is trained on. Checkpoints are written every
/// update (and the newest two kept) unless the config says otherwise: fragments are
/// acknowledged as their updates reach a checkpoint.
///
/// # Errors
/// [`ClusterError`] when the server cannot be reached or the config cannot run
/// distributed (central inference needs the workers' requests in one process).
pub fn prepare_learner(
    meeting: &Meeting,
    config: RunConfig,
    resume: Option<TrainerState>,
) -> Result<Trainer, ClusterError> {
    prepare_learner_counted(meeting, config, resume).map(|(trainer, _)| trainer)
}

/// Refuses what a run cannot do across processes yet.
fn check_distributable(config: &RunConfig) -> Result<(), ClusterError> {
    if config.runtime.inference == strata_runtime::Inference::Central {
        return Err(ClusterError::Config(
            "runtime.inference = \"central\" batches the workers of one process; with worker processes use \"worker\"".into(),
        ));
    }
    Ok(())
}

/// As [`prepare_learner`], with the counters of what the learner takes from the stream.
///
/// # Errors
/// As [`prepare_learner`].
pub fn prepare_learner_counted(
    meeting: &Meeting,
    config: RunConfig,
    resume: Option<TrainerState>,
) -> Result<(Trainer, Arc<Traffic>), ClusterError> {
    let mut config = match &resume {
        Some(state) => state.config.clone(),
        None => config,
    };
    check_distributable(&config)?;
    config.validate()?;
    resolve_env(&mut config)?;
    if config.train.checkpoint_every == 0 {
        // Fragments are acknowledged once a checkpoint covers them: every few updates
        // rather than every one (a checkpoint, a ledger flush and their fsyncs cost a
        // CartPole update twice its training); a learner that dies replays at most these
        // updates' fragments from the stream.
        config.train.checkpoint_every = CHECKPOINT_UPDATES * config.steps_per_update();
    }
    if config.train.keep_checkpoints == 0 {
        config.train.keep_checkpoints = 2;
    }
    let config_hash = match &resume {
        Some(state) => state.config_hash.clone(),
        None => config.config_hash(),
    };
    let link = link::Link::connect(meeting)?;
    link.ensure_stream()?;
    if resume.is_none() {
        // A fresh run under a name used before: nothing of the earlier run may be taken
        // for this one's (fragments, versions, assignments, claims, the serving pointer).
        link.purge_stream()?;
        link.purge_objects()?;
        link.delete(names::LATEST_KEY)?;
        link.delete(names::CURRENT_KEY)?;
        for w in 0..config.runtime.workers {
            link.delete(&names::assignment_key(w))?;
            link.delete(&names::claim_key(w))?;
        }
    }
    let shared = SharedConfig {
        config: config.to_toml(),
        config_hash: config_hash.clone(),
    };
    records::store_config(&link, &shared)?;
    let silent_after = Duration::from_secs_f64(config.runtime.restart_after_secs);
    let launcher = Arc::new(RemoteWorkers::new(
        Arc::clone(&link),
        &config_hash,
        silent_after,
    ));
    let traffic = launcher.traffic();
    let mut resume = resume;
    if let Some(state) = resume.as_mut() {
        state.config = config.clone();
    }
    Ok((Trainer::with_workers(config, resume, launcher)?, traffic))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn central_inference_is_refused_by_name() {
        assert!(check_distributable(&strata_runtime::preset("cartpole").unwrap()).is_ok());
        assert!(check_distributable(&strata_runtime::preset("cartpole-novel").unwrap()).is_ok());
        let mut central = strata_runtime::preset("cartpole").unwrap();
        central.runtime.inference = strata_runtime::Inference::Central;
        assert!(check_distributable(&central)
            .unwrap_err()
            .to_string()
            .contains("runtime.inference"));
    }
}
