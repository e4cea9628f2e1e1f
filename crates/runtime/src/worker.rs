//! The rollout worker: a thread stepping its own envs with its own copy of the policy,
//! writing fragments straight into its slots of the experience buffer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use strata_env::{derive_seed, StepBatch, Stream, VecEnv};
use strata_nn::SampleRng;
use strata_nn::{standard_normals, ActorCritic, Memory, SdeHold};

use crate::buffer::{ExperienceBuffer, Fragment, SlotId, WorkerState};
use crate::factory::{build_envs, build_model, sde_noise_len};
use crate::inference::InferenceClient;
use crate::policy_store::{MemoryPolicyStore, PublishedPolicy, StoreError};
use crate::telemetry::{Activity, Heartbeat};
use crate::RunConfig;

/// Learner -> worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerCommand {
    /// Abandon the current fragment and stop.
    Exit,
}

/// Why a worker stopped; the learner restarts it and records its fragment invalid.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Its env failed (NaN, bad action).
    #[error(transparent)]
    Env(#[from] strata_env::EnvError),
    /// A policy version could not be adopted (corrupt, missing).
    #[error("policy: {0}")]
    Policy(#[from] StoreError),
    /// The model refused a version's parameters.
    #[error("model: {0}")]
    Model(#[from] strata_nn::NnError),
    /// Its envs or model could not be built from the config.
    #[error(transparent)]
    Runtime(#[from] crate::RuntimeError),
    /// A saved state that does not fit the config.
    #[error("{0}")]
    State(String),
    /// Central inference failed.
    #[error("inference: {0}")]
    Inference(#[from] crate::inference::InferenceError),
    /// It panicked.
    #[error("panicked: {0}")]
    Panic(String),
    /// It runs in another process, which failed or fell silent (what its transport says).
    #[error("worker process: {0}")]
    Remote(String),
}

/// Worker -> learner.
#[derive(Debug)]
pub enum WorkerEvent {
    /// A fragment is complete in `slot`.
    FragmentReady {
        /// Where it is.
        slot: SlotId,
        /// The worker's fragment counter for it.
        index: u64,
        /// Which incarnation of the worker wrote it (restarts increment it).
        incarnation: u64,
    },
    /// The worker stopped mid-fragment on `Exit`; the slot is free again.
    Abandoned {
        /// The slot it held.
        slot: SlotId,
        /// Its incarnation.
        incarnation: u64,
    },
    /// The fragment numbered `index` was lost to an env process that failed; the worker
    /// restarted that process alone, reset its envs and collects the same number again.
    /// The slot is free again.
    Lost {
        /// Which worker.
        worker: usize,
        /// The slot it was writing.
        slot: SlotId,
        /// The fragment number lost (and collected anew).
        index: u64,
        /// Its incarnation.
        incarnation: u64,
        /// What failed.
        error: WorkerError,
    },
    /// The worker stopped on an error (env NaN, panic, bad policy); the learner decides.
    Failed {
        /// Which worker.
        worker: usize,
        /// Its incarnation.
        incarnation: u64,
        /// What went wrong.
        error: WorkerError,
        /// The slot it was writing, now free.
        holding: Option<SlotId>,
    },
}

/// Which slot a worker is writing (`index + 1`, or 0), readable by the learner.
#[derive(Debug, Default)]
pub struct Holding(AtomicUsize);

impl Holding {
    /// Records the slot being written (none between fragments).
    pub fn set(&self, slot: Option<SlotId>) {
        self.0
            .store(slot.map_or(0, |s| s.index + 1), Ordering::Release);
    }

    /// The slot held, if any, for worker `worker`.
    pub fn get(&self, worker: usize) -> Option<SlotId> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            i => Some(SlotId {
                worker,
                index: i - 1,
            }),
        }
    }
}

/// Everything a worker thread is given; built in one place by the trainer.
pub struct WorkerSetup {
    /// Worker id (also fixes which envs it owns).
    pub id: usize,
    /// The run's config.
    pub config: Arc<RunConfig>,
    /// Shared fragment slots.
    pub buffer: Arc<ExperienceBuffer>,
    /// Published policies.
    pub store: Arc<MemoryPolicyStore>,
    /// Slots handed back by the learner (capacity: the worker's slot count).
    pub free_slots: Receiver<SlotId>,
    /// Completed fragments (capacity: all slots, so a send never blocks).
    pub events: SyncSender<WorkerEvent>,
    /// Commands from the learner.
    pub commands: Receiver<WorkerCommand>,
    /// Where to start (resume); fresh envs when `None`.
    pub start: Option<WorkerState>,
    /// Fragment `u` is collected with a version of at least `u - max_lag`.
    pub max_lag: u64,
    /// Adopt exactly version `u - max_lag` (deterministic mode) rather than the newest
    /// published once a slot is in hand.
    pub exact: bool,
    /// How long a blocking wait lasts before it is logged.
    pub wait_timeout: Duration,
    /// Incarnation: 0 at start, +1 per restart.
    pub incarnation: u64,
    /// Apply the configured fault injection (never for a restarted worker).
    pub with_fault: bool,
    /// This worker's pulse.
    pub heartbeat: Arc<Heartbeat>,
    /// The slot being written, for recovery after a failure.
    pub holding: Arc<Holding>,
    /// Number of the first fragment to produce (a replacement continues the count).
    pub first_fragment: u64,
    /// Central inference, when configured; otherwise the worker runs its own model copy.
    pub inference: Option<InferenceClient>,
}

/// Why a worker stopped without an error.
enum Stop {
    Exit,
    Closed,
}

/// Starts the worker thread.
///
/// # Errors
/// When the OS cannot start a thread.
pub fn spawn(setup: WorkerSetup) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("strata-worker-{}", setup.id))
        .spawn(move || {
            let (id, incarnation, events) = (setup.id, setup.incarnation, setup.events.clone());
            let (heartbeat, holding) = (Arc::clone(&setup.heartbeat), Arc::clone(&setup.holding));
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(setup)));
            heartbeat.beat(Activity::Stopped);
            let error = match outcome {
                Ok(Ok(Stop::Exit | Stop::Closed)) => return,
                Ok(Err(e)) => e,
                Err(panic) => WorkerError::Panic(
                    panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("(no message)")
                        .to_string(),
                ),
            };
            tracing::error!(component = %format!("worker-{id}"), incarnation, %error, "worker failed");
            // The learner may be gone already; then nobody needs to hear it.
            let holding = holding.get(id);
            let _ = events.try_send(WorkerEvent::Failed { worker: id, incarnation, error, holding });
        })
}

