//! What PPO needs from a model ([`ActorCritic`]), and the values it exchanges with one.

pub use crate::distribution::SampleRng;
use crate::grad_clip::{GradClip, GradNorms};
use crate::head::Head;
use crate::obs_batch::ObsBatch;
use crate::NnError;

/// A named block of parameters or optimiser state, for checkpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    /// Stable name (`policy.0.weight`, `adam.m`, ...).
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub data: Vec<f32>,
}

/// Per-sample results of [`ActorCritic::evaluate`].
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    /// Log-probability of each given action under the current policy.
    pub log_probs: Vec<f32>,
    /// Policy entropy at each observation.
    pub entropy: Vec<f32>,
    /// Value estimate at each observation.
    pub values: Vec<f32>,
    /// A Gaussian head's mean per observation and action dimension (row-major); empty for
    /// a categorical head.
    pub means: Vec<f32>,
}

/// The recurrent state of the rows a model acts on: each row's state (`rows x`
/// [`ActorCritic::state_len`], advanced in place by one step) and whether its episode
/// starts at this row (its state is zeroed first). Empty for a feed-forward model.
pub struct Memory<'a> {
    /// Each row's state, replaced by the state after this step.
    pub state: &'a mut [f32],
    /// Whether each row starts an episode.
    pub starts: &'a [bool],
}

impl<'a> Memory<'a> {
    /// One row's `state`, continuing its episode (advanced in place); an empty `state` is
    /// a feed-forward model's [`Memory::none`].
    pub fn one_row(state: &'a mut [f32]) -> Self {
        let starts: &'static [bool] = if state.is_empty() { &[] } else { &[false] };
        Memory { state, starts }
    }
}

impl Memory<'static> {
    /// No memory: what a feed-forward model acts with.
    pub fn none() -> Self {
        Memory {
            state: &mut [],
            starts: &[],
        }
    }
}

/// A training minibatch of whole sequences: `steps x batch` rows, step-major (row
/// `t * batch + b` is step `t` of sequence `b`), each sequence starting from its stored
/// state and zeroing it before every step that starts an episode.
#[derive(Clone, Copy, Debug)]
pub struct Sequences<'a> {
    /// Steps per sequence.
    pub steps: usize,
    /// Whether each row starts an episode (`steps x batch`).
    pub starts: &'a [bool],
    /// Each sequence's state before its first step (`batch x` [`ActorCritic::state_len`]).
    pub state0: &'a [f32],
}

/// What PPO needs from a model. A GPU backend implements this; PPO does not change.
pub trait ActorCritic: Send {
    /// Observation width.
    fn obs_dim(&self) -> usize;
    /// The action head.
    fn head(&self) -> Head;
    /// Values of recurrent state per env (0 for a feed-forward model).
    fn state_len(&self) -> usize {
        0
    }
    /// Samples an action per observation row; writes actions, their log-probs and values.
    /// `sde_noise` holds each row's gSDE exploration matrix
    /// ([`NetworkConfig::sde_noise_len`] standard normals a row); empty draws a fresh one
    /// per row and step (and is ignored without gSDE).
    /// `memory` carries a recurrent model's state ([`Memory::none`] for a feed-forward one).
    #[allow(clippy::too_many_arguments)]
    fn act(
        &mut self,
        obs: &[f32],
        memory: Memory<'_>,
        rng: &mut SampleRng,
        sde_noise: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
        values: &mut [f32],
    );
    /// [`ActorCritic::act`] over a batch made of `parts` (row counts, in order), part `i`
    /// sampling with `rngs[i]`: one forward pass serves several requesters (central
    /// inference), and each requester's actions depend only on its own RNG stream.
    #[allow(clippy::too_many_arguments)]
    fn act_split(
        &mut self,
        obs: &[f32],
        parts: &[usize],
        memory: Memory<'_>,
        rngs: &mut [SampleRng],
        sde_noise: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
        values: &mut [f32],
    );
    /// The most likely action per row (evaluation), advancing `memory`.
    fn act_greedy(&mut self, obs: &[f32], memory: Memory<'_>, actions: &mut [f32]);
    /// Value estimates per row, advancing `memory`.
    fn values(&mut self, obs: &[f32], memory: Memory<'_>, out: &mut [f32]);
    /// Training forward pass over a minibatch: log-probs of `actions`, entropies, values.
    /// Keeps what [`ActorCritic::backward`] needs. A recurrent model takes each row as a
    /// sequence of one step from a zero state; it trains with
    /// [`ActorCritic::evaluate_sequences`].
    fn evaluate(&mut self, obs: ObsBatch<'_>, actions: &[f32], out: &mut Evaluation);
    /// [`ActorCritic::evaluate`] over whole sequences, each from its stored state (a
    /// feed-forward model ignores the sequences).
    fn evaluate_sequences(
        &mut self,
        obs: ObsBatch<'_>,
        actions: &[f32],
        sequences: Sequences<'_>,
        out: &mut Evaluation,
    ) {
        let _ = sequences;
        self.evaluate(obs, actions, out);
    }
    /// Adds to the gradients the back-propagation of per-sample loss gradients w.r.t.
    /// log-prob, entropy and value of the last [`ActorCritic::evaluate`].
    /// `d_means` is the gradient w.r.t. the Gaussian means of the last evaluated minibatch,
    /// laid out as [`Evaluation::means`], added to what flows through the log-probs; empty
    /// when the loss has no term on the means.
    fn backward(
        &mut self,
        d_log_probs: &[f32],
        d_entropy: &[f32],
        d_values: &[f32],
        d_means: &[f32],
    );
    /// Clears accumulated gradients.
    fn zero_grad(&mut self);
    /// Clips the gradients as `clip` says (if given), takes one optimiser step with
    /// learning rate `lr`, clears the gradients; returns the norms before clipping.
    fn optimizer_step(&mut self, lr: f32, clip: Option<GradClip>) -> GradNorms;
    /// Parameters and optimiser state, by name.
    fn tensors(&self) -> Vec<NamedTensor>;
    /// Restores [`ActorCritic::tensors`].
    ///
    /// # Errors
    /// [`NnError`] naming a missing tensor or a shape that does not match.
    fn load_tensors(&mut self, tensors: &[NamedTensor]) -> Result<(), NnError>;
    /// All parameters in one flat vector (for publishing and checksums).
    fn flat_params(&self) -> &[f32];
    /// Replaces all parameters with a vector from [`ActorCritic::flat_params`] of a model
    /// with the same architecture (adopting a published policy). Optimiser state is kept.
    ///
    /// # Errors
    /// [`NnError::ParamCount`] when the length differs; [`NnError::NonFinite`] for NaN/inf.
    fn set_flat_params(&mut self, params: &[f32]) -> Result<(), NnError>;
}
