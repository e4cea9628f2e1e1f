//! The experience buffer: fragment slots allocated once, each owned by one worker. Slots
//! are handed between a worker and the learner by index through bounded queues; the data
//! stays where it was written.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};
use strata_algo::ObsRows;
use strata_env::{EpisodeEnd, NormalizerStats};
pub use strata_learner::WorkerState;

/// Where a worker's time went while filling a fragment, in seconds: together, the
/// worker's busy time.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FillTime {
    /// Stepping envs: the envs themselves (for Gymnasium envs, their processes: the
    /// simulator or emulator with its Python wrappers, and the hand-over).
    #[serde(rename = "env_seconds")]
    pub env: f64,
    /// Turning the env processes' observations (frames as bytes) into observation rows.
    #[serde(default, rename = "frames_seconds")]
    pub frames: f64,
    /// Checking observations and rewards, and the ledger's hashes and summaries of what
    /// each env observed.
    #[serde(default, rename = "summaries_seconds")]
    pub summaries: f64,
    /// Choosing actions (in the worker, or waiting for the central inference thread).
    #[serde(rename = "inference_seconds")]
    pub inference: f64,
    /// Copying observations into the fragment and on to the next step, and adopting the
    /// policy version it is collected with.
    #[serde(default, rename = "copy_seconds")]
    pub copies: f64,
    /// Recording each step's outcome and provenance into the fragment.
    #[serde(default, rename = "provenance_seconds")]
    pub provenance: f64,
    /// Building the envs (starting their processes) and the model, before the worker's
    /// first fragment (reported with it).
    #[serde(default, rename = "startup_seconds")]
    pub startup: f64,
}

impl FillTime {
    /// Adds one env step's `elapsed` seconds, split by what the vector says it did beside
    /// the envs.
    pub fn add_step(&mut self, elapsed: f64, beside: strata_env::StepTiming) {
        self.frames += beside.frames;
        self.summaries += beside.summaries;
        self.env += (elapsed - beside.frames - beside.summaries).max(0.0);
    }
}

/// One fragment: `steps` consecutive steps of a worker's `envs` envs under one policy
/// version, time-major (`row = t * envs + env`).
pub struct Fragment {
    /// Steps per env.
    pub steps: usize,
    /// Envs of the owning worker.
    pub envs: usize,
    /// Observations acted on (images as bytes).
    pub obs: ObsRows,
    /// Actions as sampled (unclipped).
    pub actions: Vec<f32>,
    /// Behaviour log-probs.
    pub log_probs: Vec<f32>,
    /// Behaviour values.
    pub values: Vec<f32>,
    /// Rewards (after wrappers).
    pub rewards: Vec<f32>,
    /// Terminal transitions.
    pub terminated: Vec<bool>,
    /// Time-limit truncations.
    pub truncated: Vec<bool>,
    /// Final observations of truncated episodes (other rows stale; images as bytes).
    pub final_obs: ObsRows,
    /// Observations after the last step.
    pub next_obs: Vec<f32>,
    /// A recurrent policy's state before each step, `rows x state` (empty without one).
    pub states: Vec<f32>,
    /// Whether each step starts an episode (empty without a recurrent policy).
    pub starts: Vec<bool>,
    /// Policy version that produced every step.
    pub version: u64,
    /// The worker's fragment counter.
    pub index: u64,
    /// Episodes that ended in this fragment (env index local to the worker).
    pub episodes: Vec<EpisodeEnd>,
    /// Moments of raw data seen, for the learner's normalisation statistics.
    pub stats_delta: NormalizerStats,
    /// The worker's state right after this fragment.
    pub end_state: Option<WorkerState>,
    /// Where the worker's time went while filling it.
    pub time: FillTime,
    /// Per-step provenance for the ledger (filled when the run keeps one).
    pub provenance: StepProvenance,
}

/// Provenance of each step of a fragment, time-major like the fragment's columns.
#[derive(Clone, Debug, Default)]
pub struct StepProvenance {
    /// Whether the worker filled the env clock and observation summaries (times and
    /// sampler versions are always filled).
    pub recorded: bool,
    /// When the action was issued (ns since the epoch).
    pub issued_ns: Vec<i64>,
    /// When its execution completed (ns since the epoch).
    pub completed_ns: Vec<i64>,
    /// The env's clock at completion.
    pub clock: Vec<u64>,
    /// Observations seen during execution.
    pub obs_count: Vec<u32>,
    /// Their hash.
    pub obs_hash: Vec<u64>,
    /// Per summary value minimum, `rows * summary_dim` (one value per observation value
    /// outside images, one per image channel).
    pub obs_min: Vec<f32>,
    /// Per summary value maximum.
    pub obs_max: Vec<f32>,
    /// Per summary value mean.
    pub obs_mean: Vec<f32>,
    /// The newest version any worker sampled with at completion.
    pub sampler_version: Vec<u64>,
}

