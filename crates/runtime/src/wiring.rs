//! All wiring in one place: the worker threads, the central inference thread and every
//! queue between them and the learner, each with its capacity and who sends what to whom.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::buffer::{ExperienceBuffer, SlotId, WorkerState};
use crate::inference::{InferenceClient, InferenceSlots, ReplyQueues, Request};
use crate::policy_store::PolicyStore;
use crate::telemetry::{Heartbeat, Watchdog};
use crate::worker::{self, Holding, WorkerCommand, WorkerEvent, WorkerSetup};
use crate::{RunConfig, RuntimeError};

/// One running worker and its queues.
pub(crate) struct WorkerHandle {
    /// Learner -> worker: slots handed back (capacity: the worker's slots).
    pub(crate) free_slots: SyncSender<SlotId>,
    /// Learner -> worker: commands (capacity 1: only `Exit`).
    pub(crate) commands: SyncSender<WorkerCommand>,
    pub(crate) handle: JoinHandle<()>,
    pub(crate) generation: u64,
    pub(crate) holding: Arc<Holding>,
    pub(crate) heartbeat: Arc<Heartbeat>,
    pub(crate) restarts: u32,
    /// The next fragment number expected from it.
    pub(crate) next_fragment: u64,
}

/// The threads and queues. Every queue is created here or in [`Wiring::spawn_worker`].
pub(crate) struct Wiring {
    pub(crate) config: Arc<RunConfig>,
    pub(crate) buffer: Arc<ExperienceBuffer>,
    pub(crate) store: Arc<PolicyStore>,
    /// Workers -> learner: completed or abandoned fragments and failures (capacity: all
    /// slots, and every event carries or frees a slot, so no send blocks).
    pub(crate) events: Receiver<WorkerEvent>,
    pub(crate) event_tx: SyncSender<WorkerEvent>,
    pub(crate) workers: Vec<WorkerHandle>,
    /// Replaced workers that may still be finishing (a hung env wakes up later).
    pub(crate) retired: Vec<JoinHandle<()>>,
    /// Slots still held by replaced workers; they return through events.
    pub(crate) quarantined: Vec<SlotId>,
    /// Heartbeats the watchdog reads: one per worker, then the learner's.
    pub(crate) beats: Arc<Mutex<Vec<Arc<Heartbeat>>>>,
    pub(crate) learner_beat: Arc<Heartbeat>,
    pub(crate) _watchdog: Watchdog,
    pub(crate) epoch: Instant,
    pub(crate) lag: u64,
    pub(crate) wait_timeout: Duration,
    /// The inference thread and its queues, with `runtime.inference = "central"`.
    pub(crate) central: Option<Central>,
}

/// The central inference thread's side of the wiring.
pub(crate) struct Central {
    pub(crate) slots: Arc<InferenceSlots>,
    /// Workers -> inference thread (capacity: one request per group of every worker).
    pub(crate) requests: SyncSender<Request>,
    /// Inference thread -> each worker (capacity: its groups); replaced on restart.
    pub(crate) replies: ReplyQueues,
    pub(crate) exit: Arc<AtomicBool>,
    pub(crate) handle: Option<JoinHandle<()>>,
}

impl Wiring {
    /// Starts worker `id` (incarnation `generation`) owning `slots`.
    pub(crate) fn spawn_worker(
        &self,
        id: usize,
        generation: u64,
        start: Option<WorkerState>,
        first_fragment: u64,
        slots: &[SlotId],
    ) -> Result<WorkerHandle, RuntimeError> {
        let per_worker = self.lag as usize + 1;
        let (slot_tx, slot_rx) = sync_channel(per_worker);
        for slot in slots {
            slot_tx
                .try_send(*slot)
                .expect("a worker never owns more slots than its queue holds");
        }
        let (cmd_tx, cmd_rx) = sync_channel(1);
        let heartbeat = Heartbeat::new(format!("worker-{id}"), self.epoch);
        let holding = Arc::new(Holding::default());
        let next_fragment = start.as_ref().map_or(first_fragment, |s| s.fragments);
        let inference = self.central.as_ref().map(|c| {
            let (reply_tx, reply_rx) = sync_channel(self.config.groups_per_worker());
            let mut replies = c.replies.lock().unwrap_or_else(|p| p.into_inner());
            if id < replies.len() {
                replies[id] = reply_tx;
            } else {
                replies.push(reply_tx);
            }
            InferenceClient {
                worker: id,
                generation,
                slots: Arc::clone(&c.slots),
                requests: c.requests.clone(),
                replies: reply_rx,
                early: std::cell::Cell::new(0),
                outstanding: std::cell::Cell::new(0),
            }
        });
        let handle = worker::spawn(WorkerSetup {
            id,
            config: Arc::clone(&self.config),
            buffer: Arc::clone(&self.buffer),
            store: Arc::clone(&self.store),
            free_slots: slot_rx,
            events: self.event_tx.clone(),
            commands: cmd_rx,
            start,
            max_lag: self.lag,
            exact: self.config.train.deterministic || self.lag == 0,
            wait_timeout: self.wait_timeout,
            generation,
            with_fault: generation == 0 && id == self.config.env.fault_worker,
            heartbeat: Arc::clone(&heartbeat),
            holding: Arc::clone(&holding),
            first_fragment,
            inference,
        })
        .map_err(|e| RuntimeError::Config(format!("cannot start worker {id}: {e}")))?;
        {
            // Workers' heartbeats come first, in worker order.
            let mut beats = self.beats.lock().unwrap_or_else(|p| p.into_inner());
            if generation == 0 {
                beats.insert(id, Arc::clone(&heartbeat));
            } else {
                beats[id] = Arc::clone(&heartbeat);
            }
        }
        Ok(WorkerHandle {
            free_slots: slot_tx,
            commands: cmd_tx,
            handle,
            generation,
            holding,
            heartbeat,
            restarts: 0,
            next_fragment,
        })
    }

    /// Hands a free slot to its worker's current incarnation.
    pub(crate) fn give_back(&mut self, slot: SlotId) -> Result<(), RuntimeError> {
        self.quarantined.retain(|s| *s != slot);
        self.buffer.mark_free(slot);
        self.workers[slot.worker]
            .free_slots
            .try_send(slot)
            .map_err(|_| RuntimeError::Worker {
                worker: slot.worker,
                error: "its slot queue is full or closed (slot accounting broke)".into(),
            })
    }
}
