//! The recurrent core: stacked LSTM or GRU layers between the encoder (or the raw
//! observation) and the policy and value networks, run over `steps x batch` rows.
//!
//! A model's recurrent state per env is one flat row: every layer's state of the actor's
//! stack, then (when actor and critic keep separate cores, as sb3-contrib does by default)
//! every layer's state of the critic's.

use rand::Rng;

use crate::branches::{add_branch_gradient, join};
use crate::network::NetworkConfig;
use crate::params::{cut, cut_mut, ParamBlocks};
use crate::recurrent::{CellKind, Recurrent, RecurrentCache};

/// Stacked recurrent layers, each with its cache.
pub(crate) struct CoreStack {
    layers: Vec<Recurrent>,
    caches: Vec<RecurrentCache>,
    /// Layer `l`'s tensors as `{l}.*`.
    layout: ParamBlocks,
    /// Where each layer's parameters lie.
    spans: Vec<std::ops::Range<usize>>,
    /// One layer's initial states gathered from the model's state rows.
    state0: Vec<f32>,
    /// Gradient scratch between layers.
    d_between: Vec<f32>,
}

impl CoreStack {
    /// `layers` layers of `hidden` units on inputs of `input` values.
    pub(crate) fn new(kind: CellKind, input: usize, hidden: usize, layers: usize) -> Self {
        let layers: Vec<Recurrent> = (0..layers)
            .map(|l| Recurrent::new(kind, if l == 0 { input } else { hidden }, hidden))
            .collect();
        let mut layout = ParamBlocks::new();
        let spans = (layers.iter().enumerate())
            .map(|(l, layer)| layout.push_blocks(&l.to_string(), layer.layout()))
            .collect();
        CoreStack {
            caches: vec![RecurrentCache::default(); layers.len()],
            layers,
            layout,
            spans,
            state0: Vec::new(),
            d_between: Vec::new(),
        }
    }

    /// Output width.
    pub(crate) fn hidden(&self) -> usize {
        self.layers[0].hidden()
    }

    /// Where each layer's parameters lie, and their names.
    pub(crate) fn layout(&self) -> &ParamBlocks {
        &self.layout
    }

    /// Values of one env's state across the stack.
    pub(crate) fn state_size(&self) -> usize {
        self.layers.iter().map(Recurrent::state_size).sum()
    }

    /// The layers.
    pub(crate) fn layers(&self) -> &[Recurrent] {
        &self.layers
    }

    /// Layer by layer: orthogonal weights and zero biases (`orthogonal`), else PyTorch's
    /// default uniform initialisation.
    pub(crate) fn init<R: Rng + ?Sized>(&self, orthogonal: bool, rng: &mut R) -> Vec<f32> {
        self.layers
            .iter()
            .flat_map(|l| {
                if orthogonal {
                    l.init_orthogonal(rng)
                } else {
                    l.init_uniform(rng)
                }
            })
            .collect()
    }

