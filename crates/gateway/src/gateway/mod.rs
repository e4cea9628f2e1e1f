//! The gateway's operations, independent of HTTP: episodes pinned to versions, acts with
//! idempotency, re-checks, durable reports, side-effect-aware replay, and the operator's
//! release controls. Every state change is journalled before it is answered.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use rand::SeedableRng;
use strata_ledger::{
    now_ns, Bucket, Invalidation, Ledger, LedgerConfig, ReasonCode, SampleBatch, SampleRecord,
    Target,
};
use strata_nn::{Head, Memory, SampleRng};

use crate::api::*;
use crate::auth::{Auth, Caller, TokensFile};
use crate::error::{GatewayError, RequestError};
use crate::inbox::LearnerInbox;
use crate::journal::Journal;
use crate::policies::DiskPolicyStore;
use crate::segment::Segment;
use crate::settings::{GatewaySettings, ReleaseMode};
use crate::state::{
    agent_key, f32_from_le_bytes, f32_le_bytes, ActionRec, ActionStatus, EpisodeRec, Event,
    Recorded, State,
};

mod acting;
mod episodes;
mod intake;
mod invalidation;
mod recheck;
mod recovery;
mod release;
mod reporting;
mod retention;
mod shared;
mod training;

pub use retention::KEEP_RECENT;
pub use shared::{ServingPointer, SharedRelease};

/// The author of the versions the gateway's learner publishes.
pub(crate) const LEARNER: &str = "learner";

/// Counters for status and benchmarks.
#[derive(Default)]
pub struct Counters {
    /// Acts answered (retries included).
    pub acts: AtomicU64,
    /// Reports stored.
    pub reports: AtomicU64,
    /// Reports answered as duplicates.
    pub duplicates: AtomicU64,
    /// Re-check aborts.
    pub aborts: AtomicU64,
    /// Re-checks that put an episode on hold.
    pub holds: AtomicU64,
    /// Segments the learner's full queue could not take.
    pub segments_dropped: AtomicU64,
    /// Learner updates.
    pub updates: AtomicU64,
    /// Policy versions the retention rule removed.
    pub versions_removed: AtomicU64,
    /// Whether the parameters of `serve_first` were published at start (not already
    /// stable).
    pub served_first_published: std::sync::atomic::AtomicBool,
}

/// A running gateway's state and operations.
pub struct Gateway {
    pub(crate) settings: GatewaySettings,
    config_hash: String,
    obs_dim: usize,
    /// The images inside an observation (summarised per channel in the ledger).
    images: Vec<strata_env::ImageSpan>,
    /// Values in an observation summary ([`strata_env::EnvSpec::summary_dim`]).
    summary_dim: usize,
    /// Where the images lie in a row: what segments keep as bytes.
    image_ranges: Vec<std::ops::Range<usize>>,
    /// For an env whose observation is one image: how to take it in the env's own shape.
    image_reorder: Option<strata_env::gym::ImageReorder>,
    action_dim: usize,
    /// Values of a recurrent policy's state an episode keeps (0 for a feed-forward one).
    state_len: usize,
    pub(crate) ledger: Ledger,
    journal: Journal,
    state: Mutex<State>,
    /// Training rows per trajectory, gathered until it is cut.
    rows: Mutex<std::collections::HashMap<u64, Segment>>,
    /// Held while a trainer's report is checked and recorded (one at a time).
    trained_lock: Mutex<()>,
    /// Reads a trainer's pages and checks its reports at the cost of the rows they name
    /// (what it learnt of the ledger's files is kept between calls).
    pages: Mutex<strata_ledger::PageReader>,
    /// Sample ids reserved by reports not yet durable (or failed): a trainer's cursor
    /// must not pass the lowest, or a slower report's sample would be skipped for good.
    in_flight: Mutex<std::collections::BTreeSet<u64>>,
    pub(crate) policies: DiskPolicyStore,
    pub(crate) auth: Auth,
    pub(crate) tokens: TokensFile,
    /// The learner's queue of segments (bounded, shed when full); closing it stops the
    /// learner.
    learner_tx: Mutex<Option<Sender<Box<Segment>>>>,
    /// Invalidations and rollbacks for the learner, which never make a request wait.
    pub(crate) inbox: LearnerInbox,
    /// The admission-rules version the learner applies and new versions are bound to.
    active_rules: Mutex<u64>,
    /// Counters.
    pub counters: Counters,
    /// Size of the journal's last snapshot.
    snapshot_bytes: AtomicU64,
    /// With several gateways of one run: the shared serving pointer.
    shared: std::sync::OnceLock<shared::Shared>,
    /// The HTTP server's report tasks, each run to its end even when its agent hangs up:
    /// a stopping server waits for them before it journals a clean stop.
    pub(crate) report_tasks: tokio_util::task::TaskTracker,
    /// This process's hold on the gateway directory (dropped last, after the ledger).
    _lock: strata_dirlock::DirLock,
}

impl Gateway {
    /// How this gateway runs.
    pub fn settings(&self) -> &GatewaySettings {
        &self.settings
    }

    /// The invalidations this gateway relays to a learner in another process.
    pub fn relay(&self) -> &crate::RelayQueue {
        self.inbox.relay()
    }

    /// Whether `segment` holds a sample, or is of a trajectory, invalidated lately.
    pub fn holds_invalidated(&self, segment: &Segment) -> bool {
        self.inbox.holds_invalidated(segment)
    }

    /// The config hash of the served model.
    pub fn config_hash(&self) -> &str {
        &self.config_hash
    }

    /// Observation width.
    pub fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    /// The action types agents may declare (the side-effect classes configured).
    pub fn action_types(&self) -> Vec<String> {
        self.settings.side_effects.keys().cloned().collect()
    }

    /// The tokens in use.
    pub fn tokens(&self) -> &TokensFile {
        &self.tokens
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Bytes in the journal now.
    pub fn journal_size(&self) -> u64 {
        self.journal.size()
    }

    fn journal(&self, event: &Event, sync: bool) -> Result<(), RequestError> {
        self.journal
            .append(event, sync)
            .map_err(|e| RequestError::unavailable(e.to_string()))
    }

    /// Journals an action's record with its episode's (both may have changed).
    fn journal_action(
        &self,
        state: &State,
        action: impl Into<Box<ActionRec>>,
    ) -> Result<(), RequestError> {
        let action = action.into();
        let episode = state.episodes[&action.episode].clone();
        self.journal(&Event::ActionEpisode { action, episode }, false)
    }

    fn journal_episode(&self, state: &State, id: u64) -> Result<(), RequestError> {
        self.journal(
            &Event::Episode {
                episode: state.episodes[&id].clone(),
                next_trajectory: state.next_trajectory,
            },
            false,
        )
    }

    fn info(&self, e: &EpisodeRec) -> EpisodeInfo {
        EpisodeInfo {
            episode_id: e.id,
            policy_version: e.version,
            config_hash: self.version_hash(e.version),
            channel: e.channel,
            bucket: e.bucket.clone(),
            trajectory_id: e.trajectory,
            status: e.status,
            steps: e.steps,
            pending_action: e.pending,
            obs_dim: self.obs_dim,
            action_dim: self.action_dim,
            external: self.policies.external(e.version).map(|p| (*p).clone()),
        }
    }

    fn stable_bucket(&self) -> Bucket {
        self.settings.run.ledger.bucket.clone()
    }

    /// Whether new versions come from the learner.
    pub fn learns(&self) -> bool {
        self.settings.learner && self.settings.release != ReleaseMode::Manual
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_observations;
