//! The rollout PPO trains on: `n_steps x num_envs` transitions, time-major, allocated once,
//! with what GAE, V-trace and decoupled PPO compute over it.

use serde::{Deserialize, Serialize};
use strata_nn::{ActorCritic, Evaluation, Sequences};

use crate::gae::{compute_gae, GaeInput};
use crate::obs_rows::ObsRows;
use crate::steps::StepsMut;
use crate::vtrace::compute_vtrace;

/// One rollout of `n_steps x num_envs` transitions, time-major, allocated once.
#[derive(Clone, Debug)]
pub struct RolloutBuffer {
    /// Envs per step.
    pub num_envs: usize,
    /// Steps per env.
    pub n_steps: usize,
    /// Observation width.
    pub obs_dim: usize,
    /// Values per action.
    pub action_dim: usize,
    /// Observations the actions were chosen at (images as bytes: [`ObsRows`]).
    pub obs: ObsRows,
    /// Actions as sampled (unclipped).
    pub actions: Vec<f32>,
    /// Log-probs of the actions when sampled.
    pub log_probs: Vec<f32>,
    /// V(s_t) when acting.
    pub values: Vec<f32>,
    /// Rewards (after wrappers).
    pub rewards: Vec<f32>,
    /// Terminal transitions.
    pub terminated: Vec<bool>,
    /// Time-limit truncations.
    pub truncated: Vec<bool>,
    /// V(final observation) where truncated.
    pub final_values: Vec<f32>,
    /// V of the observation after the last step.
    pub last_values: Vec<f32>,
    /// Off-policy weights `pi_prox / pi_behaviour`, truncated (1 on-policy); see
    /// [`RolloutBuffer::make_proximal`].
    pub weights: Vec<f32>,
    /// Admission weights from the staleness rules: 1 trained, below 1 down-weighted,
    /// 0 dropped (never enters a minibatch). Multiplies `weights`.
    pub admission: Vec<f32>,
    /// GAE advantages.
    pub advantages: Vec<f32>,
    /// Value targets.
    pub returns: Vec<f32>,
    /// Values of a recurrent policy's state per env (0 for a feed-forward one).
    pub state_len: usize,
    /// Each row's recurrent state before its step, as collected (`len x state_len`).
    pub states: Vec<f32>,
    /// Whether each row starts an episode (a recurrent policy zeroes its state there).
    pub starts: Vec<bool>,
}

impl RolloutBuffer {
    /// The step columns, to fill.
    pub fn steps_mut(&mut self) -> StepsMut<'_> {
        StepsMut {
            obs: &mut self.obs,
            actions: &mut self.actions,
            log_probs: &mut self.log_probs,
            values: &mut self.values,
            rewards: &mut self.rewards,
        }
    }
}

crate::impl_step_columns!(RolloutBuffer);

impl RolloutBuffer {
    /// A zeroed buffer.
    pub fn new(num_envs: usize, n_steps: usize, obs_dim: usize, action_dim: usize) -> Self {
        Self::with_byte_spans(num_envs, n_steps, obs_dim, action_dim, &[])
    }

    /// A zeroed buffer keeping the observation values in `byte_spans` (images) as bytes.
    pub fn with_byte_spans(
        num_envs: usize,
        n_steps: usize,
        obs_dim: usize,
        action_dim: usize,
        byte_spans: &[std::ops::Range<usize>],
    ) -> Self {
        let n = num_envs * n_steps;
        RolloutBuffer {
            num_envs,
            n_steps,
            obs_dim,
            action_dim,
            obs: ObsRows::new(n, obs_dim, byte_spans),
            actions: vec![0.0; n * action_dim],
            log_probs: vec![0.0; n],
            values: vec![0.0; n],
            rewards: vec![0.0; n],
            terminated: vec![false; n],
            truncated: vec![false; n],
            final_values: vec![0.0; n],
            last_values: vec![0.0; num_envs],
            weights: vec![1.0; n],
            admission: vec![1.0; n],
            advantages: vec![0.0; n],
            returns: vec![0.0; n],
            state_len: 0,
            states: Vec::new(),
            starts: Vec::new(),
        }
    }

    /// The buffer with room for a recurrent policy's `state_len` values of state per row
    /// and the episode-start flags.
    #[must_use]
    pub fn with_memory(mut self, state_len: usize) -> Self {
        let n = self.len();
        self.state_len = state_len;
        self.states = vec![0.0; n * state_len];
        self.starts = vec![false; if state_len > 0 { n } else { 0 }];
        self
    }