impl StepProvenance {
    fn new(rows: usize, summary_dim: usize) -> Self {
        StepProvenance {
            recorded: false,
            issued_ns: vec![0; rows],
            completed_ns: vec![0; rows],
            clock: vec![0; rows],
            obs_count: vec![0; rows],
            obs_hash: vec![0; rows],
            obs_min: vec![0.0; rows * summary_dim],
            obs_max: vec![0.0; rows * summary_dim],
            obs_mean: vec![0.0; rows * summary_dim],
            sampler_version: vec![0; rows],
        }
    }
}

strata_algo::impl_step_columns!(Fragment);

/// Values per row in a fragment's columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowWidths {
    /// An observation's.
    pub obs: usize,
    /// The parts of an observation kept as bytes (its images).
    pub byte_spans: Vec<std::ops::Range<usize>>,
    /// An observation summary's ([`strata_env::EnvSpec::summary_dim`]).
    pub summary: usize,
    /// An action's.
    pub action: usize,
    /// A recurrent policy's state (0 for a feed-forward one).
    pub state: usize,
}

impl RowWidths {
    /// The widths of an env's rows.
    pub fn of(spec: &strata_env::EnvSpec) -> Self {
        RowWidths {
            obs: spec.obs_dim(),
            byte_spans: spec.image_ranges(),
            summary: spec.summary_dim(),
            action: spec.action_dim(),
            state: 0,
        }
    }

    /// Vector observations of `obs` values (summarised value by value) and actions of
    /// `action`.
    pub fn vector(obs: usize, action: usize) -> Self {
        RowWidths {
            obs,
            byte_spans: Vec::new(),
            summary: obs,
            action,
            state: 0,
        }
    }
}

impl Fragment {
    fn new(steps: usize, envs: usize, widths: &RowWidths) -> Self {
        let (obs_dim, action_dim) = (widths.obs, widths.action);
        let rows = steps * envs;
        Fragment {
            steps,
            envs,
            obs: ObsRows::new(rows, obs_dim, &widths.byte_spans),
            actions: vec![0.0; rows * action_dim],
            log_probs: vec![0.0; rows],
            values: vec![0.0; rows],
            rewards: vec![0.0; rows],
            terminated: vec![false; rows],
            truncated: vec![false; rows],
            final_obs: ObsRows::new(rows, obs_dim, &widths.byte_spans),
            next_obs: vec![0.0; envs * obs_dim],
            states: vec![0.0; rows * widths.state],
            starts: vec![false; if widths.state > 0 { rows } else { 0 }],
            version: 0,
            index: 0,
            episodes: Vec::with_capacity(rows),
            stats_delta: NormalizerStats::default(),
            end_state: None,
            time: FillTime::default(),
            provenance: StepProvenance::new(rows, widths.summary),
        }
    }
}

/// A slot index that cannot belong to the wrong worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotId {
    /// Owning worker.
    pub worker: usize,
    /// Index in the buffer.
    pub index: usize,
}

/// All slots, allocated once. Worker `w` owns slots `w * per_worker .. (w + 1) * per_worker`.
pub struct ExperienceBuffer {
    slots: Vec<Mutex<Fragment>>,
    /// Bytes the slots' observations take.
    obs_bytes: usize,
    /// Per slot: a complete fragment waits in it (for the live view's fill only).
    ready: Vec<AtomicBool>,
    per_worker: usize,
    /// The first worker whose slots are held here (0, or the one worker of a worker
    /// process's buffer).
    first_worker: usize,
    /// Read back every write and check ownership.
    pub debug: bool,
}

