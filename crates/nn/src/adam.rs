//! Adam (Kingma & Ba) with PyTorch's update rule, over one flat parameter vector.

use serde::{Deserialize, Serialize};

use crate::kernels::{adam_update, AdamStep};

/// Adam's moments and step count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Adam {
    /// First-moment decay.
    pub beta1: f32,
    /// Second-moment decay.
    pub beta2: f32,
    /// Added to the denominator (1e-5 for PPO, not PyTorch's 1e-8).
    pub eps: f32,
    /// First moments.
    pub m: Vec<f32>,
    /// Second moments.
    pub v: Vec<f32>,
    /// Steps taken.
    pub t: u64,
}

impl Adam {
    /// Zeroed moments for `n` parameters.
    pub fn new(n: usize, eps: f32) -> Self {
        Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps,
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }

    /// One update of `params` from `grads` with learning rate `lr`.
    pub fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32) {
        self.t += 1;
        let bias1 = 1.0 - self.beta1.powi(self.t as i32);
        let bias2_sqrt = (1.0 - self.beta2.powi(self.t as i32)).sqrt();
        let constants = AdamStep {
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            step: lr / bias1,
            bias2_sqrt,
        };
        adam_update(params, grads, &mut self.m, &mut self.v, constants);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_step_moves_each_parameter_by_about_lr() {
        let mut adam = Adam::new(3, 1e-8);
        let mut p = [1.0_f32, 1.0, 1.0];
        adam.step(&mut p, &[0.5, -2.0, 0.0], 0.1);
        assert!((p[0] - 0.9).abs() < 1e-5);
        assert!((p[1] - 1.1).abs() < 1e-5);
        assert_eq!(p[2], 1.0);
    }

    #[test]
    fn minimises_a_quadratic() {
        let mut adam = Adam::new(2, 1e-5);
        let mut p = [3.0_f32, -2.0];
        for _ in 0..2000 {
            let g = [2.0 * (p[0] - 1.0), 2.0 * (p[1] + 0.5)];
            adam.step(&mut p, &g, 0.01);
        }
        assert!((p[0] - 1.0).abs() < 1e-2 && (p[1] + 0.5).abs() < 1e-2);
    }
}