    /// Transitions held.
    pub fn len(&self) -> usize {
        self.num_envs * self.n_steps
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decoupled PPO (Hilton et al., 2021) for samples from older policies: the current
    /// policy becomes the proximal one. Its log-probs replace the behaviour log-probs as the
    /// ratio's denominator, its values replace the recorded ones (GAE and value clipping),
    /// and each sample is weighted by `pi_prox / pi_behaviour`, truncated at `max_weight`.
    /// With on-policy data every weight is 1 and nothing changes.
    /// Returns the ratios' statistics before truncation.
    pub fn make_proximal(&mut self, model: &mut dyn ActorCritic, max_weight: f32) -> IsWeightStats {
        const CHUNK: usize = 1024;
        let mut eval = Evaluation::default();
        let ad = self.action_dim;
        let mut stats = IsWeightStats::default();
        let (mut sum, mut above) = (0.0f64, 0usize);
        // A recurrent policy runs each env's fragment as one sequence from its stored
        // first state.
        let chunk = if self.state_len > 0 {
            self.len()
        } else {
            CHUNK
        };
        for start in (0..self.len()).step_by(chunk.max(1)) {
            let end = (start + chunk).min(self.len());
            let obs = self.obs.batch(start..end);
            let actions = &self.actions[start * ad..end * ad];
            if self.state_len > 0 {
                let sequences = Sequences {
                    steps: self.n_steps,
                    starts: &self.starts,
                    state0: &self.states[..self.num_envs * self.state_len],
                };
                model.evaluate_sequences(obs, actions, sequences, &mut eval);
            } else {
                model.evaluate(obs, actions, &mut eval);
            }
            for (k, i) in (start..end).enumerate() {
                let ratio = (eval.log_probs[k] - self.log_probs[i]).exp();
                sum += f64::from(ratio);
                stats.max = stats.max.max(ratio);
                above += usize::from(ratio > max_weight);
                self.weights[i] = ratio.min(max_weight);
                self.log_probs[i] = eval.log_probs[k];
                self.values[i] = eval.values[k];
            }
        }
        if !self.is_empty() {
            stats.mean = (sum / self.len() as f64) as f32;
            stats.truncated = above as f32 / self.len() as f32;
        }
        stats
    }

    /// V-trace instead of GAE for samples from older policies: the current policy becomes
    /// the proximal one (its log-probs are the ratio's denominator, its values the
    /// baseline), and advantages and value targets come from V-trace with the truncated
    /// ratios `pi_prox / pi_behaviour`. Weights stay 1: the correction is in the targets.
    /// Returns the ratios' statistics, `truncated` counting those above `rho_bar`.
    pub fn vtrace_targets(
        &mut self,
        model: &mut dyn ActorCritic,
        gamma: f32,
        rho_bar: f32,
        c_bar: f32,
    ) -> IsWeightStats {
        let mut stats = self.make_proximal(model, f32::INFINITY);
        let above = self.weights.iter().filter(|&&r| r > rho_bar).count();
        stats.truncated = above as f32 / self.len().max(1) as f32;
        // make_proximal left the untruncated ratios in `weights`.
        let len = self.len();
        let ratios = std::mem::replace(&mut self.weights, vec![1.0; len]);
        let input = GaeInput {
            rewards: &self.rewards,
            values: &self.values,
            terminated: &self.terminated,
            truncated: &self.truncated,
            final_values: &self.final_values,
            last_values: &self.last_values,
            num_envs: self.num_envs,
        };
        compute_vtrace(
            &input,
            &ratios,
            gamma,
            rho_bar,
            c_bar,
            &mut self.advantages,
            &mut self.returns,
        );
        stats
    }

    /// Fills `advantages` and `returns` by GAE.
    pub fn compute_advantages(&mut self, gamma: f32, lambda: f32) {
        let input = GaeInput {
            rewards: &self.rewards,
            values: &self.values,
            terminated: &self.terminated,
            truncated: &self.truncated,
            final_values: &self.final_values,
            last_values: &self.last_values,
            num_envs: self.num_envs,
        };
        compute_gae(
            &input,
            gamma,
            lambda,
            &mut self.advantages,
            &mut self.returns,
        );
    }
}

/// The importance ratios `pi_prox / pi_behaviour` of one lag correction, before truncation:
/// how far the learner has moved from the policies that collected the batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IsWeightStats {
    /// Mean ratio over the batch (1 for on-policy samples).
    pub mean: f32,
    /// Largest ratio.
    pub max: f32,
    /// Share of samples whose ratio was above the cap and truncated to it.
    pub truncated: f32,
}
