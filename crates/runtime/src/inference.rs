//! Central inference: one thread runs the policy for every worker, batching their requests
//! into one forward pass. Requests and replies are small indices on bounded queues; the
//! observations and actions stay in preallocated per-(worker, group) slots.
//!
//! Each worker splits its envs into two groups and keeps one group's request in flight
//! while it steps the other (double buffering), so neither the worker nor the inference
//! thread waits on the other when both are busy.

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use rand::SeedableRng;
use strata_nn::{ActorCritic, Memory, SampleRng};

use crate::telemetry::{Activity, Heartbeat};
use crate::RunConfig;
use strata_config::build_model;
use strata_learner::{MemoryPolicyStore, StoreError};

/// One group's request and answer.
pub struct InferenceSlot {
    /// Observations to act on (`rows x obs_dim`).
    pub obs: Vec<f32>,
    /// Sampled actions.
    pub actions: Vec<f32>,
    /// Their log-probs.
    pub log_probs: Vec<f32>,
    /// Values of the observations.
    pub values: Vec<f32>,
    /// Which policy version must answer.
    pub version: u64,
    /// The group's sampling RNG, travelling with its request.
    pub rng: SampleRng,
    /// The group's gSDE exploration matrices for this fragment (empty without gSDE).
    pub sde_noise: Vec<f32>,
    /// A recurrent policy's state of each env (`rows x state`), sent with the request
    /// and advanced by one step in the answer (empty for a feed-forward policy).
    pub state: Vec<f32>,
    /// Whether each env's step starts an episode (empty for a feed-forward policy).
    pub starts: Vec<bool>,
    /// The requesting worker's incarnation.
    pub incarnation: u64,
}

/// `(worker, group)`: which slot holds a request.
pub type Request = (usize, usize);

/// Per worker, where the inference thread posts `(group, incarnation)` answers; a
/// restarted worker's entry is replaced.
pub type ReplyQueues = Arc<Mutex<Vec<SyncSender<(usize, u64)>>>>;

/// The slots of every (worker, group), allocated once.
pub struct InferenceSlots {
    slots: Vec<Mutex<InferenceSlot>>,
    groups: usize,
}

impl InferenceSlots {
    /// Slots for `workers x groups` groups of `rows` envs.
    pub fn new(
        workers: usize,
        groups: usize,
        rows: usize,
        obs_dim: usize,
        action_dim: usize,
    ) -> Self {
        InferenceSlots {
            slots: (0..workers * groups)
                .map(|_| {
                    Mutex::new(InferenceSlot {
                        obs: vec![0.0; rows * obs_dim],
                        actions: vec![0.0; rows * action_dim],
                        log_probs: vec![0.0; rows],
                        values: vec![0.0; rows],
                        version: 0,
                        rng: SampleRng::seed_from_u64(0),
                        sde_noise: Vec::new(),
                        state: Vec::new(),
                        starts: Vec::new(),
                        incarnation: 0,
                    })
                })
                .collect(),
            groups,
        }
    }

    /// Locks the slot of `(worker, group)`.
    pub fn lock(&self, (worker, group): Request) -> parking_lot::MutexGuard<'_, InferenceSlot> {
        self.slots[worker * self.groups + group].lock()
    }
}

/// A worker's side of central inference.
pub struct InferenceClient {
    /// The worker.
    pub worker: usize,
    /// Its incarnation (replies for older ones are ignored).
    pub incarnation: u64,
    /// Shared slots.
    pub slots: Arc<InferenceSlots>,
    /// Worker -> inference thread (capacity: every group of every worker).
    pub requests: SyncSender<Request>,
    /// Inference thread -> this worker: `(group, incarnation)` answered (capacity: groups).
    pub replies: Receiver<(usize, u64)>,
    /// Answers that arrived while another group was awaited (bit per group).
    pub early: std::cell::Cell<u8>,
    /// Groups with a request posted and not yet answered (bit per group).
    pub outstanding: std::cell::Cell<u8>,
}

impl InferenceClient {
    /// Posts a request for `group`: its observations, the version that must answer, the
    /// group's RNG (moved into the slot until the answer) and a recurrent policy's states
    /// and episode-start flags of its envs (empty for a feed-forward one).
    ///
    /// # Errors
    /// When the inference thread is gone.
    pub fn request(
        &self,
        group: usize,
        obs: &[f32],
        version: u64,
        rng: &SampleRng,
        sde_noise: &[f32],
        (state, starts): (&[f32], &[bool]),
    ) -> Result<(), InferenceError> {
        {
            let mut slot = self.slots.lock((self.worker, group));
            slot.obs.copy_from_slice(obs);
            slot.version = version;
            slot.rng = rng.clone();
            slot.sde_noise.clear();
            slot.sde_noise.extend_from_slice(sde_noise);
            slot.state.clear();
            slot.state.extend_from_slice(state);
            slot.starts.clear();
            slot.starts.extend_from_slice(starts);
            slot.incarnation = self.incarnation;
        }
        // At most one request per group is outstanding: the queue has room for all.
        self.outstanding
            .set(self.outstanding.get() | (1u8 << group));
        self.requests
            .try_send((self.worker, group))
            .map_err(|_| InferenceError::Gone)
    }

