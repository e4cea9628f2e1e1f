//! The rollout worker: a thread stepping its own envs with its own copy of the policy,
//! writing fragments straight into its slots of the experience buffer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use strata_env::{derive_seed, StepBatch, VecEnv};
use strata_nn::SampleRng;

use crate::buffer::{ExperienceBuffer, SlotId, WorkerState};
use crate::policy_store::{PolicyStore, StoreError};
use crate::telemetry::{Activity, Heartbeat};
use crate::trainer::{build_envs, build_model};
use crate::RunConfig;

/// Learner -> worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerCommand {
    /// Abandon the current fragment and stop.
    Exit,
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
        generation: u64,
    },
    /// The worker stopped mid-fragment on `Exit`; the slot is free again.
    Abandoned {
        /// The slot it held.
        slot: SlotId,
        /// Its incarnation.
        generation: u64,
    },
    /// The worker stopped on an error (env NaN, panic, bad policy); the learner decides.
    Failed {
        /// Which worker.
        worker: usize,
        /// Its incarnation.
        generation: u64,
        /// What went wrong.
        error: String,
        /// The slot it was writing, now free.
        holding: Option<SlotId>,
    },
}

/// Which slot a worker is writing (`index + 1`, or 0), readable by the learner.
#[derive(Debug, Default)]
pub struct Holding(AtomicUsize);

impl Holding {
    fn set(&self, slot: Option<SlotId>) {
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
    pub store: Arc<PolicyStore>,
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
    /// Adopt exactly version `u - max_lag` (deterministic mode) rather than the newest.
    pub exact: bool,
    /// How long a blocking wait lasts before it is logged.
    pub wait_timeout: Duration,
    /// Incarnation: 0 at start, +1 per restart.
    pub generation: u64,
    /// Apply the configured fault injection (never for a restarted worker).
    pub with_fault: bool,
    /// This worker's pulse.
    pub heartbeat: Arc<Heartbeat>,
    /// The slot being written, for recovery after a failure.
    pub holding: Arc<Holding>,
    /// Number of the first fragment to produce (a replacement continues the count).
    pub first_fragment: u64,
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
            let (id, generation, events) = (setup.id, setup.generation, setup.events.clone());
            let (heartbeat, holding) = (Arc::clone(&setup.heartbeat), Arc::clone(&setup.holding));
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(setup)));
            heartbeat.beat(Activity::Stopped);
            let error = match outcome {
                Ok(Ok(Stop::Exit | Stop::Closed)) => return,
                Ok(Err(e)) => e,
                Err(panic) => format!(
                    "panicked: {}",
                    panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("(no message)")
                ),
            };
            tracing::error!(component = %format!("worker-{id}"), generation, %error, "worker failed");
            // The learner may be gone already; then nobody needs to hear it.
            let holding = holding.get(id);
            let _ = events.try_send(WorkerEvent::Failed { worker: id, generation, error, holding });
        })
}

fn exit_requested(commands: &Receiver<WorkerCommand>) -> bool {
    matches!(
        commands.try_recv(),
        Ok(WorkerCommand::Exit) | Err(TryRecvError::Disconnected)
    )
}

