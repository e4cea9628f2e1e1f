//! Element-wise hot loops (bias + activation, activation backward, Adam), compiled twice:
//! once for the baseline target and once with AVX2 enabled, picked at run time. The code is
//! the same plain Rust (no intrinsics, no fused multiply-add), so both paths give
//! bit-identical results; the wide one just processes 8 lanes instead of 4.

use crate::activation::{fast_tanh, Activation};

/// Whether the CPU runs the AVX2 build of these loops (detected once, cached by std).
#[inline]
fn wide() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
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
            if wide() {
                // SAFETY: AVX2 support was just detected.
                return unsafe { body_avx2($($arg),*) };
            }
            body($($arg),*)
        }
    };
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

#[cfg(test)]
mod tests {
    use super::*;

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
