//! A multi-layer perceptron with a hand-written backward pass over `gemm`.
//!
//! Parameters live in one flat vector (per layer: weights `in x out` row-major, then
//! biases; the layout is a [`ParamBlocks`]), so the optimiser and gradient clipping work on
//! plain slices.

use rand::Rng;

use crate::activation::Activation;
use crate::init::orthogonal_transposed;
use crate::kernels::{activation_backward, add_rows, bias_activation};
use crate::matmul::{matmul, View};
use crate::params::{cut_mut, ParamBlocks};

/// Shape of a fully connected network.
#[derive(Clone, Debug, PartialEq)]
pub struct Mlp {
    sizes: Vec<usize>,
    activation: Activation,
    /// Per layer `{l}.weight` (`in x out`) then `{l}.bias`.
    layout: ParamBlocks,
}

/// Per-batch activations kept for the backward pass, grown on demand and reused.
#[derive(Clone, Debug, Default)]
pub struct MlpCache {
    /// `outputs[l]` is layer `l`'s output (`outputs[0]` a copy of the input).
    outputs: Vec<Vec<f32>>,
    grad_a: Vec<f32>,
    grad_b: Vec<f32>,
    batch: usize,
}

impl MlpCache {
    /// The output of the last forward pass.
    pub fn last_output(&self) -> &[f32] {
        self.outputs.last().map_or(&[], |v| &v[..])
    }

    /// What the last forward pass fed into its output layer: the last hidden layer's
    /// activations (the input itself for a network without hidden layers).
    pub fn hidden_output(&self) -> &[f32] {
        let n = self.outputs.len();
        self.outputs
            .get(n.saturating_sub(2))
            .map_or(&[], |v| &v[..])
    }
}

impl Mlp {
    /// `sizes = [input, hidden.., output]`; hidden layers use `activation`, the output is
    /// linear.
    ///
    /// # Panics
    /// With fewer than two sizes.
    pub fn new(sizes: &[usize], activation: Activation) -> Self {
        assert!(sizes.len() >= 2, "an MLP needs an input and an output size");
        let mut layout = ParamBlocks::new();
        for (l, w) in sizes.windows(2).enumerate() {
            layout.push(format!("{l}.weight"), &[w[0], w[1]]);
            layout.push(format!("{l}.bias"), &[w[1]]);
        }
        Mlp {
            sizes: sizes.to_vec(),
            activation,
            layout,
        }
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        self.layout.len()
    }

    /// Where each layer's weights and biases lie, and their names.
    pub fn layout(&self) -> &ParamBlocks {
        &self.layout
    }

    /// Input width.
    pub fn input_size(&self) -> usize {
        self.sizes[0]
    }

    /// Output width.
    pub fn output_size(&self) -> usize {
        *self.sizes.last().unwrap()
    }

    /// Layer sizes, input first.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// Orthogonal weights (gain `hidden_gain` for hidden layers, `output_gain` for the last),
    /// zero biases.
    pub fn init_orthogonal<R: Rng + ?Sized>(
        &self,
        hidden_gain: f32,
        output_gain: f32,
        rng: &mut R,
    ) -> Vec<f32> {
        let mut params = vec![0.0; self.num_params()];
        let layers = self.sizes.len() - 1;
        for l in 0..layers {
            let (fan_in, fan_out) = (self.sizes[l], self.sizes[l + 1]);
            let gain = if l + 1 == layers {
                output_gain
            } else {
                hidden_gain
            };
            // torch stores `out x in`; we store its transpose, `in x out`.
            let weights = &mut params[self.layout.range(2 * l)];
            orthogonal_transposed(weights, (fan_in, fan_out), gain, rng);
        }
        params
    }