fn run(setup: WorkerSetup) -> Result<Stop, String> {
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
        generation,
        with_fault,
        heartbeat,
        holding,
        first_fragment,
    } = setup;
    let pins = &config.runtime.pin_cpus;
    if !pins.is_empty() {
        crate::telemetry::pin_current_thread(pins[id % pins.len()], "worker");
    }
    let envs_per_worker = config.env.num_envs / config.runtime.workers;
    let mut envs = build_envs(&config, envs_per_worker, with_fault).map_err(|e| e.to_string())?;
    let mut model = build_model(&config).map_err(|e| e.to_string())?;
    let spec = envs.spec().clone();
    let (od, ad) = (spec.obs_dim(), spec.action_dim());
    let mut batch = StepBatch::new(&spec, envs_per_worker);
    let (mut obs, mut rng, mut fragments) = match start {
        Some(state) => {
            envs.restore(&state.envs).map_err(|e| e.to_string())?;
            (state.obs, state.rng, state.fragments)
        }
        None => {
            // Fresh envs. A replacement gets seeds of its own incarnation and continues the
            // fragment numbering.
            let stream = id as u64 + (generation << 32);
            envs.reset(
                derive_seed(config.train.seed, 1000 + stream),
                &mut batch.obs,
            );
            let rng = SampleRng::seed_from_u64(derive_seed(config.train.seed, 2000 + stream));
            (batch.obs.clone(), rng, first_fragment)
        }
    };
    let mut adopted: Option<u64> = None;
    let steps = config.ppo.n_steps;
    loop {
        if exit_requested(&commands) {
            return Ok(Stop::Exit);
        }
        // Adopt a policy at the fragment boundary: at least version u - lag.
        let wanted = fragments.saturating_sub(max_lag);
        heartbeat.beat(Activity::WaitingForPolicy);
        let policy = match store.wait_for(wanted, exact, wait_timeout) {
            Ok(p) => p,
            Err(StoreError::Timeout { waited, .. }) => {
                tracing::warn!(
                    worker = id,
                    wanted,
                    ?waited,
                    "still waiting for a policy version"
                );
                continue;
            }
            Err(StoreError::Closed) => return Ok(Stop::Closed),
            Err(e) => return Err(e.to_string()),
        };
        if adopted != Some(policy.version) {
            policy.verify().map_err(|e| e.to_string())?;
            model
                .set_flat_params(&policy.params)
                .map_err(|e| e.to_string())?;
            envs.set_normalizer(&policy.normalizer)
                .map_err(|e| e.to_string())?;
            store.ack(id, policy.version);
            adopted = Some(policy.version);
        }
        // Back-pressure: a free slot, handed back by the learner.
        heartbeat.beat(Activity::WaitingForSlot);
        let slot = match free_slots.recv_timeout(wait_timeout) {
            Ok(slot) => slot,
            Err(RecvTimeoutError::Timeout) => {
                tracing::warn!(worker = id, waited = ?wait_timeout, "still waiting for a free buffer slot");
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(Stop::Closed),
        };
        holding.set(Some(slot));
        let mut f = buffer.lock(slot);
        let m = envs_per_worker;
        f.version = policy.version;
        f.index = fragments;
        f.episodes.clear();
        let (mut env_seconds, mut inference_seconds) = (0.0, 0.0);
        for t in 0..steps {
            heartbeat.beat(Activity::Collecting);
            if exit_requested(&commands) {
                // The fragment is abandoned, never handed over; the slot goes back.
                drop(f);
                holding.set(None);
                let _ = events.try_send(WorkerEvent::Abandoned { slot, generation });
                return Ok(Stop::Exit);
            }
            let (rows, orow, arow) = (
                t * m..(t + 1) * m,
                t * m * od..(t + 1) * m * od,
                t * m * ad..(t + 1) * m * ad,
            );
            let t0 = Instant::now();
            f.obs[orow.clone()].copy_from_slice(&obs);
            buffer.check_write("observations", &f.obs, orow.start, &obs);
            let fr = &mut *f;
            model.act(
                &obs,
                &mut rng,
                &mut fr.actions[arow.clone()],
                &mut fr.log_probs[rows.clone()],
                &mut fr.values[rows.clone()],
            );
            let t1 = Instant::now();
            envs.step(&f.actions[arow], &mut batch)
                .map_err(|e| format!("worker {id}: {e}"))?;
            let t2 = Instant::now();
            f.rewards[rows.clone()].copy_from_slice(&batch.rewards);
            f.terminated[rows.clone()].copy_from_slice(&batch.terminated);
            f.truncated[rows.clone()].copy_from_slice(&batch.truncated);
            buffer.check_write("rewards", &f.rewards, rows.start, &batch.rewards);
            for i in 0..m {
                if batch.truncated[i] && !batch.terminated[i] {
                    let row = (t * m + i) * od;
                    f.final_obs[row..row + od]
                        .copy_from_slice(&batch.final_obs[i * od..(i + 1) * od]);
                }
            }
            f.episodes.extend_from_slice(&batch.episodes);
            obs.copy_from_slice(&batch.obs);
            inference_seconds += (t1 - t0).as_secs_f64();
            env_seconds += (t2 - t1).as_secs_f64();
        }
        f.next_obs.copy_from_slice(&obs);
        f.stats_delta = envs.take_normalizer_delta();
        fragments += 1;
        f.end_state = Some(WorkerState {
            envs: envs.snapshot(),
            obs: obs.clone(),
            rng: rng.clone(),
            fragments,
        });
        f.env_seconds = env_seconds;
        f.inference_seconds = inference_seconds;
        drop(f);
        holding.set(None);
        // Capacity equals the number of slots and we hold one: this send cannot block.
        let ready = WorkerEvent::FragmentReady {
            slot,
            index: fragments - 1,
            generation,
        };
        if events.send(ready).is_err() {
            return Ok(Stop::Closed);
        }
    }
}
