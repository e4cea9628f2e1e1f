//! A recurrent policy's memory of a worker's envs: carried across fragments and policy
//! versions (it is the envs' activations, not the policy's weights), zeroed when an
//! episode starts, recorded into each fragment's rows.

use strata_env::StepBatch;
use strata_nn::Memory;

use crate::buffer::Fragment;

/// A recurrent policy's memory of a worker's envs: each env's state for its next step
/// and whether that step starts an episode (both empty for a feed-forward policy).
pub(super) struct EnvMemory {
    pub(super) state: Vec<f32>,
    pub(super) starts: Vec<bool>,
}

impl EnvMemory {
    /// Zero states for `envs` envs of `state_len` values, each about to start an episode.
    pub(super) fn fresh(envs: usize, state_len: usize) -> Self {
        EnvMemory {
            state: vec![0.0; envs * state_len],
            starts: vec![true; if state_len > 0 { envs } else { 0 }],
        }
    }

    /// The envs in `envs` start fresh episodes.
    pub(super) fn restart(&mut self, envs: std::ops::Range<usize>) {
        if !self.starts.is_empty() {
            self.starts[envs].fill(true);
        }
    }

    /// Copies every env's state and flag for step `t` into `f`, then lends them to the
    /// model.
    pub(super) fn record(&mut self, f: &mut Fragment, t: usize) -> Memory<'_> {
        self.record_group(f, t, (0, self.starts.len()));
        Memory {
            state: &mut self.state,
            starts: &self.starts,
        }
    }

    /// After a step: an env whose episode ended starts a new one next.
    pub(super) fn step_done(&mut self, batch: &StepBatch) {
        self.group_done(0, batch);
    }

    /// [`EnvMemory::step_done`] for the group of envs from `first` that `batch` stepped.
    pub(super) fn group_done(&mut self, first: usize, batch: &StepBatch) {
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
    pub(super) fn record_group(
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
    pub(super) fn answered(&mut self, first: usize, state: &[f32]) {
        if !self.starts.is_empty() {
            let s = self.state.len() / self.starts.len();
            self.state[first * s..first * s + state.len()].copy_from_slice(state);
        }
    }
}