    /// Waits for `group`'s answer (logging every `timeout`), or returns `Ok(false)` when
    /// `give_up` says to stop waiting.
    ///
    /// # Errors
    /// When the inference thread is gone.
    pub fn wait(
        &self,
        group: usize,
        timeout: Duration,
        heartbeat: &Heartbeat,
        mut give_up: impl FnMut() -> bool,
    ) -> Result<bool, InferenceError> {
        let started = std::time::Instant::now();
        let mut next_report = timeout;
        let bit = 1u8 << group;
        loop {
            if self.early.get() & bit != 0 {
                self.early.set(self.early.get() & !bit);
                return Ok(true);
            }
            match self
                .replies
                .recv_timeout(timeout.min(Duration::from_millis(200)))
            {
                Ok((g, incarnation)) if incarnation == self.incarnation => {
                    let answered = 1u8 << g;
                    if self.outstanding.get() & answered == 0 {
                        return Err(InferenceError::AnsweredTwice(g));
                    }
                    self.outstanding.set(self.outstanding.get() & !answered);
                    // Kept for its turn when it answers the other group.
                    self.early.set(self.early.get() | answered);
                }
                Ok(_) => {} // a stale answer for an earlier incarnation
                Err(RecvTimeoutError::Timeout) => {
                    heartbeat.beat(Activity::WaitingForPolicy);
                    if give_up() {
                        return Ok(false);
                    }
                    if started.elapsed() >= next_report {
                        tracing::warn!(
                            component = %format!("worker-{}", self.worker),
                            group,
                            waited = ?started.elapsed(),
                            "still waiting for actions from the inference thread"
                        );
                        next_report += timeout;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Err(InferenceError::Gone),
            }
        }
    }
}

/// Why central inference failed.
#[derive(Debug, thiserror::Error)]
pub enum InferenceError {
    /// The inference thread is gone.
    #[error("the inference thread stopped")]
    Gone,
    /// A reply for a group that had no request out (a bug, reported rather than hidden).
    #[error("inference answered group {0} twice")]
    AnsweredTwice(usize),
    /// A policy version could not be adopted.
    #[error("policy: {0}")]
    Policy(#[from] StoreError),
    /// A model could not be built or loaded.
    #[error(transparent)]
    Runtime(#[from] crate::RuntimeError),
    /// The model refused a version's parameters.
    #[error("model: {0}")]
    Model(#[from] strata_nn::NnError),
    /// The env is unknown.
    #[error(transparent)]
    Env(#[from] strata_env::EnvError),
}

impl From<strata_config::ConfigError> for InferenceError {
    /// A config that could not build what it asks for: as the run reports it.
    fn from(e: strata_config::ConfigError) -> Self {
        InferenceError::Runtime(e.into())
    }
}

/// Everything the inference thread is given.
pub struct ServerSetup {
    /// The run's config (to build models).
    pub config: Arc<RunConfig>,
    /// Shared slots.
    pub slots: Arc<InferenceSlots>,
    /// Published policies.
    pub store: Arc<MemoryPolicyStore>,
    /// Requests from every worker.
    pub requests: Receiver<Request>,
    /// Reply queue per worker, replaced when a worker restarts.
    pub replies: ReplyQueues,
    /// Its pulse.
    pub heartbeat: Arc<Heartbeat>,
    /// How long to wait for a policy version before logging.
    pub wait_timeout: Duration,
    /// Models kept (one per policy version in use).
    pub versions_kept: usize,
}

/// Starts the inference thread.
///
/// # Errors
/// When the OS cannot start a thread.
pub fn spawn_server(setup: ServerSetup) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("strata-inference".into())
        .spawn(move || {
            if let Err(error) = serve(setup) {
                tracing::error!(component = "inference", %error, "inference thread stopped");
            }
        })
}

fn serve(s: ServerSetup) -> Result<(), InferenceError> {
    let obs_dim = strata_config::env_spec(&s.config)?.obs_dim();
    let mut models: Vec<(u64, Box<dyn ActorCritic>)> = Vec::with_capacity(s.versions_kept);
    // Each request with the version it asked for, read once on arrival: a worker answered
    // early in this round may post its next request (with a newer version) to the same slot
    // before the round ends, and re-reading the slot would answer that one twice.
    let mut pending: Vec<(Request, u64)> = Vec::new();
    let mut batch_obs = Vec::new();
    let mut batch_noise = Vec::new();
    let (mut batch_state, mut batch_starts) = (Vec::new(), Vec::new());
    let mut parts = Vec::new();
    let mut rngs: Vec<SampleRng> = Vec::new();
    let (mut actions, mut log_probs, mut values) = (Vec::new(), Vec::new(), Vec::new());
    let (mut versions, mut requests): (Vec<u64>, Vec<Request>) = (Vec::new(), Vec::new());
    let pins = &s.config.runtime.pin_cpus;
    if !pins.is_empty() {
        strata_learner::pin_current_thread(
            pins[s.config.runtime.workers % pins.len()],
            "inference",
        );
    }
    // Runs until every sender of requests is gone (the workers and the wiring's copy)
    // or, with a worker stuck in an env, until the store closes.
    loop {
        s.heartbeat.beat(Activity::WaitingForFragments);
        match s.requests.recv_timeout(Duration::from_millis(200)) {
            Ok(first) => pending.push((first, s.slots.lock(first).version)),
            // A worker stuck in an env keeps its sender alive: the closed store ends the
            // thread then.
            Err(RecvTimeoutError::Timeout) if s.store.is_closed() => return Ok(()),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        // Batch whatever else is waiting.
        while let Ok(r) = s.requests.try_recv() {
            pending.push((r, s.slots.lock(r).version));
        }
        s.heartbeat.beat(Activity::Collecting);
        versions.clear();
        versions.extend(pending.iter().map(|(_, v)| *v));
        versions.sort_unstable();
        versions.dedup();
        for &version in &versions {
            // The model for this version: cached, or loaded from the store and verified.
            let index = match models.iter().position(|(v, _)| *v == version) {
                Some(i) => i,
                None => {
                    let policy = match s.store.wait_for(version, true, s.wait_timeout) {
                        Ok(p) => p,
                        Err(StoreError::Closed) => return Ok(()), // shutting down
                        Err(e) => return Err(e.into()),
                    };
                    policy.verify()?;
                    let mut model = if models.len() < s.versions_kept {
                        build_model(&s.config)?
                    } else {
                        // Reuse the oldest version's model.
                        let oldest = (0..models.len())
                            .min_by_key(|i| models[*i].0)
                            .expect("non-empty");
                        models.swap_remove(oldest).1
                    };
                    model.set_flat_params(&policy.params)?;
                    models.push((version, model));
                    models.len() - 1
                }
            };
            requests.clear();
            requests.extend(
                pending
                    .iter()
                    .filter(|(_, v)| *v == version)
                    .map(|(r, _)| *r),
            );
            // Row results of a matrix product can depend on the batch's shape, so
            // deterministic mode answers each request on its own.
            let per_call = if s.config.train.deterministic {
                1
            } else {
                requests.len()
            };
            for batch in requests.chunks(per_call) {
                batch_obs.clear();
                batch_noise.clear();
                batch_state.clear();
                batch_starts.clear();
                parts.clear();
                rngs.clear();
                for r in batch {
                    let slot = s.slots.lock(*r);
                    batch_obs.extend_from_slice(&slot.obs);
                    batch_noise.extend_from_slice(&slot.sde_noise);
                    batch_state.extend_from_slice(&slot.state);
                    batch_starts.extend_from_slice(&slot.starts);
                    parts.push(slot.obs.len() / obs_dim);
                    rngs.push(slot.rng.clone());
                }
                let rows: usize = parts.iter().sum();
                let action_dim = {
                    let slot = s.slots.lock(batch[0]);
                    slot.actions.len() / (slot.obs.len() / obs_dim).max(1)
                };
                actions.resize(rows * action_dim, 0.0);
                log_probs.resize(rows, 0.0);
                values.resize(rows, 0.0);
                let memory = Memory {
                    state: &mut batch_state,
                    starts: &batch_starts,
                };
                models[index].1.act_split(
                    &batch_obs,
                    &parts,
                    memory,
                    &mut rngs,
                    &batch_noise,
                    &mut actions,
                    &mut log_probs,
                    &mut values,
                );
                let replies = s.replies.lock();
                let mut row = 0;
                for (k, r) in batch.iter().enumerate() {
                    let len = parts[k];
                    let incarnation = {
                        let mut slot = s.slots.lock(*r);
                        slot.actions
                            .copy_from_slice(&actions[row * action_dim..(row + len) * action_dim]);
                        slot.log_probs.copy_from_slice(&log_probs[row..row + len]);
                        slot.values.copy_from_slice(&values[row..row + len]);
                        let width = slot.state.len() / len.max(1);
                        slot.state
                            .copy_from_slice(&batch_state[row * width..(row + len) * width]);
                        slot.rng = rngs[k].clone();
                        slot.incarnation
                    };
                    // A worker that was replaced no longer listens; that is fine.
                    let _ = replies[r.0].try_send((r.1, incarnation));
                    row += len;
                }
            }
        }
        pending.clear();
    }
}
