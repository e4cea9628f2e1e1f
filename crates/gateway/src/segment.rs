//! What the gateway hands its learner: segments of reported steps.

use std::ops::Range;

use strata_algo::ObsRows;
use strata_ledger::Bucket;

/// Consecutive reported steps of one trajectory.
#[derive(Clone, Debug)]
pub struct Segment {
    /// The trajectory.
    pub trajectory: u64,
    /// The version that produced it.
    pub version: u64,
    /// Its ledger bucket.
    pub bucket: Bucket,
    pub(crate) obs_dim: usize,
    pub(crate) action_dim: usize,
    /// Sample ids, in order.
    pub sample_ids: Vec<u64>,
    obs: ObsRows,
    actions: Vec<f32>,
    log_probs: Vec<f32>,
    values: Vec<f32>,
    rewards: Vec<f32>,
    /// A recurrent policy's state before each step (empty for a feed-forward one).
    states: Vec<f32>,
    /// Completion time of the last step.
    pub completed_at_ns: i64,
    /// Ended in a terminal state (else the value is bootstrapped).
    pub terminated: bool,
    /// V(observation after the last step), when not terminal.
    pub bootstrap: f32,
}

impl Segment {
    /// An empty segment, keeping the observation values in `byte_spans` (images) as bytes.
    pub fn new(
        trajectory: u64,
        version: u64,
        bucket: &Bucket,
        (obs_dim, action_dim): (usize, usize),
        byte_spans: &[Range<usize>],
    ) -> Self {
        Segment {
            trajectory,
            version,
            bucket: bucket.clone(),
            obs_dim,
            action_dim,
            sample_ids: Vec::new(),
            obs: ObsRows::new(0, obs_dim, byte_spans),
            actions: Vec::new(),
            log_probs: Vec::new(),
            values: Vec::new(),
            rewards: Vec::new(),
            states: Vec::new(),
            completed_at_ns: 0,
            terminated: false,
            bootstrap: 0.0,
        }
    }

    /// Steps held.
    pub fn len(&self) -> usize {
        self.sample_ids.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.sample_ids.is_empty()
    }

    /// A recurrent policy's state before each step, `len x state` (empty without one).
    pub fn states(&self) -> &[f32] {
        &self.states
    }

    /// The parts of its observations kept as bytes.
    pub fn byte_spans(&self) -> &[Range<usize>] {
        self.obs.byte_spans()
    }

    /// Adds a step.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        sample_id: u64,
        obs: &[f32],
        action: &[f32],
        log_prob: f32,
        value: f32,
        reward: f32,
        state_before: &[f32],
        completed_at_ns: i64,
    ) {
        self.sample_ids.push(sample_id);
        self.obs.push(obs);
        self.actions.extend_from_slice(action);
        self.log_probs.push(log_prob);
        self.values.push(value);
        self.rewards.push(reward);
        self.states.extend_from_slice(state_before);
        self.completed_at_ns = completed_at_ns;
    }
}

strata_algo::impl_step_columns!(Segment);