    fn layer<'p>(&self, params: &'p [f32], l: usize) -> (&'p [f32], &'p [f32]) {
        (
            self.layout.get(params, 2 * l),
            self.layout.get(params, 2 * l + 1),
        )
    }

    /// Runs `batch` rows of `input` through the network; returns the output rows, also
    /// keeping every layer's output in `cache` for [`Mlp::backward`].
    ///
    /// # Panics
    /// When `params` or `input` have the wrong length.
    pub fn forward<'c>(
        &self,
        params: &[f32],
        input: &[f32],
        batch: usize,
        cache: &'c mut MlpCache,
    ) -> &'c [f32] {
        assert_eq!(params.len(), self.num_params(), "parameter vector length");
        assert_eq!(input.len(), batch * self.sizes[0], "input length");
        let layers = self.sizes.len() - 1;
        cache.outputs.resize_with(layers + 1, Vec::new);
        cache.batch = batch;
        for (l, size) in self.sizes.iter().enumerate() {
            cache.outputs[l].resize(batch * size, 0.0);
        }
        cache.outputs[0].copy_from_slice(input);
        for l in 0..layers {
            let (fan_in, fan_out) = (self.sizes[l], self.sizes[l + 1]);
            let (w, b) = self.layer(params, l);
            let (done, rest) = cache.outputs.split_at_mut(l + 1);
            let x = &done[l];
            let y = &mut rest[0];
            matmul(
                y,
                View::new(x, batch, fan_in),
                View::new(w, fan_in, fan_out),
                false,
            );
            let act = (l + 1 < layers).then_some(self.activation);
            bias_activation(y, b, act);
        }
        &cache.outputs[layers]
    }

    /// Back-propagates `grad_output` (d loss / d output, `batch x output`) through the batch
    /// last given to [`Mlp::forward`], *adding* d loss / d params into `grads`.
    ///
    /// # Panics
    /// When lengths disagree with the cached forward pass.
    pub fn backward(
        &self,
        params: &[f32],
        cache: &mut MlpCache,
        grad_output: &[f32],
        grads: &mut [f32],
    ) {
        self.backward_impl(params, cache, grad_output, grads, None);
    }

    /// [`Mlp::backward`], also writing d loss / d input (`batch x input`) into
    /// `grad_input`: what an encoder in front of the network back-propagates.
    ///
    /// # Panics
    /// As [`Mlp::backward`].
    pub fn backward_with_input(
        &self,
        params: &[f32],
        cache: &mut MlpCache,
        grad_output: &[f32],
        grads: &mut [f32],
        grad_input: &mut Vec<f32>,
    ) {
        self.backward_impl(params, cache, grad_output, grads, Some(grad_input));
    }

    fn backward_impl(
        &self,
        params: &[f32],
        cache: &mut MlpCache,
        grad_output: &[f32],
        grads: &mut [f32],
        grad_input: Option<&mut Vec<f32>>,
    ) {
        let batch = cache.batch;
        let layers = self.sizes.len() - 1;
        assert_eq!(
            grad_output.len(),
            batch * self.output_size(),
            "output-gradient length"
        );
        assert_eq!(grads.len(), self.num_params(), "gradient vector length");
        let MlpCache {
            outputs,
            grad_a,
            grad_b,
            ..
        } = cache;
        grad_a.clear();
        grad_a.extend_from_slice(grad_output);
        for l in (0..layers).rev() {
            let (fan_in, fan_out) = (self.sizes[l], self.sizes[l + 1]);
            let [gw, gb] = cut_mut(
                grads,
                [self.layout.range(2 * l), self.layout.range(2 * l + 1)],
            );
            let x = &outputs[l];
            // dW += X^T dY ; db += column sums of dY.
            matmul(
                gw,
                View::new(x, batch, fan_in).t(),
                View::new(grad_a, batch, fan_out),
                true,
            );
            add_rows(grad_a, gb);
            if l == 0 {
                if let Some(grad_input) = grad_input {
                    let (w, _) = self.layer(params, 0);
                    grad_input.resize(batch * fan_in, 0.0);
                    matmul(
                        grad_input,
                        View::new(grad_a, batch, fan_out),
                        View::new(w, fan_in, fan_out).t(),
                        false,
                    );
                }
                break;
            }
            // dX = dY W^T, then through the previous layer's activation.
            let (w, _) = self.layer(params, l);
            grad_b.resize(batch * fan_in, 0.0);
            matmul(
                grad_b,
                View::new(grad_a, batch, fan_out),
                View::new(w, fan_in, fan_out).t(),
                false,
            );
            activation_backward(self.activation, x, grad_b);
            std::mem::swap(grad_a, grad_b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus as StdRng;

    /// Loss = sum of (output * fixed weights); its gradient w.r.t. the output is the weights.
    fn loss(mlp: &Mlp, params: &[f32], x: &[f32], batch: usize, dl: &[f32]) -> f64 {
        let mut cache = MlpCache::default();
        let y = mlp.forward(params, x, batch, &mut cache);
        y.iter()
            .zip(dl)
            .map(|(a, b)| f64::from(*a) * f64::from(*b))
            .sum()
    }

    fn check_gradients(activation: Activation) {
        let mut rng = StdRng::seed_from_u64(11);
        let mlp = Mlp::new(&[3, 8, 5, 2], activation);
        let mut params = mlp.init_orthogonal(2f32.sqrt(), 1.0, &mut rng);
        for p in params.iter_mut() {
            *p += rng.random_range(-0.1..0.1); // non-zero biases too
        }
        let batch = 6;
        let x: Vec<f32> = (0..batch * 3)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let dl: Vec<f32> = (0..batch * 2)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut cache = MlpCache::default();
        mlp.forward(&params, &x, batch, &mut cache);
        let mut grads = vec![0.0; mlp.num_params()];
        mlp.backward(&params, &mut cache, &dl, &mut grads);
        let h = 1e-2_f32;
        let mut checked = 0;
        for i in 0..params.len() {
            let orig = params[i];
            params[i] = orig + h;
            let up = loss(&mlp, &params, &x, batch, &dl);
            params[i] = orig - h;
            let down = loss(&mlp, &params, &x, batch, &dl);
            params[i] = orig;
            let numeric = (up - down) / (2.0 * f64::from(h));
            let analytic = f64::from(grads[i]);
            if activation == Activation::Relu && (numeric - analytic).abs() > 1e-2 {
                continue; // a kink inside the finite-difference interval
            }
            assert!(
                (numeric - analytic).abs() <= 2e-3 + 2e-2 * numeric.abs(),
                "param {i}: numeric {numeric} analytic {analytic}"
            );
            checked += 1;
        }
        assert!(checked > params.len() * 9 / 10);
    }

    #[test]
    fn tanh_gradients_match_finite_differences() {
        check_gradients(Activation::Tanh);
    }

    #[test]
    fn relu_gradients_match_finite_differences() {
        check_gradients(Activation::Relu);
    }

    #[test]
    fn forward_matches_naive_loops() {
        let mut rng = StdRng::seed_from_u64(5);
        let mlp = Mlp::new(&[4, 6, 3], Activation::Tanh);
        let params = mlp.init_orthogonal(1.0, 1.0, &mut rng);
        let x: Vec<f32> = (0..8).map(|i| i as f32 * 0.1 - 0.4).collect();
        let mut cache = MlpCache::default();
        let y = mlp.forward(&params, &x, 2, &mut cache).to_vec();
        for b in 0..2 {
            let h: Vec<f32> = (0..6)
                .map(|o| {
                    let s: f32 = (0..4)
                        .map(|i| x[b * 4 + i] * params[i * 6 + o])
                        .sum::<f32>()
                        + params[24 + o];
                    s.tanh()
                })
                .collect();
            for o in 0..3 {
                let s: f32 =
                    (0..6).map(|i| h[i] * params[30 + i * 3 + o]).sum::<f32>() + params[48 + o];
                assert!((s - y[b * 3 + o]).abs() < 1e-5);
            }
        }
    }
}
