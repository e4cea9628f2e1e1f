//! Element-wise hot loops (bias + activation, activation backward, Adam, a recurrent
//! cell's gates at each step, forward and backward), compiled twice:
//! once for the baseline target and once with AVX2 enabled, picked by the kernel path. The code is
//! the same plain Rust (no intrinsics, no fused multiply-add), so both paths give
//! bit-identical results; the wide one just processes 8 lanes instead of 4.

use crate::activation::{fast_tanh, Activation};

/// The logistic function through [`fast_tanh`]: `sigmoid(x) = (1 + tanh(x / 2)) / 2`.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    0.5 + 0.5 * fast_tanh(0.5 * x)
}

/// Whether the AVX2 build of these loops runs: the kernel path has AVX2 (or wider).
#[inline]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn wide() -> bool {
    cfg!(target_arch = "x86_64") && crate::kernel_path::kernel_path().avx2()
}

/// Declares `$name` running `$body` over its arguments, with an AVX2 twin chosen at run time.
macro_rules! multiversion {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$doc])*
        pub(crate) fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            unsafe fn body_avx2($($arg: $ty),*) {
                body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::kernels::wide() {
                // SAFETY: AVX2 support was just detected.
                return unsafe { body_avx2($($arg),*) };
            }
            body($($arg),*)
        }
    };
}

