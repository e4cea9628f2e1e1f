//! What PPO needs from a model ([`ActorCritic`]), and the values it exchanges with one.

use rand_xoshiro::Xoshiro256PlusPlus;

use crate::network::Head;
use crate::NnError;

/// The RNG actions are sampled with.
pub type SampleRng = Xoshiro256PlusPlus;

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

/// What PPO needs from a model. A GPU backend implements this; PPO does not change.
pub trait ActorCritic: Send {
    /// Observation width.
    fn obs_dim(&self) -> usize;
    /// The action head.
    fn head(&self) -> Head;
    /// Samples an action per observation row; writes actions, their log-probs and values.
    /// `sde_noise` holds each row's gSDE exploration matrix
    /// ([`NetworkConfig::sde_noise_len`] standard normals a row); empty draws a fresh one
    /// per row and step (and is ignored without gSDE).
    fn act(
        &mut self,
        obs: &[f32],
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
        rngs: &mut [SampleRng],
        sde_noise: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
        values: &mut [f32],
    );
    /// The most likely action per row (evaluation).
    fn act_greedy(&mut self, obs: &[f32], actions: &mut [f32]);
    /// Value estimates per row.
    fn values(&mut self, obs: &[f32], out: &mut [f32]);
    /// Training forward pass over a minibatch: log-probs of `actions`, entropies, values.
    /// Keeps what [`ActorCritic::backward`] needs.
    fn evaluate(&mut self, obs: &[f32], actions: &[f32], out: &mut Evaluation);
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
    /// Clips the global gradient norm to `max_grad_norm` (if given), takes one optimiser
    /// step with learning rate `lr`, clears the gradients; returns the norm before clipping.
    fn optimizer_step(&mut self, lr: f32, max_grad_norm: Option<f32>) -> f32;
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