    /// Runs `steps x batch` rows of `xs` through the stack. `state_in` holds each env's
    /// state row (`batch x row_width`, this stack's part at `at`) before the first step;
    /// `state_out`, when given, receives the states after the last step in the same
    /// layout. Returns the last layer's outputs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward<'c>(
        &'c mut self,
        params: &[f32],
        xs: &'c [f32],
        starts: &[bool],
        (state_in, mut state_out): (&[f32], Option<&mut [f32]>),
        (row_width, at): (usize, usize),
        (steps, batch): (usize, usize),
    ) -> &'c [f32] {
        let mut input = xs;
        let mut s = at;
        let layers = self.layers.iter().zip(&self.spans);
        for ((layer, span), cache) in layers.zip(self.caches.iter_mut()) {
            let size = layer.state_size();
            self.state0.clear();
            for b in 0..batch {
                let row = b * row_width + s;
                self.state0.extend_from_slice(&state_in[row..row + size]);
            }
            layer.forward(
                &params[span.clone()],
                input,
                starts,
                &self.state0,
                (steps, batch),
                cache,
            );
            if let Some(out) = state_out.as_deref_mut() {
                for (b, last) in cache.last_state().chunks_exact(size).enumerate() {
                    let row = b * row_width + s;
                    out[row..row + size].copy_from_slice(last);
                }
            }
            input = cache.outputs();
            s += size;
        }
        input
    }

    /// Back-propagates `d_outputs` through the stack's last forward pass, adding the
    /// parameter gradients into `grads` and writing d loss / d inputs into `d_xs`.
    pub(crate) fn backward(
        &mut self,
        params: &[f32],
        d_outputs: &[f32],
        grads: &mut [f32],
        d_xs: &mut Vec<f32>,
    ) {
        d_xs.clear();
        d_xs.extend_from_slice(d_outputs);
        for (l, layer) in self.layers.iter().enumerate().rev() {
            let range = self.spans[l].clone();
            std::mem::swap(d_xs, &mut self.d_between);
            layer.backward(
                &params[range.clone()],
                &mut self.caches[l],
                &self.d_between,
                &mut grads[range],
                d_xs,
            );
        }
    }
}

/// A model's recurrent core: the actor's stack, and the critic's own unless shared.
pub(crate) struct CoreSide {
    actor: CoreStack,
    critic: Option<CoreStack>,
    /// Checkpoint tensors `{policy|value|shared}.{layer}.weight_ih` (`input x gates`,
    /// PyTorch's transposed), `weight_hh` (`hidden x gates`), `bias_ih`, `bias_hh`.
    layout: ParamBlocks,
    /// Where the actor's and the critic's parameters lie (the critic's empty when shared).
    spans: [std::ops::Range<usize>; 2],
    d_xs: Vec<f32>,
    d_xs_critic: Vec<f32>,
}

impl CoreSide {
    /// The core `config` asks for on inputs of `input` values, or `None` without one.
    pub(crate) fn new(config: &NetworkConfig, input: usize) -> Option<Self> {
        let kind = config.core.cell()?;
        let stack = || CoreStack::new(kind, input, config.core_size, config.core_layers.max(1));
        let (actor, critic) = (stack(), (!config.core_shared).then(stack));
        let mut layout = ParamBlocks::new();
        let spans = match &critic {
            None => {
                let shared = layout.push_blocks("shared", actor.layout());
                [shared.clone(), shared.end..shared.end]
            }
            Some(c) => [
                layout.push_blocks("policy", actor.layout()),
                layout.push_blocks("value", c.layout()),
            ],
        };
        Some(CoreSide {
            actor,
            critic,
            layout,
            spans,
            d_xs: Vec::new(),
            d_xs_critic: Vec::new(),
        })
    }

    /// Where the actor's own parameters and the critic's lie within the core's, when
    /// each has its stack; `None` when one stack is shared.
    pub(crate) fn own_spans(&self) -> Option<[std::ops::Range<usize>; 2]> {
        self.critic.as_ref().map(|_| self.spans.clone())
    }

    /// Output width (what the policy and value networks read).
    pub(crate) fn output(&self) -> usize {
        self.actor.hidden()
    }

    /// Values of one env's state: the actor's stack, then the critic's.
    pub(crate) fn state_len(&self) -> usize {
        self.actor.state_size() + self.critic.as_ref().map_or(0, CoreStack::state_size)
    }

    /// Both stacks' parameters: orthogonal weights and zero biases (`orthogonal`, as
    /// CleanRL), else PyTorch's default (as sb3-contrib with `ortho_init=False`).
    pub(crate) fn init<R: Rng + ?Sized>(&self, orthogonal: bool, rng: &mut R) -> Vec<f32> {
        let mut params = self.actor.init(orthogonal, rng);
        if let Some(critic) = &self.critic {
            params.extend(critic.init(orthogonal, rng));
        }
        params
    }