/// `bytes[i] = floats[i]` rounded to the nearest whole number (halves away from zero)
/// and saturated to 0..=255 (a NaN gives 0): byte pixels that travelled as floats, whole
/// numbers, back to the bytes they were. With AVX2 the rounding is an instruction instead
/// of a call per value.
///
/// # Panics
/// When the lengths differ.
pub fn round_to_bytes(floats: &[f32], bytes: &mut [u8]) {
    assert_eq!(floats.len(), bytes.len(), "as many bytes as floats");
    #[inline(always)]
    fn body(floats: &[f32], bytes: &mut [u8]) {
        for (b, v) in bytes.iter_mut().zip(floats) {
            *b = v.round() as u8;
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn body_avx2(floats: &[f32], bytes: &mut [u8]) {
        body(floats, bytes)
    }
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX2 support was just detected.
        return unsafe { body_avx2(floats, bytes) };
    }
    body(floats, bytes)
}

multiversion! {
    /// `y[r][c] = act(y[r][c] + bias[c])` over rows of `bias.len()` values (`act` None:
    /// linear).
    fn bias_activation(y: &mut [f32], bias: &[f32], act: Option<Activation>) {
        for row in y.chunks_exact_mut(bias.len()) {
            match act {
                Some(Activation::Tanh) => {
                    for (v, b) in row.iter_mut().zip(bias) {
                        *v = fast_tanh(*v + b);
                    }
                }
                Some(Activation::Relu) => {
                    for (v, b) in row.iter_mut().zip(bias) {
                        *v = (*v + b).max(0.0);
                    }
                }
                None => {
                    for (v, b) in row.iter_mut().zip(bias) {
                        *v += b;
                    }
                }
            }
        }
    }
}

multiversion! {
    /// Multiplies `grad` by the activation's derivative, given the activation's outputs.
    fn activation_backward(act: Activation, outputs: &[f32], grad: &mut [f32]) {
        match act {
            Activation::Tanh => {
                for (g, y) in grad.iter_mut().zip(outputs) {
                    *g *= 1.0 - y * y;
                }
            }
            Activation::Relu => {
                for (g, y) in grad.iter_mut().zip(outputs) {
                    if *y <= 0.0 {
                        *g = 0.0;
                    }
                }
            }
        }
    }
}

multiversion! {
    /// Adds each row of `rows` (width `sums.len()`) into `sums`.
    fn add_rows(rows: &[f32], sums: &mut [f32]) {
        for row in rows.chunks_exact(sums.len()) {
            for (s, v) in sums.iter_mut().zip(row) {
                *s += v;
            }
        }
    }
}

/// Constants of one Adam step.
#[derive(Clone, Copy)]
pub(crate) struct AdamStep {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// `lr / (1 - beta1^t)`.
    pub step: f32,
    /// `sqrt(1 - beta2^t)`.
    pub bias2_sqrt: f32,
}

multiversion! {
    /// One Adam update of `params` from `grads`, moments `m` and `v`.
    fn adam_update(params: &mut [f32], grads: &[f32], m: &mut [f32], v: &mut [f32], c: AdamStep) {
        for (((p, g), m), v) in params.iter_mut().zip(grads).zip(m.iter_mut()).zip(v.iter_mut()) {
            *m = c.beta1 * *m + (1.0 - c.beta1) * g;
            *v = c.beta2 * *v + (1.0 - c.beta2) * g * g;
            *p -= c.step * *m / (v.sqrt() / c.bias2_sqrt + c.eps);
        }
    }
}

multiversion! {
    /// One LSTM step over a batch: each row of `gates` holds its gates' input projections
    /// (input, forget, cell, output; `4h`), `projected` the hidden state's; on return
    /// `gates` holds them squashed and `last` (rows of `h` then `c`) the state after the
    /// step from `before`; `outputs` gets the new hidden states.
    fn lstm_forward_step(
        gates: &mut [f32],
        projected: &[f32],
        b_hh: &[f32],
        before: &[f32],
        last: &mut [f32],
        outputs: &mut [f32]
    ) {
        let h = b_hh.len() / 4;
        let rows = gates
            .chunks_exact_mut(4 * h)
            .zip(projected.chunks_exact(4 * h))
            .zip(before.chunks_exact(2 * h).zip(last.chunks_exact_mut(2 * h)))
            .zip(outputs.chunks_exact_mut(h));
        for (((a, p), (state, out)), output) in rows {
            for (v, (p, bias)) in a.iter_mut().zip(p.iter().zip(b_hh)) {
                *v += p + bias;
            }
            // Input, forget and output gates squash to (0, 1), the cell's candidate to
            // (-1, 1): straight loops over slices of exactly `h` vectorise.
            let (gates_if, rest) = a.split_at_mut(2 * h);
            let (candidate, gate_o) = rest.split_at_mut(h);
            for v in gates_if.iter_mut() {
                *v = sigmoid(*v);
            }
            for v in candidate.iter_mut() {
                *v = fast_tanh(*v);
            }
            for v in gate_o.iter_mut() {
                *v = sigmoid(*v);
            }
            let (gi, gf) = (&a[..h], &a[h..2 * h]);
            let (gc, go) = (&a[2 * h..3 * h], &a[3 * h..4 * h]);
            let cell_before = &state[h..2 * h];
            let (out_h, out_c) = out.split_at_mut(h);
            let out_c = &mut out_c[..h];
            for j in 0..h {
                let cell = gf[j] * cell_before[j] + gi[j] * gc[j];
                out_c[j] = cell;
                out_h[j] = go[j] * fast_tanh(cell);
            }
            output.copy_from_slice(out_h);
        }
    }
}

multiversion! {
    /// One GRU step over a batch (PyTorch's cell: the reset gate scales the hidden
    /// state's projection): `gates` rows hold the input projections (reset, update, new;
    /// `3h`) and get the gates; `hidden_new` gets each row's hidden projection of the new
    /// gate (its backward needs it), `last` and `outputs` the new hidden states.
    fn gru_forward_step(
        gates: &mut [f32],
        projected: &[f32],
        b_hh: &[f32],
        before: &[f32],
        hidden_new: &mut [f32],
        last: &mut [f32],
        outputs: &mut [f32]
    ) {
        let h = b_hh.len() / 3;
        let rows = gates
            .chunks_exact_mut(3 * h)
            .zip(projected.chunks_exact(3 * h))
            .zip(before.chunks_exact(h).zip(hidden_new.chunks_exact_mut(h)))
            .zip(last.chunks_exact_mut(h).zip(outputs.chunks_exact_mut(h)));
        for (((a, p), (state, new)), (out, output)) in rows {
            // One written slice a loop, as in the LSTM's backward step: they vectorise.
            let (a_r, rest) = a.split_at_mut(h);
            let (a_z, a_n) = rest.split_at_mut(h);
            let (a_z, a_n) = (&mut a_z[..h], &mut a_n[..h]);
            let (p_r, p_z, p_n) = (&p[..h], &p[h..2 * h], &p[2 * h..3 * h]);
            let (b_r, b_z, b_n) = (&b_hh[..h], &b_hh[h..2 * h], &b_hh[2 * h..3 * h]);
            for j in 0..h {
                a_r[j] = sigmoid(a_r[j] + p_r[j] + b_r[j]);
            }
            for j in 0..h {
                a_z[j] = sigmoid(a_z[j] + p_z[j] + b_z[j]);
            }
            for j in 0..h {
                new[j] = p_n[j] + b_n[j];
            }
            for j in 0..h {
                a_n[j] = fast_tanh(a_n[j] + a_r[j] * new[j]);
            }
            for j in 0..h {
                out[j] = (1.0 - a_z[j]) * a_n[j] + a_z[j] * state[j];
            }
            output.copy_from_slice(out);
        }
    }
}

multiversion! {
    /// One LSTM step back over a batch: from the squashed `gates`, the state `before` the
    /// step, `d_outputs` and the gradient `carry` flowing back from the next step, writes
    /// the gates' gradient (`d_in`, also `d_hid` for the hidden weights) and leaves in
    /// `carry` the cell's own path back (the hidden one is added by the caller).
    fn lstm_backward_step(
        h: usize,
        gates: &[f32],
        before: &[f32],
        d_outputs: &[f32],
        carry: &mut [f32],
        d_gates: (&mut [f32], &mut [f32])
    ) {
        let (d_in, d_hid) = d_gates;
        let rows = gates
            .chunks_exact(4 * h)
            .zip(before.chunks_exact(2 * h))
            .zip(d_outputs.chunks_exact(h).zip(carry.chunks_exact_mut(2 * h)))
            .zip(d_in.chunks_exact_mut(4 * h).zip(d_hid.chunks_exact_mut(4 * h)));
        for (((a, state), (d_out, c)), (di, dh)) in rows {
            let (gi, gf) = (&a[..h], &a[h..2 * h]);
            let (gc, go) = (&a[2 * h..3 * h], &a[3 * h..4 * h]);
            let cell_before = &state[h..2 * h];
            let (carry_h, carry_c) = c.split_at_mut(h);
            let carry_c = &mut carry_c[..h];
            let (di_i, rest) = di.split_at_mut(h);
            let (di_f, rest) = rest.split_at_mut(h);
            let (di_c, di_o) = rest.split_at_mut(h);
            let (di_f, di_c, di_o) = (&mut di_f[..h], &mut di_c[..h], &mut di_o[..h]);
            // Loops that each write one slice: one that wrote all six vectorised poorly (its
            // outputs share parents, so the compiler would have to check them for overlap).
            // First the hidden state's and the cell's gradients, kept in `carry`.
            for j in 0..h {
                let cell = gf[j] * cell_before[j] + gi[j] * gc[j];
                let tc = fast_tanh(cell);
                let d_h = d_out[j] + carry_h[j];
                carry_h[j] = d_h;
                carry_c[j] += d_h * go[j] * (1.0 - tc * tc);
            }
            let (d_h, d_cell) = (&*carry_h, &*carry_c);
            for j in 0..h {
                di_i[j] = d_cell[j] * gc[j] * gi[j] * (1.0 - gi[j]);
            }
            for j in 0..h {
                di_f[j] = d_cell[j] * cell_before[j] * gf[j] * (1.0 - gf[j]);
            }
            for j in 0..h {
                di_c[j] = d_cell[j] * gi[j] * (1.0 - gc[j] * gc[j]);
            }
            for j in 0..h {
                let tc = fast_tanh(gf[j] * cell_before[j] + gi[j] * gc[j]);
                di_o[j] = d_h[j] * tc * go[j] * (1.0 - go[j]);
            }
            // The cell state's own path back; the hidden one is added by the caller.
            for j in 0..h {
                carry_c[j] *= gf[j];
            }
            carry_h.fill(0.0);
            dh.copy_from_slice(di);
        }
    }
}

multiversion! {
    /// One GRU step back over a batch: the gates' gradient into `d_in` (input weights)
    /// and `d_hid` (hidden weights: the new gate's scaled by the reset gate); `carry`
    /// becomes the hidden state's direct path back.
    fn gru_backward_step(
        h: usize,
        gates: &[f32],
        before: &[f32],
        hidden_new: &[f32],
        d_outputs: &[f32],
        carry: &mut [f32],
        d_gates: (&mut [f32], &mut [f32])
    ) {
        let (d_in, d_hid) = d_gates;
        let rows = gates
            .chunks_exact(3 * h)
            .zip(before.chunks_exact(h).zip(hidden_new.chunks_exact(h)))
            .zip(d_outputs.chunks_exact(h).zip(carry.chunks_exact_mut(h)))
            .zip(d_in.chunks_exact_mut(3 * h).zip(d_hid.chunks_exact_mut(3 * h)));
        for (((a, (state, new)), (d_out, c)), (di, dh)) in rows {
            let (r, z, n) = (&a[..h], &a[h..2 * h], &a[2 * h..3 * h]);
            let (di_r, rest) = di.split_at_mut(h);
            let (di_z, di_n) = rest.split_at_mut(h);
            let (di_z, di_n) = (&mut di_z[..h], &mut di_n[..h]);
            // The hidden state's gradient first, kept in `carry`.
            for j in 0..h {
                c[j] += d_out[j];
            }
            let d_h = &*c;
            for j in 0..h {
                di_n[j] = d_h[j] * (1.0 - z[j]) * (1.0 - n[j] * n[j]);
            }
            for j in 0..h {
                di_z[j] = d_h[j] * (state[j] - n[j]) * z[j] * (1.0 - z[j]);
            }
            for j in 0..h {
                di_r[j] = di_n[j] * new[j] * r[j] * (1.0 - r[j]);
            }
            // The hidden weights see the new gate's gradient through the reset gate.
            dh[..2 * h].copy_from_slice(&di[..2 * h]);
            let (dh_n, di_n) = (&mut dh[2 * h..3 * h], &di[2 * h..3 * h]);
            for j in 0..h {
                dh_n[j] = di_n[j] * r[j];
            }
            for j in 0..h {
                c[j] *= z[j];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wide build rounds as the scalar `round` does: halves away from zero, whole
    /// numbers exact, saturated at both ends, a NaN to 0; past the last whole vector too.
    #[test]
    fn bytes_round_as_the_scalar_cast_does() {
        let mut floats: Vec<f32> = (0..=255).map(|v| v as f32).collect();
        floats.extend([
            0.5,
            1.5,
            2.5,
            254.49,
            254.5,
            -0.4,
            -0.6,
            -7.0,
            255.6,
            300.0,
            1e9,
            f32::NAN,
        ]);
        floats.extend((0..37).map(|i| i as f32 * 7.31 - 20.0));
        let mut bytes = vec![0; floats.len()];
        round_to_bytes(&floats, &mut bytes);
        let want: Vec<u8> = floats.iter().map(|v| v.round() as u8).collect();
        assert_eq!(bytes, want);
        assert_eq!(
            &bytes[256..268],
            &[1, 2, 3, 254, 255, 0, 0, 0, 255, 255, 255, 0]
        );
    }

    #[test]
    fn dispatched_loops_match_plain_reference() {
        let bias: Vec<f32> = (0..7).map(|i| i as f32 * 0.3 - 1.0).collect();
        let input: Vec<f32> = (0..7 * 13)
            .map(|i| ((i * 29) % 17) as f32 * 0.4 - 3.0)
            .collect();
        for act in [Some(Activation::Tanh), Some(Activation::Relu), None] {
            let mut y = input.clone();
            bias_activation(&mut y, &bias, act);
            for (k, (out, x)) in y.iter().zip(&input).enumerate() {
                let z = x + bias[k % 7];
                let want = match act {
                    Some(Activation::Tanh) => fast_tanh(z),
                    Some(Activation::Relu) => z.max(0.0),
                    None => z,
                };
                assert_eq!(*out, want);
            }
        }
        let mut grad = input.clone();
        let outputs: Vec<f32> = input.iter().map(|x| fast_tanh(*x)).collect();
        activation_backward(Activation::Tanh, &outputs, &mut grad);
        for k in 0..grad.len() {
            assert_eq!(grad[k], input[k] * (1.0 - outputs[k] * outputs[k]));
        }
        let mut sums = vec![0.0; 7];
        add_rows(&input, &mut sums);
        for (c, s) in sums.iter().enumerate() {
            let want: f32 = input.iter().skip(c).step_by(7).sum();
            assert!((s - want).abs() < 1e-4);
        }
    }
}