impl ExperienceBuffer {
    /// `workers * per_worker` slots of `steps x envs_per_worker` rows.
    pub fn new(
        workers: usize,
        per_worker: usize,
        steps: usize,
        envs_per_worker: usize,
        widths: RowWidths,
        debug: bool,
    ) -> Self {
        let slots: Vec<Fragment> = (0..workers * per_worker)
            .map(|_| Fragment::new(steps, envs_per_worker, &widths))
            .collect();
        ExperienceBuffer {
            obs_bytes: slots
                .iter()
                .map(|f| f.obs.memory_bytes() + f.final_obs.memory_bytes())
                .sum(),
            slots: slots.into_iter().map(Mutex::new).collect(),
            ready: (0..workers * per_worker)
                .map(|_| AtomicBool::new(false))
                .collect(),
            per_worker,
            first_worker: 0,
            debug,
        }
    }

    /// Only worker `worker`'s slots (a worker process's buffer), addressed as in the
    /// learner's buffer.
    pub fn for_worker(
        worker: usize,
        per_worker: usize,
        steps: usize,
        envs_per_worker: usize,
        widths: RowWidths,
        debug: bool,
    ) -> Self {
        ExperienceBuffer {
            first_worker: worker,
            ..Self::new(1, per_worker, steps, envs_per_worker, widths, debug)
        }
    }

    /// Where `slot` is held here.
    fn local(&self, slot: SlotId) -> usize {
        slot.index - self.first_worker * self.per_worker
    }

    /// Slots in all.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Marks `slot` as holding a complete fragment (the worker, before handing it over).
    pub fn mark_ready(&self, slot: SlotId) {
        self.ready[self.local(slot)].store(true, Ordering::Relaxed);
    }

    /// Marks `slot` as free again (the learner, handing it back).
    pub fn mark_free(&self, slot: SlotId) {
        self.ready[self.local(slot)].store(false, Ordering::Relaxed);
    }

    /// Slots holding a complete fragment the learner has not consumed: the buffer's fill.
    pub fn ready_count(&self) -> usize {
        self.ready
            .iter()
            .filter(|r| r.load(Ordering::Relaxed))
            .count()
    }

    /// The slots worker `w` owns.
    pub fn owned_by(&self, worker: usize) -> impl Iterator<Item = SlotId> {
        let per = self.per_worker;
        (worker * per..(worker + 1) * per).map(move |index| SlotId { worker, index })
    }

    /// Bytes the slots' observations take (observations acted on and final ones), fixed
    /// when the buffer is made: what keeping images as bytes saves shows here.
    pub fn obs_memory_bytes(&self) -> usize {
        self.obs_bytes
    }

    /// Locks a slot for writing (worker) or reading (learner). Ownership is by hand-off,
    /// so the lock is never contended; it only makes the hand-off visible to the compiler.
    ///
    /// # Panics
    /// When `slot` does not belong to its stated worker (a wiring bug), or a thread
    /// panicked while holding it.
    pub fn lock(&self, slot: SlotId) -> MutexGuard<'_, Fragment> {
        assert_eq!(
            slot.index / self.per_worker,
            slot.worker,
            "slot {} does not belong to worker {}",
            slot.index,
            slot.worker
        );
        self.slots[self.local(slot)].lock()
    }

    /// In debug mode, checks that the observation rows `written` landed at row `row` of
    /// `dst` unchanged.
    ///
    /// # Panics
    /// When the read-back differs or the rows are out of bounds.
    pub fn check_obs_write(&self, dst: &ObsRows, row: usize, written: &[f32]) {
        if self.debug {
            let rows = written.len() / dst.dim().max(1);
            assert!(
                row + rows <= dst.rows(),
                "buffer write of observations out of bounds: rows {row}..{} of {}",
                row + rows,
                dst.rows()
            );
            let mut back = Vec::with_capacity(written.len());
            dst.extend_into(row..row + rows, &mut back);
            assert_eq!(back, written, "buffer read-back of observations differs");
        }
    }

    /// In debug mode, checks that `written` landed at `dst[offset..]` unchanged.
    ///
    /// # Panics
    /// When the read-back differs or the range is out of bounds.
    pub fn check_write<T: PartialEq + std::fmt::Debug>(
        &self,
        what: &str,
        dst: &[T],
        offset: usize,
        written: &[T],
    ) {
        if self.debug {
            let end = offset + written.len();
            assert!(
                end <= dst.len(),
                "buffer write of {what} out of bounds: {offset}..{end} of {}",
                dst.len()
            );
            assert_eq!(
                &dst[offset..end],
                written,
                "buffer read-back of {what} differs"
            );
        }
    }
}
