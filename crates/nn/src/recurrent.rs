//! Recurrent cores, LSTM and GRU, with PyTorch's equations and gate orders, run over
//! fixed-length sequences of a batch of envs and back-propagated through time.
//!
//! A sequence is `steps x batch` rows, step-major. Each env's hidden state starts from the
//! state given for the sequence (as stored when its first step was collected) and is reset
//! to zero before every step that starts an episode, so one sequence may hold the end of
//! one episode and the start of the next. Gradients stop at the sequence's first state
//! (truncated back-propagation through time) and at every reset.
//!
//! Parameters live in one flat vector (laid out by a [`ParamBlocks`]): the input weights
//! `input x gates` (PyTorch's `weight_ih` transposed), the hidden weights `hidden x gates`
//! (`weight_hh` transposed), then the input and hidden biases, each `gates` long. The gates are PyTorch's, in its
//! order: input, forget, cell, output for an LSTM; reset, update, new for a GRU. The input
//! projections of the whole sequence are one matrix product before the steps, their
//! gradients one after.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::init::orthogonal_transposed;
use crate::kernels::{
    add_rows, gru_backward_step, gru_forward_step, lstm_backward_step, lstm_forward_step,
};
use crate::matmul::{matmul, View};
use crate::params::{cut, cut_mut, ParamBlocks};
use crate::small_matmul::{small_matmul, transpose_into};

/// Which recurrent cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellKind {
    /// Long short-term memory: a hidden and a cell state.
    Lstm,
    /// Gated recurrent unit: a hidden state.
    Gru,
}

impl CellKind {
    /// Gates per hidden unit: 4 (LSTM) or 3 (GRU).
    fn gates_per_unit(self) -> usize {
        match self {
            CellKind::Lstm => 4,
            CellKind::Gru => 3,
        }
    }
}

/// A recurrent layer's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recurrent {
    kind: CellKind,
    input: usize,
    hidden: usize,
    /// `weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`.
    layout: ParamBlocks,
}

/// What a forward pass keeps for the backward pass, grown on demand and reused.
#[derive(Clone, Debug, Default)]
pub struct RecurrentCache {
    steps: usize,
    batch: usize,
    /// The inputs, `steps x batch x input`.
    xs: Vec<f32>,
    starts: Vec<bool>,
    /// Each step's gate activations (`batch x gates`).
    gates: Vec<f32>,
    /// GRU: each step's hidden projection of the new gate (`batch x hidden`).
    hidden_new: Vec<f32>,
    /// Each step's state before it, after any reset (`batch x state`).
    before: Vec<f32>,
    /// The outputs, `steps x batch x hidden`.
    outputs: Vec<f32>,
    /// The state after the last step (`batch x state`).
    last: Vec<f32>,
    d_gates_in: Vec<f32>,
    d_gates_hidden: Vec<f32>,
}

impl RecurrentCache {
    /// The outputs of the last forward pass (`steps x batch x hidden`).
    pub fn outputs(&self) -> &[f32] {
        &self.outputs
    }

    /// The state after the last step of the last forward pass (`batch x state`): what
    /// the next sequence starts from.
    pub fn last_state(&self) -> &[f32] {
        &self.last
    }
}

impl Recurrent {
    /// A `kind` layer on rows of `input` values with `hidden` units.
    pub fn new(kind: CellKind, input: usize, hidden: usize) -> Self {
        let gates = hidden * kind.gates_per_unit();
        let mut layout = ParamBlocks::new();
        layout.push("weight_ih", &[input, gates]);
        layout.push("weight_hh", &[hidden, gates]);
        layout.push("bias_ih", &[gates]);
        layout.push("bias_hh", &[gates]);
        Recurrent {
            kind,
            input,
            hidden,
            layout,
        }
    }

    /// The cell.
    pub fn kind(&self) -> CellKind {
        self.kind
    }

    /// Values per input row.
    pub fn input(&self) -> usize {
        self.input
    }

    /// Hidden units.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Where the weights and biases lie, and their names (PyTorch's, transposed shapes).
    pub fn layout(&self) -> &ParamBlocks {
        &self.layout
    }

    /// Gate pre-activations per row: 4 x hidden (LSTM) or 3 x hidden (GRU).
    pub fn gates(&self) -> usize {
        self.hidden * self.kind.gates_per_unit()
    }