    /// For people: `lstm 64 (policy), lstm 64 (value)`.
    pub(crate) fn describe(&self) -> String {
        let one = |stack: &CoreStack| {
            let l = stack.layers();
            let kind = match l[0].kind() {
                CellKind::Lstm => "lstm",
                CellKind::Gru => "gru",
            };
            format!("{kind} {}x{}", l[0].hidden(), l.len())
        };
        match &self.critic {
            None => format!("{} (shared)", one(&self.actor)),
            Some(c) => format!("{} (policy), {} (value)", one(&self.actor), one(c)),
        }
    }

    /// Runs `steps x (rows / steps)` rows through the core(s); returns what the policy
    /// and the value networks read. States as [`CoreStack::forward`] takes them, rows of
    /// [`CoreSide::state_len`]. Without states to write back, the two stacks run side by
    /// side on the calling rayon pool when `parallel`; each stack's result is the same
    /// either way.
    pub(crate) fn forward<'a>(
        &'a mut self,
        params: &[f32],
        xs: &'a [f32],
        starts: &[bool],
        (state_in, mut state_out): (&[f32], Option<&mut [f32]>),
        steps: usize,
        parallel: bool,
    ) -> (&'a [f32], &'a [f32]) {
        let width = self.state_len();
        let batch = starts.len() / steps;
        assert_eq!(state_in.len(), batch * width, "recurrent state length");
        let actor_states = self.actor.state_size();
        let [actor_params, critic_params] = cut(params, self.spans.clone());
        let CoreSide { actor, critic, .. } = self;
        let Some(critic) = critic else {
            let a = actor.forward(
                actor_params,
                xs,
                starts,
                (state_in, state_out),
                (width, 0),
                (steps, batch),
            );
            return (a, a);
        };
        if state_out.is_none() {
            return join(
                parallel,
                || {
                    actor.forward(
                        actor_params,
                        xs,
                        starts,
                        (state_in, None),
                        (width, 0),
                        (steps, batch),
                    )
                },
                || {
                    critic.forward(
                        critic_params,
                        xs,
                        starts,
                        (state_in, None),
                        (width, actor_states),
                        (steps, batch),
                    )
                },
            );
        }
        let a = actor.forward(
            actor_params,
            xs,
            starts,
            (state_in, state_out.as_deref_mut()),
            (width, 0),
            (steps, batch),
        );
        let v = critic.forward(
            critic_params,
            xs,
            starts,
            (state_in, state_out),
            (width, actor_states),
            (steps, batch),
        );
        (a, v)
    }

    /// Back-propagates the gradients w.r.t. what the policy and value networks read
    /// (`d_policy` is used as scratch) into `grads`, the two stacks side by side when
    /// `parallel`; returns d loss / d inputs.
    pub(crate) fn backward(
        &mut self,
        params: &[f32],
        d_policy: &mut [f32],
        d_value: &[f32],
        grads: &mut [f32],
        parallel: bool,
    ) -> &[f32] {
        let [actor_params, critic_params] = cut(params, self.spans.clone());
        let [actor_grads, critic_grads] = cut_mut(grads, self.spans.clone());
        match &mut self.critic {
            None => {
                // Both networks read the same outputs.
                add_branch_gradient(d_policy, d_value);
                self.actor
                    .backward(actor_params, d_policy, actor_grads, &mut self.d_xs);
            }
            Some(critic) => {
                let (actor, d_xs, d_xs_critic) =
                    (&mut self.actor, &mut self.d_xs, &mut self.d_xs_critic);
                join(
                    parallel,
                    || actor.backward(actor_params, d_policy, actor_grads, d_xs),
                    || critic.backward(critic_params, d_value, critic_grads, d_xs_critic),
                );
                add_branch_gradient(&mut self.d_xs, &self.d_xs_critic);
            }
        }
        &self.d_xs
    }

    /// Where the stacks' parameters lie, and their names (`{policy|value|shared}.*`).
    pub(crate) fn layout(&self) -> &ParamBlocks {
        &self.layout
    }
}
