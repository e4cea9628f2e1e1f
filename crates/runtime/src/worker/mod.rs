//! The rollout worker: a thread stepping its own envs with its own copy of the policy,
//! writing fragments straight into its slots of the experience buffer. What it says to its
//! host is in `protocol`; how a fragment is filled in `fill`; a recurrent policy's memory
//! of the envs in `memory`; exploration noise in `exploration`.

mod exploration;
mod fill;
mod memory;
mod protocol;

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use rand::SeedableRng;
use strata_env::{derive_seed, StepBatch, Stream, VecEnv};
use strata_nn::{ActorCritic, SampleRng};

use crate::buffer::{FillTime, WorkerState};
use crate::inference::InferenceClient;
use crate::telemetry::Activity;
use exploration::Exploration;
use fill::{fill_central, fill_local, StepContext, WallClock};
use memory::EnvMemory;
pub use protocol::{Holding, WorkerCommand, WorkerError, WorkerEvent, WorkerSetup};
use strata_config::{build_envs, build_model};
use strata_learner::{MemoryPolicyStore, PublishedPolicy, StoreError};

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
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                match own_thread_pool(setup.config.runtime.workers) {
                    Some(pool) => pool.install(|| run(setup)),
                    None => run(setup),
                }
            }));
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

/// A pool of this thread alone, for a worker that has a core's share or less of the
/// machine: its model's parallel passes (a CNN's) then run here, in order, instead of
/// handing each step's few images to rayon's shared pool, whose threads every worker and
/// the env processes contend for. With cores to spare the worker keeps the shared pool.
/// Nothing in a worker spawns rayon work it then waits for outside a parallel call (this
/// thread never runs rayon's loop on its own); rayon keeps such a pool's registry, a few
/// KB, after the worker stops, once per worker start.
fn own_thread_pool(workers: usize) -> Option<rayon::ThreadPool> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if workers < cores {
        return None;
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
        .ok()
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
    let started = Instant::now();
    let pins = &config.runtime.pin_cpus;
    if !pins.is_empty() {
        strata_learner::pin_current_thread(pins[id % pins.len()], "worker");
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
    // gSDE: each env's exploration matrix (empty without gSDE).
    let mut exploration = Exploration::new(&config, groups, gm)?;
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
            exploration.resume(&state.sde_noise);
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
        sde: exploration.schedule(),
    };
    // Building the envs (for Gymnasium envs, starting their processes) and the model, and
    // restarting env processes after a failure: reported with the next fragment handed over.
    let mut startup = started.elapsed().as_secs_f64();
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
        let adopting = Instant::now();
        adopt(&policy, &mut adopted, &mut actor, &mut envs, &store, id)?;
        let adopting = adopting.elapsed().as_secs_f64();
        let mut f = buffer.lock(slot);
        f.version = policy.version;
        f.index = fragments;
        f.episodes.clear();
        f.provenance.recorded = record_provenance;
        exploration.begin_fragment(&mut rngs);
        let mut timing = FillTime {
            startup,
            copies: adopting,
            ..FillTime::default()
        };
        let outcome = match &mut actor {
            Actor::Local(model) => fill_local(
                &ctx,
                &mut f,
                model.as_mut(),
                &mut envs[0],
                &mut batches[0],
                &mut obs[0],
                (&mut rngs[0], &mut exploration.noise[0]),
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
                (&mut rngs, &mut exploration.noise),
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
                let reviving = Instant::now();
                let revived = revive_envs(&mut envs, &mut obs, seed, od)?;
                startup += reviving.elapsed().as_secs_f64();
                if !revived {
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
        let closing = Instant::now();
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
            sde_noise: exploration.noise.clone(),
            memory: memory.state.clone(),
            starts: memory.starts.clone(),
            fragments,
        });
        // The fragment's end: its next observations and the worker's state, as copies.
        timing.copies += closing.elapsed().as_secs_f64();
        f.time = timing;
        startup = 0.0;
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