    /// Values in one env's state: the hidden state, then (LSTM) the cell state.
    pub fn state_size(&self) -> usize {
        match self.kind {
            CellKind::Lstm => 2 * self.hidden,
            CellKind::Gru => self.hidden,
        }
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        self.layout.len()
    }

    /// The input weights, hidden weights, input biases and hidden biases of `values`.
    fn parts<'v>(&self, values: &'v [f32]) -> [&'v [f32]; 4] {
        cut(values, std::array::from_fn(|i| self.layout.range(i)))
    }

    /// Orthogonal weights with gain 1 and zero biases, as CleanRL initialises its LSTM
    /// (`orthogonal_` on PyTorch's `gates x input` and `gates x hidden` matrices).
    pub fn init_orthogonal<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<f32> {
        let g = self.gates();
        let mut params = vec![0.0; self.num_params()];
        for (i, fan_in) in [(0, self.input), (1, self.hidden)] {
            orthogonal_transposed(&mut params[self.layout.range(i)], (fan_in, g), 1.0, rng);
        }
        params
    }

    /// PyTorch's default initialisation of its recurrent layers: every weight and bias
    /// uniform in `+-1 / sqrt(hidden)` (what sb3-contrib's `RecurrentPPO` starts from with
    /// `ortho_init=False`).
    pub fn init_uniform<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<f32> {
        let bound = 1.0 / (self.hidden as f32).sqrt();
        (0..self.num_params())
            .map(|_| rng.random_range(-bound..bound))
            .collect()
    }

    /// Runs `steps x batch` input rows through the cell from `state0` (`batch x state`),
    /// zeroing an env's state before each step `starts` marks (`steps x batch`); returns
    /// the outputs (the hidden states, `steps x batch x hidden`).
    ///
    /// # Panics
    /// When a length disagrees with the shape.
    pub fn forward<'c>(
        &self,
        params: &[f32],
        xs: &[f32],
        starts: &[bool],
        state0: &[f32],
        (steps, batch): (usize, usize),
        cache: &'c mut RecurrentCache,
    ) -> &'c [f32] {
        let (h, g, s) = (self.hidden, self.gates(), self.state_size());
        assert_eq!(params.len(), self.num_params(), "parameter vector length");
        assert_eq!(xs.len(), steps * batch * self.input, "input length");
        assert_eq!(starts.len(), steps * batch, "episode-start flags");
        assert_eq!(state0.len(), batch * s, "initial state length");
        let [w_ih, w_hh_m, b_ih, b_hh] = self.parts(params);
        cache.steps = steps;
        cache.batch = batch;
        cache.xs.clear();
        cache.xs.extend_from_slice(xs);
        cache.starts.clear();
        cache.starts.extend_from_slice(starts);
        // Input projections of every step at once; the hidden ones go step by step.
        let rows = steps * batch;
        cache.gates.resize(rows * g, 0.0);
        matmul(
            &mut cache.gates,
            View::new(xs, rows, self.input),
            View::new(w_ih, self.input, g),
            false,
        );
        for row in cache.gates.chunks_exact_mut(g) {
            row.iter_mut().zip(b_ih).for_each(|(v, b)| *v += b);
        }
        cache.hidden_new.resize(rows * h, 0.0);
        cache.before.resize(rows * s, 0.0);
        cache.outputs.resize(rows * h, 0.0);
        cache.last.clear();
        cache.last.extend_from_slice(state0);
        let mut projected = vec![0.0; batch * g];
        let mut hidden = vec![0.0; batch * h];
        for t in 0..steps {
            let span = t * batch..(t + 1) * batch;
            let before = &mut cache.before[span.start * s..span.end * s];
            before.copy_from_slice(&cache.last);
            for (b, state) in before.chunks_exact_mut(s).enumerate() {
                if starts[span.start + b] {
                    state.fill(0.0);
                }
            }
            for (dst, state) in hidden.chunks_exact_mut(h).zip(before.chunks_exact(s)) {
                dst.copy_from_slice(&state[..h]);
            }
            small_matmul(&mut projected, &hidden, w_hh_m, h);
            let gates = &mut cache.gates[span.start * g..span.end * g];
            let outputs = &mut cache.outputs[span.start * h..span.end * h];
            match self.kind {
                CellKind::Lstm => {
                    lstm_forward_step(gates, &projected, b_hh, before, &mut cache.last, outputs);
                }
                CellKind::Gru => {
                    let new = &mut cache.hidden_new[span.start * h..span.end * h];
                    gru_forward_step(
                        gates,
                        &projected,
                        b_hh,
                        before,
                        new,
                        &mut cache.last,
                        outputs,
                    );
                }
            }
        }
        &cache.outputs
    }

    /// Back-propagates `d_outputs` (d loss / d outputs of the last forward pass) through
    /// time, *adding* d loss / d params into `grads` and writing d loss / d inputs into
    /// `d_xs`. Nothing flows into the sequence's first state or across a reset.
    ///
    /// # Panics
    /// When lengths disagree with the cached forward pass.
    pub fn backward(
        &self,
        params: &[f32],
        cache: &mut RecurrentCache,
        d_outputs: &[f32],
        grads: &mut [f32],
        d_xs: &mut Vec<f32>,
    ) {
        let (h, g, s) = (self.hidden, self.gates(), self.state_size());
        let (steps, batch) = (cache.steps, cache.batch);
        let rows = steps * batch;
        assert_eq!(d_outputs.len(), rows * h, "output-gradient length");
        assert_eq!(grads.len(), self.num_params(), "gradient vector length");
        let [w_ih, w_hh, ..] = self.parts(params);
        let [gw_ih, gw_hh, gb_ih, gb_hh] =
            cut_mut(grads, std::array::from_fn(|i| self.layout.range(i)));
        let RecurrentCache {
            xs,
            starts,
            gates,
            hidden_new,
            before,
            d_gates_in,
            d_gates_hidden,
            ..
        } = cache;
        d_gates_in.resize(rows * g, 0.0);
        d_gates_hidden.resize(rows * g, 0.0);
        // d loss / d state flowing back into step t from step t + 1.
        let mut carry = vec![0.0; batch * s];
        let mut d_hidden = vec![0.0; batch * h];
        // The hidden weights transposed once, so each step's product reads them in order.
        let mut w_hh_t = Vec::new();
        transpose_into(&mut w_hh_t, w_hh, h, g);
        for t in (0..steps).rev() {
            let span = t * batch..(t + 1) * batch;
            let gates = &gates[span.start * g..span.end * g];
            let before = &before[span.start * s..span.end * s];
            let d_in = &mut d_gates_in[span.start * g..span.end * g];
            let d_hid = &mut d_gates_hidden[span.start * g..span.end * g];
            let d_out = &d_outputs[span.start * h..span.end * h];
            match self.kind {
                CellKind::Lstm => {
                    lstm_backward_step(h, gates, before, d_out, &mut carry, (d_in, d_hid))
                }
                CellKind::Gru => {
                    let new = &hidden_new[span.start * h..span.end * h];
                    gru_backward_step(h, gates, before, new, d_out, &mut carry, (d_in, d_hid));
                }
            }
            // The gradient into the previous hidden state (the hidden weights' own
            // gradient is one product over every step, after the loop).
            small_matmul(&mut d_hidden, d_hid, &w_hh_t, g);
            for b in 0..batch {
                let c = &mut carry[b * s..(b + 1) * s];
                if starts[span.start + b] {
                    // The state was zeroed: nothing flows further back.
                    c.fill(0.0);
                } else {
                    for (cj, dj) in c[..h].iter_mut().zip(&d_hidden[b * h..(b + 1) * h]) {
                        *cj += dj;
                    }
                }
            }
        }
        // Hidden weights and biases over the whole sequence: each step's hidden state
        // before it (after any reset) times its gates' gradient.
        let hidden: Vec<f32> = before
            .chunks_exact(s)
            .flat_map(|state| &state[..h])
            .copied()
            .collect();
        matmul(
            gw_hh,
            View::new(&hidden, rows, h).t(),
            View::new(d_gates_hidden, rows, g),
            true,
        );
        add_rows(d_gates_hidden, gb_hh);
        // Input weights and biases, and the inputs' gradient, over the whole sequence.
        matmul(
            gw_ih,
            View::new(xs, rows, self.input).t(),
            View::new(d_gates_in, rows, g),
            true,
        );
        add_rows(d_gates_in, gb_ih);
        d_xs.resize(rows * self.input, 0.0);
        matmul(
            d_xs,
            View::new(d_gates_in, rows, g),
            View::new(w_ih, self.input, g).t(),
            false,
        );
    }
}

#[cfg(test)]
#[path = "recurrent_tests.rs"]
mod tests;