fn exit_requested(commands: &Receiver<WorkerCommand>) -> bool {
    matches!(
        commands.try_recv(),
        Ok(WorkerCommand::Exit) | Err(TryRecvError::Disconnected)
    )
}

/// How a worker gets its actions.
enum Actor {
    /// Its own copy of the policy.
    Local(Box<dyn ActorCritic>),
    /// The central inference thread.
    Central(InferenceClient),
}

fn run(setup: WorkerSetup) -> Result<Stop, WorkerError> {
    let WorkerSetup {
        id,
        config,
        buffer,
        store,
        free_slots,
        events,
        commands,
        start,
        max_lag,
        exact,
        wait_timeout,
        incarnation,
        with_fault,
        heartbeat,
        holding,
        first_fragment,
        inference,
    } = setup;
    let pins = &config.runtime.pin_cpus;
    if !pins.is_empty() {
        crate::telemetry::pin_current_thread(pins[id % pins.len()], "worker");
    }
    let m = config.env.num_envs / config.runtime.workers;
    let groups = config.groups_per_worker();
    let gm = m / groups;
    let mut envs: Vec<Box<dyn VecEnv>> = (0..groups)
        .map(|g| build_envs(&config, gm, with_fault && g == 0))
        .collect::<Result<_, _>>()?;
    let mut actor = match inference {
        Some(client) => Actor::Central(client),
        None => Actor::Local(build_model(&config)?),
    };
    let spec = envs[0].spec().clone();
    let (od, ad) = (spec.obs_dim(), spec.action_dim());
    let record_provenance = config.ledger.enabled;
    let mut batches: Vec<StepBatch> = (0..groups)
        .map(|_| {
            let b = StepBatch::new(&spec, gm);
            if record_provenance {
                b.with_exec(&spec)
            } else {
                b
            }
        })
        .collect();
    // gSDE: each env's exploration matrix, drawn from its group's RNG and held for a
    // fragment or an episode (empty without gSDE); a resumed worker continues with the
    // matrices it had.
    let sde_len = sde_noise_len(&config)?;
    let sde_hold = config.network.sde_hold;
    let mut sde_noise: Vec<Vec<f32>> = vec![vec![0.0; gm * sde_len]; groups];
    let mut sde_drawn = false;
    // A recurrent policy's state per env: carried across fragments and policy versions
    // (it is the envs' activations, not the policy's weights), zeroed when an episode
    // starts.
    let mut memory = EnvMemory::fresh(m, config.network.state_len());
    let (mut obs, mut rngs, mut fragments): (Vec<Vec<f32>>, Vec<SampleRng>, u64) = match start {
        Some(state) => {
            if state.envs.len() != groups || state.rngs.len() != groups {
                return Err(WorkerError::State(format!(
                    "saved state has {} env groups, the config {groups}",
                    state.envs.len()
                )));
            }
            for (e, snap) in envs.iter_mut().zip(&state.envs) {
                e.restore(snap)?;
            }
            if state
                .sde_noise
                .iter()
                .map(Vec::len)
                .eq(sde_noise.iter().map(Vec::len))
            {
                sde_noise.clone_from(&state.sde_noise);
                sde_drawn = sde_len > 0;
            }
            let mut obs: Vec<Vec<f32>> = state.obs.chunks(gm * od).map(<[f32]>::to_vec).collect();
            // Envs whose state lives in another process restart on fresh episodes: the
            // policy acts on what they show now.
            for (e, o) in envs.iter_mut().zip(obs.iter_mut()) {
                if !e.restores_exactly() {
                    for (i, row) in o.chunks_exact_mut(od).enumerate() {
                        e.reobserve(i, row);
                    }
                }
            }
            if state.memory.len() == memory.state.len() && state.starts.len() == m {
                memory.state.clone_from(&state.memory);
                memory.starts.clone_from(&state.starts);
            }
            for (g, e) in envs.iter().enumerate() {
                if !e.restores_exactly() {
                    memory.restart(g * gm..(g + 1) * gm);
                }
            }
            (obs, state.rngs, state.fragments)
        }
        None => {
            // Fresh envs. A replacement gets seeds of its own incarnation and continues the
            // fragment numbering.
            let (worker, run_seed) = (id as u64, config.train.seed);
            let envs_seed = Stream::WorkerEnvs {
                worker,
                incarnation,
            }
            .seed(run_seed);
            let actions_seed = Stream::WorkerActions {
                worker,
                incarnation,
            }
            .seed(run_seed);
            let mut obs = Vec::with_capacity(groups);
            let mut rngs = Vec::with_capacity(groups);
            for (g, e) in envs.iter_mut().enumerate() {
                e.reset(derive_seed(envs_seed, g as u64), &mut batches[g].obs)?;
                obs.push(batches[g].obs.clone());
                rngs.push(SampleRng::seed_from_u64(derive_seed(
                    actions_seed,
                    g as u64,
                )));
            }
            (obs, rngs, first_fragment)
        }
    };
    let mut adopted: Option<u64> = None;
    // Env-process failures this worker mended in place (seeds the fresh episodes).
    let mut recoveries: u64 = 0;
    let steps = config.ppo.n_steps;
    let ctx = StepContext {
        buffer: &buffer,
        m,
        gm,
        od,
        sd: spec.summary_dim(),
        ad,
        heartbeat: &heartbeat,
        commands: &commands,
        id,
        store: &store,
        wall: WallClock::now(),
        sde_len,
        sde_hold,
        sde_every: config.network.sde_sample_freq,
    };
    loop {
        if exit_requested(&commands) {
            return Ok(Stop::Exit);
        }
        // A policy at the fragment boundary: at least version u - lag.
        let wanted = fragments.saturating_sub(max_lag);
        heartbeat.beat(Activity::WaitingForPolicy);
        let policy = match store.wait_for(wanted, exact, wait_timeout) {
            Ok(p) => p,
            Err(StoreError::Timeout { waited, .. }) => {
                tracing::warn!(component = %format!("worker-{id}"), wanted, ?waited, "still waiting for a policy version");
                continue;
            }
            Err(StoreError::Closed) => return Ok(Stop::Closed),
            Err(e) => return Err(e.into()),
        };
        // Back-pressure: a free slot, handed back by the learner.
        heartbeat.beat(Activity::WaitingForSlot);
        let slot = match free_slots.recv_timeout(wait_timeout) {
            Ok(slot) => slot,
            Err(RecvTimeoutError::Timeout) => {
                tracing::warn!(component = %format!("worker-{id}"), waited = ?wait_timeout, "still waiting for a free buffer slot");
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(Stop::Closed),
        };
        holding.set(Some(slot));
        // Adopted once the slot is in hand: the learner may have published while it was on
        // its way, and the newest is the freshest policy this fragment can have.
        let policy = if exact { policy } else { store.latest() };
        adopt(&policy, &mut adopted, &mut actor, &mut envs, &store, id)?;
        let mut f = buffer.lock(slot);
        f.version = policy.version;
        f.index = fragments;
        f.episodes.clear();
        f.provenance.recorded = record_provenance;
        if !sde_drawn || sde_hold == SdeHold::Fragment {
            for (noise, rng) in sde_noise.iter_mut().zip(rngs.iter_mut()) {
                standard_normals(noise, rng);
            }
            sde_drawn = true;
        }
        let mut timing = (0.0, 0.0);
        let outcome = match &mut actor {
            Actor::Local(model) => fill_local(
                &ctx,
                &mut f,
                model.as_mut(),
                &mut envs[0],
                &mut batches[0],
                &mut obs[0],
                (&mut rngs[0], &mut sde_noise[0]),
                &mut memory,
                steps,
                &mut timing,
            ),
            Actor::Central(client) => fill_central(
                &ctx,
                &mut f,
                client,
                &mut envs,
                &mut batches,
                &mut obs,
                (&mut rngs, &mut sde_noise),
                &mut memory,
                steps,
                policy.version,
                wait_timeout,
                &mut timing,
            ),
        };
        let filled = match outcome {
            Ok(filled) => filled,
            // Central inference may hold requests of this fragment in flight: there the
            // worker is replaced whole, as for any other failure.
            Err(WorkerError::Env(error)) if matches!(actor, Actor::Local(_)) => {
                // An env process failed: where its vector can restart that process alone
                // (the healthy ones keep running), the fragment is lost, the envs start
                // fresh episodes and the worker goes on; else the worker fails whole.
                drop(f);
                recoveries += 1;
                let seed = Stream::EnvRecovery {
                    worker: id as u64,
                    incarnation,
                    recovery: recoveries,
                }
                .seed(config.train.seed);
                heartbeat.beat(Activity::Starting);
                if !revive_envs(&mut envs, &mut obs, seed, od)? {
                    holding.set(None);
                    return Err(WorkerError::Env(error));
                }
                memory.restart(0..m);
                holding.set(None);
                let lost = WorkerEvent::Lost {
                    worker: id,
                    slot,
                    index: fragments,
                    incarnation,
                    error: WorkerError::Env(error),
                };
                if events.send(lost).is_err() {
                    return Ok(Stop::Closed);
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if !filled {
            // Exit requested mid-fragment: abandoned, never handed over; the slot goes back.
            drop(f);
            holding.set(None);
            let _ = events.try_send(WorkerEvent::Abandoned { slot, incarnation });
            return Ok(Stop::Exit);
        }
        for (dst, o) in f.next_obs.chunks_exact_mut(gm * od).zip(&obs) {
            dst.copy_from_slice(o);
        }
        let mut delta = envs[0].take_normalizer_delta();
        for e in envs.iter_mut().skip(1) {
            delta.merge(&e.take_normalizer_delta());
        }
        f.stats_delta = delta;
        fragments += 1;
        f.end_state = Some(WorkerState {
            envs: envs.iter().map(|e| e.snapshot()).collect(),
            obs: f.next_obs.clone(),
            rngs: rngs.clone(),
            sde_noise: sde_noise.clone(),
            memory: memory.state.clone(),
            starts: memory.starts.clone(),
            fragments,
        });
        (f.inference_seconds, f.env_seconds) = timing;
        drop(f);
        holding.set(None);
        buffer.mark_ready(slot);
        // Capacity equals the number of slots and we hold one: this send cannot block.
        let ready = WorkerEvent::FragmentReady {
            slot,
            index: fragments - 1,
            incarnation,
        };
        if events.send(ready).is_err() {
            return Ok(Stop::Closed);
        }
    }
}

/// Switches the worker to `policy` unless it already samples with it: the actor's
/// parameters, the envs' observation normaliser, and the store's record of what it samples.
fn adopt(
    policy: &PublishedPolicy,
    adopted: &mut Option<u64>,
    actor: &mut Actor,
    envs: &mut [Box<dyn VecEnv>],
    store: &MemoryPolicyStore,
    id: usize,
) -> Result<(), WorkerError> {
    if *adopted == Some(policy.version) {
        return Ok(());
    }
    policy.verify()?;
    if let Actor::Local(model) = actor {
        model.set_flat_params(&policy.params)?;
    }
    for e in envs.iter_mut() {
        e.set_normalizer(&policy.normalizer)?;
    }
    store.ack(id, policy.version);
    *adopted = Some(policy.version);
    Ok(())
}

/// Mends every failed vector of a worker in place ([`VecEnv::revive`]) and resets each
/// (fresh episodes seeded from `seed`), writing their observations into `obs`. Returns
/// `false` when some vector cannot mend itself (the worker is then replaced whole).
fn revive_envs(
    envs: &mut [Box<dyn VecEnv>],
    obs: &mut [Vec<f32>],
    seed: u64,
    od: usize,
) -> Result<bool, WorkerError> {
    for (g, (e, o)) in envs.iter_mut().zip(obs.iter_mut()).enumerate() {
        if !e.revive()? {
            return Ok(false);
        }
        debug_assert_eq!(o.len(), e.num_envs() * od);
        e.reset(derive_seed(seed, g as u64), o)?;
    }
    Ok(true)
}

/// A recurrent policy's memory of a worker's envs: each env's state for its next step
/// and whether that step starts an episode (both empty for a feed-forward policy).
struct EnvMemory {
    state: Vec<f32>,
    starts: Vec<bool>,
}

impl EnvMemory {
    /// Zero states for `envs` envs of `state_len` values, each about to start an episode.
    fn fresh(envs: usize, state_len: usize) -> Self {
        EnvMemory {
            state: vec![0.0; envs * state_len],
            starts: vec![true; if state_len > 0 { envs } else { 0 }],
        }
    }

    /// The envs in `envs` start fresh episodes.
    fn restart(&mut self, envs: std::ops::Range<usize>) {
        if !self.starts.is_empty() {
            self.starts[envs].fill(true);
        }
    }

    /// Copies every env's state and flag for step `t` into `f`, then lends them to the
    /// model.
    fn record(&mut self, f: &mut Fragment, t: usize) -> Memory<'_> {
        self.record_group(f, t, (0, self.starts.len()));
        Memory {
            state: &mut self.state,
            starts: &self.starts,
        }
    }

    /// After a step: an env whose episode ended starts a new one next.
    fn step_done(&mut self, batch: &StepBatch) {
        self.group_done(0, batch);
    }

    /// [`EnvMemory::step_done`] for the group of envs from `first` that `batch` stepped.
    fn group_done(&mut self, first: usize, batch: &StepBatch) {
        if self.starts.is_empty() {
            return;
        }
        for (i, start) in self.starts[first..first + batch.rewards.len()]
            .iter_mut()
            .enumerate()
        {
            *start = batch.terminated[i] || batch.truncated[i];
        }
    }

    /// Stores the states and flags of the `count` envs from `first` for step `t` into `f`
    /// (their rows `t * envs + first ..`) and returns them (for a central inference
    /// request).
    fn record_group(
        &self,
        f: &mut Fragment,
        t: usize,
        (first, count): (usize, usize),
    ) -> (&[f32], &[bool]) {
        if self.starts.is_empty() {
            return (&[], &[]);
        }
        let s = self.state.len() / self.starts.len();
        let row = t * self.starts.len() + first;
        let state = &self.state[first * s..(first + count) * s];
        let starts = &self.starts[first..first + count];
        f.states[row * s..(row + count) * s].copy_from_slice(state);
        f.starts[row..row + count].copy_from_slice(starts);
        (state, starts)
    }

    /// Central inference: the states the answer advanced, for the envs from `first`.
    fn answered(&mut self, first: usize, state: &[f32]) {
        if !self.starts.is_empty() {
            let s = self.state.len() / self.starts.len();
            self.state[first * s..first * s + state.len()].copy_from_slice(state);
        }
    }
}

/// What every step needs to know about its worker.
struct StepContext<'a> {
    buffer: &'a ExperienceBuffer,
    /// Envs of the worker.
    m: usize,
    /// Envs per group.
    gm: usize,
    od: usize,
    /// Values in an observation summary.
    sd: usize,
    ad: usize,
    heartbeat: &'a Heartbeat,
    commands: &'a Receiver<WorkerCommand>,
    id: usize,
    store: &'a MemoryPolicyStore,
    wall: WallClock,
    /// Standard normals in one env's gSDE exploration matrix (0 without gSDE).
    sde_len: usize,
    sde_hold: SdeHold,
    /// Steps between redraws of every gSDE matrix (0: as `sde_hold` says).
    sde_every: usize,
}

/// gSDE matrices after fragment step `t`: all drawn anew every `sde_every` steps (as SB3
/// draws them every `sde_sample_freq` steps of its rollout); held per episode, an env
/// whose episode just ended gets a new one.
fn redraw_sde(
    ctx: &StepContext<'_>,
    t: usize,
    batch: &StepBatch,
    noise: &mut [f32],
    rng: &mut SampleRng,
) {
    if ctx.sde_len == 0 {
        return;
    }
    if ctx.sde_every > 0 && (t + 1).is_multiple_of(ctx.sde_every) {
        standard_normals(noise, rng);
        return;
    }
    if ctx.sde_hold != SdeHold::Episode {
        return;
    }
    for (i, row) in noise.chunks_exact_mut(ctx.sde_len).enumerate() {
        if batch.terminated[i] || batch.truncated[i] {
            standard_normals(row, rng);
        }
    }
}

/// Wall-clock nanoseconds from a monotonic clock: one reading of each at start.
#[derive(Clone, Copy)]
struct WallClock {
    instant: Instant,
    epoch_ns: i64,
}

impl WallClock {
    fn now() -> Self {
        WallClock {
            instant: Instant::now(),
            epoch_ns: strata_ledger::now_ns(),
        }
    }

    fn ns(&self, at: Instant) -> i64 {
        let since = at.saturating_duration_since(self.instant).as_nanos();
        self.epoch_ns + i64::try_from(since).unwrap_or(i64::MAX)
    }
}

/// Copies group `g`'s step-`t` outcome (rewards, flags, final observations, episodes) into
/// the fragment's rows `t * m + g * gm ..`.
fn record_step(
    ctx: &StepContext<'_>,
    f: &mut Fragment,
    (t, g): (usize, usize),
    (issued, completed): (Instant, Instant),
    batch: &StepBatch,
) {
    let (rows, od) = (t * ctx.m + g * ctx.gm..t * ctx.m + (g + 1) * ctx.gm, ctx.od);
    let p = &mut f.provenance;
    p.issued_ns[rows.clone()].fill(ctx.wall.ns(issued));
    p.completed_ns[rows.clone()].fill(ctx.wall.ns(completed));
    p.sampler_version[rows.clone()].fill(ctx.store.newest_sampling());
    if let Some(exec) = &batch.exec {
        p.clock[rows.clone()].copy_from_slice(&batch.clock);
        p.obs_count[rows.clone()].copy_from_slice(&exec.ticks);
        p.obs_hash[rows.clone()].copy_from_slice(&exec.hash);
        let dims = rows.start * ctx.sd..rows.end * ctx.sd;
        p.obs_min[dims.clone()].copy_from_slice(&exec.min);
        p.obs_max[dims.clone()].copy_from_slice(&exec.max);
        p.obs_mean[dims].copy_from_slice(&exec.mean);
    }
    f.rewards[rows.clone()].copy_from_slice(&batch.rewards);
    f.terminated[rows.clone()].copy_from_slice(&batch.terminated);
    f.truncated[rows.clone()].copy_from_slice(&batch.truncated);
    ctx.buffer
        .check_write("rewards", &f.rewards, rows.start, &batch.rewards);
    for i in 0..ctx.gm {
        if batch.truncated[i] && !batch.terminated[i] {
            f.final_obs
                .write(rows.start + i, &batch.final_obs[i * od..(i + 1) * od]);
        }
    }
    f.episodes
        .extend(batch.episodes.iter().map(|e| strata_env::EpisodeEnd {
            env: e.env + g * ctx.gm,
            ..*e
        }));
}

/// In-worker inference: act on all envs, step them, `steps` times. `Ok(false)` when an
/// exit was requested mid-fragment.
#[allow(clippy::too_many_arguments)]
fn fill_local(
    ctx: &StepContext<'_>,
    f: &mut Fragment,
    model: &mut dyn ActorCritic,
    envs: &mut Box<dyn VecEnv>,
    batch: &mut StepBatch,
    obs: &mut [f32],
    (rng, sde_noise): (&mut SampleRng, &mut [f32]),
    memory: &mut EnvMemory,
    steps: usize,
    timing: &mut (f64, f64),
) -> Result<bool, WorkerError> {
    let (m, ad) = (ctx.m, ctx.ad);
    for t in 0..steps {
        ctx.heartbeat.beat(Activity::Collecting);
        if exit_requested(ctx.commands) {
            return Ok(false);
        }
        let (rows, arow) = (t * m..(t + 1) * m, t * m * ad..(t + 1) * m * ad);
        let t0 = Instant::now();
        f.obs.write(rows.start, obs);
        ctx.buffer.check_obs_write(&f.obs, rows.start, obs);
        let lent = memory.record(f, t);
        model.act(
            obs,
            lent,
            rng,
            sde_noise,
            &mut f.actions[arow.clone()],
            &mut f.log_probs[rows.clone()],
            &mut f.values[rows],
        );
        let t1 = Instant::now();
        envs.step(&f.actions[arow], batch)?;
        memory.step_done(batch);
        redraw_sde(ctx, t, batch, sde_noise, rng);
        let t2 = Instant::now();
        record_step(ctx, f, (t, 0), (t1, t2), batch);
        obs.copy_from_slice(&batch.obs);
        timing.0 += (t1 - t0).as_secs_f64();
        timing.1 += (t2 - t1).as_secs_f64();
    }
    Ok(true)
}

/// Central inference with double buffering: while one group's request is answered, the
/// other group steps. `Ok(false)` when an exit was requested mid-fragment.
#[allow(clippy::too_many_arguments)]
fn fill_central(
    ctx: &StepContext<'_>,
    f: &mut Fragment,
    client: &InferenceClient,
    envs: &mut [Box<dyn VecEnv>],
    batches: &mut [StepBatch],
    obs: &mut [Vec<f32>],
    (rngs, sde_noise): (&mut [SampleRng], &mut [Vec<f32>]),
    memory: &mut EnvMemory,
    steps: usize,
    version: u64,
    wait_timeout: Duration,
    timing: &mut (f64, f64),
) -> Result<bool, WorkerError> {
    let (m, gm, ad) = (ctx.m, ctx.gm, ctx.ad);
    let write_obs = |f: &mut Fragment, t: usize, g: usize, o: &[f32]| {
        let row = t * m + g * gm;
        f.obs.write(row, o);
        ctx.buffer.check_obs_write(&f.obs, row, o);
    };
    for g in 0..envs.len() {
        write_obs(f, 0, g, &obs[g]);
        let sent = memory.record_group(f, 0, (g * gm, gm));
        client
            .request(g, &obs[g], version, &rngs[g], &sde_noise[g], sent)
            .map_err(WorkerError::Inference)?;
    }
    for t in 0..steps {
        for g in 0..envs.len() {
            let t0 = Instant::now();
            let answered = client.wait(g, wait_timeout, ctx.heartbeat, || {
                exit_requested(ctx.commands)
            })?;
            if !answered {
                return Ok(false);
            }
            let row = t * m + g * gm;
            {
                let slot = client.slots.lock((ctx.id, g));
                f.actions[row * ad..(row + gm) * ad].copy_from_slice(&slot.actions);
                f.log_probs[row..row + gm].copy_from_slice(&slot.log_probs);
                f.values[row..row + gm].copy_from_slice(&slot.values);
                rngs[g] = slot.rng.clone();
                memory.answered(g * gm, &slot.state);
            }
            ctx.heartbeat.beat(Activity::Collecting);
            let t1 = Instant::now();
            envs[g].step(&f.actions[row * ad..(row + gm) * ad], &mut batches[g])?;
            memory.group_done(g * gm, &batches[g]);
            redraw_sde(ctx, t, &batches[g], &mut sde_noise[g], &mut rngs[g]);
            let t2 = Instant::now();
            record_step(ctx, f, (t, g), (t1, t2), &batches[g]);
            obs[g].copy_from_slice(&batches[g].obs);
            if t + 1 < steps {
                write_obs(f, t + 1, g, &obs[g]);
                let sent = memory.record_group(f, t + 1, (g * gm, gm));
                client.request(g, &obs[g], version, &rngs[g], &sde_noise[g], sent)?;
            }
            timing.0 += (t1 - t0).as_secs_f64();
            timing.1 += (t2 - t1).as_secs_f64();
        }
    }
    Ok(true)
}
