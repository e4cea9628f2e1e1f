//! The recurrent core: stacked LSTM or GRU layers between the encoder (or the raw
//! observation) and the policy and value networks, run over `steps x batch` rows.
//!
//! A model's recurrent state per env is one flat row: every layer's state of the actor's
//! stack, then (when actor and critic keep separate cores, as sb3-contrib does by default)
//! every layer's state of the critic's.

use rand::Rng;

use crate::network::NetworkConfig;
use crate::recurrent::{CellKind, Recurrent, RecurrentCache};

/// Stacked recurrent layers, each with its cache.
pub(crate) struct CoreStack {
    layers: Vec<Recurrent>,
    caches: Vec<RecurrentCache>,
    /// One layer's initial states gathered from the model's state rows.
    state0: Vec<f32>,
    /// Gradient scratch between layers.
    d_between: Vec<f32>,
}

impl CoreStack {
    /// `layers` layers of `hidden` units on inputs of `input` values.
    pub(crate) fn new(kind: CellKind, input: usize, hidden: usize, layers: usize) -> Self {
        let layers: Vec<Recurrent> = (0..layers)
            .map(|l| Recurrent {
                kind,
                input: if l == 0 { input } else { hidden },
                hidden,
            })
            .collect();
        CoreStack {
            caches: vec![RecurrentCache::default(); layers.len()],
            layers,
            state0: Vec::new(),
            d_between: Vec::new(),
        }
    }

    /// Output width.
    pub(crate) fn hidden(&self) -> usize {
        self.layers[0].hidden
    }

    /// Number of parameters.
    pub(crate) fn num_params(&self) -> usize {
        self.layers.iter().map(Recurrent::num_params).sum()
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
        let (mut p, mut s) = (0, at);
        for (layer, cache) in self.layers.iter().zip(self.caches.iter_mut()) {
            let size = layer.state_size();
            self.state0.clear();
            for b in 0..batch {
                let row = b * row_width + s;
                self.state0.extend_from_slice(&state_in[row..row + size]);
            }
            let n = layer.num_params();
            layer.forward(
                &params[p..p + n],
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
            p += n;
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
        let offsets: Vec<usize> = self
            .layers
            .iter()
            .scan(0, |p, l| {
                let at = *p;
                *p += l.num_params();
                Some(at)
            })
            .collect();
        d_xs.clear();
        d_xs.extend_from_slice(d_outputs);
        for (l, layer) in self.layers.iter().enumerate().rev() {
            let range = offsets[l]..offsets[l] + layer.num_params();
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

impl CoreStack {
    /// Checkpoint tensors `{prefix}.{layer}.weight_ih` (`input x gates`, PyTorch's
    /// transposed), `weight_hh` (`hidden x gates`), `bias_ih`, `bias_hh`.
    pub(crate) fn tensors(&self, prefix: &str, params: &[f32]) -> Vec<crate::NamedTensor> {
        let mut out = Vec::new();
        let mut p = 0;
        for (l, layer) in self.layers.iter().enumerate() {
            let g = layer.gates();
            for (name, shape) in [
                ("weight_ih", vec![layer.input, g]),
                ("weight_hh", vec![layer.hidden, g]),
                ("bias_ih", vec![g]),
                ("bias_hh", vec![g]),
            ] {
                let n: usize = shape.iter().product();
                out.push(crate::NamedTensor {
                    name: format!("{prefix}.{l}.{name}"),
                    shape,
                    data: params[p..p + n].to_vec(),
                });
                p += n;
            }
        }
        out
    }
}

/// A model's recurrent core: the actor's stack, and the critic's own unless shared.
pub(crate) struct CoreSide {
    actor: CoreStack,
    critic: Option<CoreStack>,
    d_xs: Vec<f32>,
    d_xs_critic: Vec<f32>,
}

impl CoreSide {
    /// The core `config` asks for on inputs of `input` values, or `None` without one.
    pub(crate) fn new(config: &NetworkConfig, input: usize) -> Option<Self> {
        let kind = config.core.cell()?;
        let stack = || CoreStack::new(kind, input, config.core_size, config.core_layers.max(1));
        Some(CoreSide {
            actor: stack(),
            critic: (!config.core_shared).then(stack),
            d_xs: Vec::new(),
            d_xs_critic: Vec::new(),
        })
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
            let kind = match l[0].kind {
                CellKind::Lstm => "lstm",
                CellKind::Gru => "gru",
            };
            format!("{kind} {}x{}", l[0].hidden, l.len())
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
        let split = self.actor.num_params();
        let actor_states = self.actor.state_size();
        let (actor_params, critic_params) = params.split_at(split);
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
        if parallel && state_out.is_none() {
            return rayon::join(
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
        let split = self.actor.num_params();
        let (actor_grads, critic_grads) = grads.split_at_mut(split);
        match &mut self.critic {
            None => {
                // Both networks read the same outputs: their gradients add.
                for (p, v) in d_policy.iter_mut().zip(d_value) {
                    *p += v;
                }
                self.actor
                    .backward(&params[..split], d_policy, actor_grads, &mut self.d_xs);
            }
            Some(critic) => {
                let (actor, d_xs, d_xs_critic) =
                    (&mut self.actor, &mut self.d_xs, &mut self.d_xs_critic);
                let (actor_params, critic_params) = params.split_at(split);
                let mut run_actor = || actor.backward(actor_params, d_policy, actor_grads, d_xs);
                let mut run_critic =
                    || critic.backward(critic_params, d_value, critic_grads, d_xs_critic);
                if parallel {
                    rayon::join(run_actor, run_critic);
                } else {
                    run_actor();
                    run_critic();
                }
                for (a, c) in self.d_xs.iter_mut().zip(&self.d_xs_critic) {
                    *a += c;
                }
            }
        }
        &self.d_xs
    }

    /// Checkpoint tensors `core.{policy|value|shared}.{layer}.*`.
    pub(crate) fn tensors(&self, params: &[f32]) -> Vec<crate::NamedTensor> {
        let split = self.actor.num_params();
        match &self.critic {
            None => self.actor.tensors("core.shared", params),
            Some(c) => {
                let mut out = self.actor.tensors("core.policy", &params[..split]);
                out.extend(c.tensors("core.value", &params[split..]));
                out
            }
        }
    }
}
