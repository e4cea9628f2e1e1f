//! The two networks after the front: the policy network ending in its head, and the value
//! network, each with its per-batch scratch space.

use crate::actor_critic::SampleRng;
use crate::head::{HeadInput, PolicyHead};
use crate::mlp::{Mlp, MlpCache};

/// The policy network and its head.
pub(super) struct PolicySide {
    pub(super) mlp: Mlp,
    pub(super) head: PolicyHead,
    pub(super) cache: MlpCache,
    /// Gradient w.r.t. the network's outputs.
    d_out: Vec<f32>,
}

/// The value network.
pub(super) struct ValueSide {
    pub(super) mlp: Mlp,
    pub(super) cache: MlpCache,
}

/// The policy's parameters: the network's, and the Gaussian head's log-stds (empty for a
/// categorical head).
#[derive(Clone, Copy)]
pub(super) struct PolicyParams<'a> {
    pub(super) net: &'a [f32],
    pub(super) log_std: &'a [f32],
}

/// Where the policy's gradients go: its network's, the Gaussian head's log-stds', and
/// (with an encoder or a core in front) its input's.
pub(super) struct PolicyGrads<'a> {
    pub(super) net: &'a mut [f32],
    pub(super) log_std: &'a mut [f32],
    pub(super) input: Option<&'a mut Vec<f32>>,
}

impl PolicySide {
    /// `mlp` ending in `head`.
    pub(super) fn new(mlp: Mlp, head: PolicyHead) -> Self {
        PolicySide {
            mlp,
            head,
            cache: MlpCache::default(),
            d_out: Vec::new(),
        }
    }

    /// Forward pass, then an action and its log-probability sampled per row ([`PolicyHead::sample`]).
    pub(super) fn sample(
        &mut self,
        params: PolicyParams<'_>,
        obs: &[f32],
        parts: (&[usize], &mut [SampleRng]),
        sde_noise: &[f32],
        (actions, log_probs): (&mut [f32], &mut [f32]),
    ) {
        let batch = obs.len() / self.mlp.input_size();
        self.mlp.forward(params.net, obs, batch, &mut self.cache);
        let input = HeadInput {
            outputs: self.cache.last_output(),
            latent: self.cache.hidden_output(),
            log_std: params.log_std,
        };
        self.head
            .sample(input, parts, sde_noise, actions, log_probs);
    }

    /// Forward pass, then the most likely action per row.
    pub(super) fn greedy(&mut self, net: &[f32], obs: &[f32], actions: &mut [f32]) {
        let batch = obs.len() / self.mlp.input_size();
        let outputs = self.mlp.forward(net, obs, batch, &mut self.cache);
        self.head.greedy(outputs, actions);
    }

    /// Forward pass, then log-probs and entropies of `actions` (and a Gaussian's means).
    pub(super) fn evaluate(
        &mut self,
        params: PolicyParams<'_>,
        obs: &[f32],
        actions: &[f32],
        out: (&mut Vec<f32>, &mut Vec<f32>, &mut Vec<f32>),
    ) {
        let batch = obs.len() / self.mlp.input_size();
        self.d_out.resize(batch * self.mlp.output_size(), 0.0);
        self.mlp.forward(params.net, obs, batch, &mut self.cache);
        let input = HeadInput {
            outputs: self.cache.last_output(),
            latent: self.cache.hidden_output(),
            log_std: params.log_std,
        };
        self.head.evaluate(input, actions, out, &mut self.d_out);
    }

    /// Back-propagates per-sample gradients w.r.t. log-prob, entropy and means of the last
    /// evaluated minibatch into `grads`.
    pub(super) fn backward(
        &mut self,
        params: PolicyParams<'_>,
        d_head: (&[f32], &[f32], &[f32]),
        grads: PolicyGrads<'_>,
    ) {
        let batch = d_head.0.len();
        self.d_out.resize(batch * self.mlp.output_size(), 0.0);
        let input = HeadInput {
            outputs: self.cache.last_output(),
            latent: self.cache.hidden_output(),
            log_std: params.log_std,
        };
        self.head
            .backward(input, d_head, &mut self.d_out, grads.log_std);
        match grads.input {
            Some(g) => {
                self.mlp
                    .backward_with_input(params.net, &mut self.cache, &self.d_out, grads.net, g)
            }
            None => self
                .mlp
                .backward(params.net, &mut self.cache, &self.d_out, grads.net),
        }
    }
}

impl ValueSide {
    /// `mlp` with one output.
    pub(super) fn new(mlp: Mlp) -> Self {
        ValueSide {
            mlp,
            cache: MlpCache::default(),
        }
    }

    /// The values of `obs`'s rows.
    pub(super) fn forward(&mut self, params: &[f32], obs: &[f32]) -> &[f32] {
        let batch = obs.len() / self.mlp.input_size();
        self.mlp.forward(params, obs, batch, &mut self.cache)
    }

    /// Back-propagates `d_values` into `grads` (and, with a front, its input's gradient).
    pub(super) fn backward(
        &mut self,
        params: &[f32],
        d_values: &[f32],
        grads: &mut [f32],
        grad_input: Option<&mut Vec<f32>>,
    ) {
        match grad_input {
            Some(g) => self
                .mlp
                .backward_with_input(params, &mut self.cache, d_values, grads, g),
            None => self.mlp.backward(params, &mut self.cache, d_values, grads),
        }
    }
}
