//! Minibatches of whole sequences for a recurrent policy.
//!
//! Each env's fragment of `n_steps` is cut into sequences of `len` steps at fixed places
//! (steps `0..len`, `len..2 len`, ...), so every sequence is full: no padding. A sequence
//! starts from the recurrent state stored when its first step was collected; an episode
//! that starts inside it zeroes the state at that step (the model does it from the
//! episode-start flags), so one sequence may hold the end of one episode and the start of
//! the next. Gradients flow back through time to the sequence's first step, no further.
//! A minibatch is `batch_size / len` sequences drawn without replacement, its rows
//! step-major: row `t * sequences + b` is step `t` of sequence `b`.

use strata_nn::Sequences;

use crate::rollout::RolloutBuffer;

/// One minibatch of sequences: the rollout rows it gathers, in order, with what the
/// model needs to run them.
#[derive(Clone, Debug, Default)]
pub struct SequenceBatch {
    /// Rollout rows, step-major.
    pub rows: Vec<usize>,
    /// Whether each row starts an episode.
    pub starts: Vec<bool>,
    /// Each sequence's stored state before its first step.
    pub state0: Vec<f32>,
    /// Whether each row was admitted (a dropped row still carries the state forward).
    pub real: Vec<bool>,
    steps: usize,
}

/// Sequences of `len` steps in `rollout`. Sequence `k` is env `k % num_envs`'s steps
/// from `(k / num_envs) * len`.
pub fn sequence_count(rollout: &RolloutBuffer, len: usize) -> usize {
    rollout.num_envs * (rollout.n_steps / len)
}

/// The rollout row of step `t` of sequence `k`.
fn row_of(rollout: &RolloutBuffer, len: usize, k: usize, t: usize) -> usize {
    let (env, first) = (k % rollout.num_envs, (k / rollout.num_envs) * len);
    (first + t) * rollout.num_envs + env
}

/// Whether any step of sequence `k` was admitted (a sequence of dropped samples only
/// never enters a minibatch).
pub fn has_admitted_step(rollout: &RolloutBuffer, len: usize, k: usize) -> bool {
    (0..len).any(|t| rollout.admission[row_of(rollout, len, k, t)] > 0.0)
}

impl SequenceBatch {
    /// Lays out the sequences `ids` of `len` steps.
    pub fn fill(&mut self, rollout: &RolloutBuffer, ids: &[usize], len: usize) {
        let s = rollout.state_len;
        self.steps = len;
        self.rows.clear();
        self.starts.clear();
        self.real.clear();
        self.state0.clear();
        for t in 0..len {
            for &k in ids {
                let row = row_of(rollout, len, k, t);
                self.rows.push(row);
                self.starts.push(rollout.starts[row]);
                self.real.push(rollout.admission[row] > 0.0);
            }
        }
        for &k in ids {
            let row = row_of(rollout, len, k, 0);
            self.state0
                .extend_from_slice(&rollout.states[row * s..(row + 1) * s]);
        }
    }

    /// The sequences, for the model.
    pub fn sequences(&self) -> Sequences<'_> {
        Sequences {
            steps: self.steps,
            starts: &self.starts,
            state0: &self.state0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_tile_each_env_and_start_from_their_stored_state() {
        // 2 envs x 4 steps; each row's stored state is its row number.
        let mut rollout = RolloutBuffer::new(2, 4, 1, 1).with_memory(1);
        for (row, s) in rollout.states.iter_mut().enumerate() {
            *s = row as f32;
        }
        rollout.starts[7] = true;
        rollout.admission[2] = 0.0;
        assert_eq!(sequence_count(&rollout, 2), 4);
        let mut batch = SequenceBatch::default();
        // Sequence 3: env 1 from step 2 (rows 5, 7); sequence 0: env 0 from step 0.
        batch.fill(&rollout, &[3, 0], 2);
        assert_eq!(batch.rows, [5, 0, 7, 2], "step-major");
        assert_eq!(batch.state0, [5.0, 0.0]);
        assert_eq!(batch.starts, [false, false, true, false]);
        assert_eq!(batch.real, [true, true, true, false]);
        assert_eq!(batch.sequences().steps, 2);
        rollout.admission[0] = 0.0;
        assert!(!has_admitted_step(&rollout, 2, 0), "rows 0 and 2 dropped");
        assert!(has_admitted_step(&rollout, 2, 2));
    }
}
