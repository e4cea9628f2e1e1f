//! The actor-critic model PPO trains on the CPU: separate policy and value MLPs, a
//! categorical or diagonal-Gaussian head, all parameters in one flat vector with one Adam.

use crate::actor_critic::{ActorCritic, Evaluation, NamedTensor, SampleRng};
use crate::adam::Adam;
use crate::distribution::{
    categorical_eval, categorical_mode, categorical_sample, gaussian_entropy, gaussian_eval,
    gaussian_sample, sde_eval, sde_sample, standard_normals,
};
use crate::mlp::{Mlp, MlpCache};
use crate::network::{Head, NetworkConfig};
use crate::NnError;

/// Batches at least this large run the policy and value networks on two threads (when the
/// calling rayon pool has two); smaller ones are not worth the hand-off.
const PARALLEL_MIN_BATCH: usize = 64;

/// The policy network with its per-batch scratch space.
struct PolicySide {
    mlp: Mlp,
    head: Head,
    cache: MlpCache,
    /// Gradient w.r.t. the network's outputs.
    d_out: Vec<f32>,
    /// Actions of the last evaluated minibatch.
    actions: Vec<f32>,
    d_log_std_scratch: Vec<f32>,
    /// Whether the Gaussian head explores with gSDE (its latent width is the last hidden
    /// layer's, read off the cache).
    sde: bool,
}

/// The value network with its per-batch scratch space.
struct ValueSide {
    mlp: Mlp,
    cache: MlpCache,
}

/// The policy's parameters: the network's, and the Gaussian head's log-stds (empty for a
/// categorical head).
#[derive(Clone, Copy)]
struct PolicyParams<'a> {
    net: &'a [f32],
    log_std: &'a [f32],
}

impl PolicySide {
    /// Forward pass, then log-probs and entropies of `actions` (and a Gaussian's means).
    fn evaluate(
        &mut self,
        PolicyParams {
            net: params,
            log_std,
        }: PolicyParams<'_>,
        obs: &[f32],
        actions: &[f32],
        log_probs: &mut Vec<f32>,
        entropy: &mut Vec<f32>,
        means: &mut Vec<f32>,
    ) {
        let batch = obs.len() / self.mlp.input_size();
        means.clear();
        self.mlp.forward(params, obs, batch, &mut self.cache);
        self.actions.clear();
        self.actions.extend_from_slice(actions);
        let k = self.head.outputs();
        log_probs.resize(batch, 0.0);
        entropy.resize(batch, 0.0);
        self.d_out.resize(batch * k, 0.0);
        let outputs = self.cache.last_output();
        match self.head {
            Head::Categorical { .. } => {
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    let (lp, h) = categorical_eval(
                        &outputs[row.clone()],
                        actions[i] as usize,
                        0.0,
                        0.0,
                        &mut self.d_out[row],
                    );
                    log_probs[i] = lp;
                    entropy[i] = h;
                }
            }
            Head::Gaussian { dim } if self.sde => {
                means.extend_from_slice(&outputs[..batch * k]);
                let latent = self.cache.hidden_output();
                let width = latent.len() / batch;
                self.d_log_std_scratch.resize(log_std.len(), 0.0);
                let mut variance = vec![0.0; dim];
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    (log_probs[i], entropy[i]) = sde_eval(
                        &outputs[row.clone()],
                        &latent[i * width..(i + 1) * width],
                        log_std,
                        &actions[i * dim..(i + 1) * dim],
                        0.0,
                        0.0,
                        &mut self.d_out[row],
                        &mut self.d_log_std_scratch,
                        &mut variance,
                    );
                }
            }
            Head::Gaussian { dim } => {
                means.extend_from_slice(&outputs[..batch * k]);
                let h = gaussian_entropy(log_std);
                self.d_log_std_scratch.resize(dim, 0.0);
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    log_probs[i] = gaussian_eval(
                        &outputs[row.clone()],
                        log_std,
                        &actions[i * dim..(i + 1) * dim],
                        0.0,
                        0.0,
                        &mut self.d_out[row],
                        &mut self.d_log_std_scratch,
                    );
                    entropy[i] = h;
                }
            }
        }
    }

    /// Back-propagates per-sample gradients w.r.t. log-prob and entropy of the last
    /// evaluated minibatch into `grads` (network) and `log_std_grads` (Gaussian head).
    fn backward(
        &mut self,
        PolicyParams {
            net: params,
            log_std,
        }: PolicyParams<'_>,
        d_log_probs: &[f32],
        d_entropy: &[f32],
        d_means: &[f32],
        grads: &mut [f32],
        log_std_grads: &mut [f32],
    ) {
        let batch = d_log_probs.len();
        let k = self.head.outputs();
        self.d_out.resize(batch * k, 0.0);
        let outputs = self.cache.last_output();
        match self.head {
            Head::Categorical { .. } => {
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    categorical_eval(
                        &outputs[row.clone()],
                        self.actions[i] as usize,
                        d_log_probs[i],
                        d_entropy[i],
                        &mut self.d_out[row],
                    );
                }
            }
            Head::Gaussian { dim } if self.sde => {
                let latent = self.cache.hidden_output();
                let width = latent.len() / batch;
                let mut variance = vec![0.0; dim];
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    sde_eval(
                        &outputs[row.clone()],
                        &latent[i * width..(i + 1) * width],
                        log_std,
                        &self.actions[i * dim..(i + 1) * dim],
                        d_log_probs[i],
                        d_entropy[i],
                        &mut self.d_out[row.clone()],
                        log_std_grads,
                        &mut variance,
                    );
                    add_mean_gradients(&mut self.d_out[row.clone()], d_means, row);
                }
            }
            Head::Gaussian { dim } => {
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    gaussian_eval(
                        &outputs[row.clone()],
                        log_std,
                        &self.actions[i * dim..(i + 1) * dim],
                        d_log_probs[i],
                        d_entropy[i],
                        &mut self.d_out[row.clone()],
                        log_std_grads,
                    );
                    add_mean_gradients(&mut self.d_out[row.clone()], d_means, row);
                }
            }
        }
        self.mlp
            .backward(params, &mut self.cache, &self.d_out, grads);
    }
}

/// Adds a loss term's gradient w.r.t. the means (`d_means`, empty when there is none) to
/// one row's output gradient.
fn add_mean_gradients(d_out: &mut [f32], d_means: &[f32], row: std::ops::Range<usize>) {
    if !d_means.is_empty() {
        for (d, dm) in d_out.iter_mut().zip(&d_means[row]) {
            *d += dm;
        }
    }
}

impl ValueSide {
    fn forward(&mut self, params: &[f32], obs: &[f32], values: &mut Vec<f32>) {
        let batch = obs.len() / self.mlp.input_size();
        let v = self.mlp.forward(params, obs, batch, &mut self.cache);
        values.clear();
        values.extend_from_slice(v);
    }

    fn backward(&mut self, params: &[f32], d_values: &[f32], grads: &mut [f32]) {
        self.mlp.backward(params, &mut self.cache, d_values, grads);
    }
}

/// Runs `a` and `b`, on two threads when `parallel`.
fn join(parallel: bool, a: impl FnOnce() + Send, b: impl FnOnce() + Send) {
    if parallel {
        rayon::join(a, b);
    } else {
        a();
        b();
    }
}

/// [`ActorCritic`] over two [`Mlp`]s on the CPU. Large batches (training minibatches) run
/// the policy and value networks side by side on the calling rayon pool's threads; the
/// result is the same bit for bit either way.
pub struct MlpActorCritic {
    policy: PolicySide,
    value: ValueSide,
    head: Head,
    /// `[policy | value | log_std]`.
    params: Vec<f32>,
    grads: Vec<f32>,
    adam: Adam,
}

impl MlpActorCritic {
    /// A freshly initialised model.
    pub fn new(obs_dim: usize, head: Head, config: &NetworkConfig, rng: &mut SampleRng) -> Self {
        let sizes = |hidden: &[usize], out: usize| {
            let mut s = vec![obs_dim];
            s.extend_from_slice(hidden);
            s.push(out);
            s
        };
        let policy = Mlp::new(
            &sizes(&config.policy_hidden, head.outputs()),
            config.activation,
        );
        let value = Mlp::new(&sizes(&config.value_hidden, 1), config.activation);
        let (hidden_gain, policy_gain, value_gain) = if config.ortho_init {
            (2f32.sqrt(), 0.01, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        };
        let mut params = policy.init_orthogonal(hidden_gain, policy_gain, rng);
        params.extend(value.init_orthogonal(hidden_gain, value_gain, rng));
        let sde_len = config.sde_noise_len(obs_dim, head);
        if let Head::Gaussian { dim } = head {
            let n = if sde_len > 0 { sde_len } else { dim };
            params.extend(std::iter::repeat_n(config.log_std_init as f32, n));
        }
        let n = params.len();
        MlpActorCritic {
            policy: PolicySide {
                mlp: policy,
                head,
                cache: MlpCache::default(),
                d_out: Vec::new(),
                actions: Vec::new(),
                d_log_std_scratch: Vec::new(),
                sde: sde_len > 0,
            },
            value: ValueSide {
                mlp: value,
                cache: MlpCache::default(),
            },
            head,
            params,
            grads: vec![0.0; n],
            adam: Adam::new(n, 1e-5),
        }
    }

    fn split(&self) -> (usize, usize) {
        let p = self.policy.mlp.num_params();
        (p, p + self.value.mlp.num_params())
    }

    fn batch_of(&self, obs: &[f32]) -> usize {
        assert!(
            obs.len().is_multiple_of(self.policy.mlp.input_size()),
            "observation batch length"
        );
        obs.len() / self.policy.mlp.input_size()
    }

    fn parallel(batch: usize) -> bool {
        batch >= PARALLEL_MIN_BATCH && rayon::current_num_threads() > 1
    }

    /// Current log-stds (empty for a categorical head).
    pub fn log_std(&self) -> &[f32] {
        &self.params[self.split().1..]
    }
}

impl ActorCritic for MlpActorCritic {
    fn obs_dim(&self) -> usize {
        self.policy.mlp.input_size()
    }

    fn head(&self) -> Head {
        self.head
    }

    fn act(
        &mut self,
        obs: &[f32],
        rng: &mut SampleRng,
        sde_noise: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
        values: &mut [f32],
    ) {
        let batch = self.batch_of(obs);
        self.act_split(
            obs,
            &[batch],
            std::slice::from_mut(rng),
            sde_noise,
            actions,
            log_probs,
            values,
        );
    }

    fn act_split(
        &mut self,
        obs: &[f32],
        parts: &[usize],
        rngs: &mut [SampleRng],
        sde_noise: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
        values: &mut [f32],
    ) {
        let batch = self.batch_of(obs);
        assert_eq!(
            parts.iter().sum::<usize>(),
            batch,
            "parts must cover the batch"
        );
        assert_eq!(parts.len(), rngs.len(), "one RNG per part");
        let (p_end, v_end) = self.split();
        self.policy
            .mlp
            .forward(&self.params[..p_end], obs, batch, &mut self.policy.cache);
        let out = self.policy.cache.last_output();
        let k = self.head.outputs();
        let log_std = &self.params[v_end..];
        let sde_len = log_std.len();
        let (mut eps, mut variance) = (Vec::new(), Vec::new());
        if let (true, Head::Gaussian { dim }) = (self.policy.sde, self.head) {
            eps.resize(sde_len, 0.0);
            variance.resize(dim, 0.0);
        }
        // One forward pass for all parts; each part samples from its own RNG, so its
        // actions do not depend on what else was in the batch.
        let mut row = 0;
        for (&len, rng) in parts.iter().zip(rngs.iter_mut()) {
            for i in row..row + len {
                let dist = &out[i * k..(i + 1) * k];
                match self.head {
                    Head::Gaussian { dim } if self.policy.sde => {
                        let latent = self.policy.cache.hidden_output();
                        let width = latent.len() / batch;
                        let matrix = if sde_noise.is_empty() {
                            standard_normals(&mut eps, rng);
                            &eps[..]
                        } else {
                            &sde_noise[i * sde_len..(i + 1) * sde_len]
                        };
                        log_probs[i] = sde_sample(
                            dist,
                            &latent[i * width..(i + 1) * width],
                            log_std,
                            matrix,
                            &mut actions[i * dim..(i + 1) * dim],
                            &mut variance,
                        );
                    }
                    Head::Categorical { .. } => {
                        let (a, lp) = categorical_sample(dist, rng);
                        actions[i] = a as f32;
                        log_probs[i] = lp;
                    }
                    Head::Gaussian { dim } => {
                        log_probs[i] = gaussian_sample(
                            dist,
                            log_std,
                            rng,
                            &mut actions[i * dim..(i + 1) * dim],
                        );
                    }
                }
            }
            row += len;
        }
        let v = self.value.mlp.forward(
            &self.params[p_end..v_end],
            obs,
            batch,
            &mut self.value.cache,
        );
        values[..batch].copy_from_slice(v);
    }

    fn act_greedy(&mut self, obs: &[f32], actions: &mut [f32]) {
        let batch = self.batch_of(obs);
        let p_end = self.split().0;
        let out =
            self.policy
                .mlp
                .forward(&self.params[..p_end], obs, batch, &mut self.policy.cache);
        match self.head {
            Head::Categorical { n } => {
                for (i, row) in out.chunks_exact(n).enumerate() {
                    actions[i] = categorical_mode(row) as f32;
                }
            }
            Head::Gaussian { .. } => actions[..out.len()].copy_from_slice(out),
        }
    }

    fn values(&mut self, obs: &[f32], out: &mut [f32]) {
        let batch = self.batch_of(obs);
        let (p_end, v_end) = self.split();
        let v = self.value.mlp.forward(
            &self.params[p_end..v_end],
            obs,
            batch,
            &mut self.value.cache,
        );
        out[..batch].copy_from_slice(v);
    }

    fn evaluate(&mut self, obs: &[f32], actions: &[f32], out: &mut Evaluation) {
        let batch = self.batch_of(obs);
        let (p_end, v_end) = self.split();
        let (policy_params, rest) = self.params.split_at(p_end);
        let (value_params, log_std) = rest.split_at(v_end - p_end);
        let (policy, value) = (&mut self.policy, &mut self.value);
        let Evaluation {
            log_probs,
            entropy,
            values,
            means,
        } = out;
        join(
            Self::parallel(batch),
            || {
                policy.evaluate(
                    PolicyParams {
                        net: policy_params,
                        log_std,
                    },
                    obs,
                    actions,
                    log_probs,
                    entropy,
                    means,
                )
            },
            || value.forward(value_params, obs, values),
        );
    }

    fn backward(
        &mut self,
        d_log_probs: &[f32],
        d_entropy: &[f32],
        d_values: &[f32],
        d_means: &[f32],
    ) {
        let (p_end, v_end) = self.split();
        let (policy_params, rest) = self.params.split_at(p_end);
        let (value_params, log_std) = rest.split_at(v_end - p_end);
        let (policy_grads, rest) = self.grads.split_at_mut(p_end);
        let (value_grads, log_std_grads) = rest.split_at_mut(v_end - p_end);
        let (policy, value) = (&mut self.policy, &mut self.value);
        join(
            Self::parallel(d_log_probs.len()),
            || {
                policy.backward(
                    PolicyParams {
                        net: policy_params,
                        log_std,
                    },
                    d_log_probs,
                    d_entropy,
                    d_means,
                    policy_grads,
                    log_std_grads,
                )
            },
            || value.backward(value_params, d_values, value_grads),
        );
    }

    fn zero_grad(&mut self) {
        self.grads.fill(0.0);
    }

    fn optimizer_step(&mut self, lr: f32, max_grad_norm: Option<f32>) -> f32 {
        let norm = self.grads.iter().map(|g| g * g).sum::<f32>().sqrt();
        if let Some(max) = max_grad_norm {
            if norm > max {
                let scale = max / (norm + 1e-6);
                self.grads.iter_mut().for_each(|g| *g *= scale);
            }
        }
        self.adam.step(&mut self.params, &self.grads, lr);
        self.grads.fill(0.0);
        norm
    }

    fn tensors(&self) -> Vec<NamedTensor> {
        let mut out = Vec::new();
        let (p_end, v_end) = self.split();
        for (prefix, mlp, params) in [
            ("policy", &self.policy.mlp, &self.params[..p_end]),
            ("value", &self.value.mlp, &self.params[p_end..v_end]),
        ] {
            let mut off = 0;
            for (l, w) in mlp.sizes().windows(2).enumerate() {
                let (fan_in, fan_out) = (w[0], w[1]);
                out.push(NamedTensor {
                    name: format!("{prefix}.{l}.weight"),
                    shape: vec![fan_in, fan_out],
                    data: params[off..off + fan_in * fan_out].to_vec(),
                });
                off += fan_in * fan_out;
                out.push(NamedTensor {
                    name: format!("{prefix}.{l}.bias"),
                    shape: vec![fan_out],
                    data: params[off..off + fan_out].to_vec(),
                });
                off += fan_out;
            }
        }
        if v_end < self.params.len() {
            out.push(NamedTensor {
                name: "policy.log_std".into(),
                shape: vec![self.params.len() - v_end],
                data: self.params[v_end..].to_vec(),
            });
        }
        let n = self.params.len();
        out.push(NamedTensor {
            name: "adam.m".into(),
            shape: vec![n],
            data: self.adam.m.clone(),
        });
        out.push(NamedTensor {
            name: "adam.v".into(),
            shape: vec![n],
            data: self.adam.v.clone(),
        });
        out.push(NamedTensor {
            name: "adam.t".into(),
            shape: vec![1],
            data: vec![self.adam.t as f32],
        });
        out
    }

    fn load_tensors(&mut self, tensors: &[NamedTensor]) -> Result<(), NnError> {
        let expected = self.tensors();
        let mut flat = Vec::with_capacity(self.params.len());
        let mut adam = self.adam.clone();
        for want in &expected {
            let got = tensors
                .iter()
                .find(|t| t.name == want.name)
                .ok_or_else(|| NnError::MissingTensor(want.name.clone()))?;
            if got.shape != want.shape || got.data.len() != want.data.len() {
                return Err(NnError::ShapeMismatch {
                    name: want.name.clone(),
                    expected: want.shape.clone(),
                    found: got.shape.clone(),
                });
            }
            if let Some(i) = got.data.iter().position(|v| !v.is_finite()) {
                return Err(NnError::NonFinite {
                    name: want.name.clone(),
                    index: i,
                });
            }
            match want.name.as_str() {
                "adam.m" => adam.m.clone_from(&got.data),
                "adam.v" => adam.v.clone_from(&got.data),
                "adam.t" => adam.t = got.data[0] as u64,
                _ => flat.extend_from_slice(&got.data),
            }
        }
        self.params = flat;
        self.adam = adam;
        self.grads.fill(0.0);
        Ok(())
    }

    fn flat_params(&self) -> &[f32] {
        &self.params
    }

    fn set_flat_params(&mut self, params: &[f32]) -> Result<(), NnError> {
        if params.len() != self.params.len() {
            return Err(NnError::ParamCount {
                expected: self.params.len(),
                found: params.len(),
            });
        }
        if let Some(index) = params.iter().position(|v| !v.is_finite()) {
            return Err(NnError::NonFinite {
                name: "flat parameters".into(),
                index,
            });
        }
        self.params.copy_from_slice(params);
        Ok(())
    }
}

#[cfg(test)]
#[path = "mlp_actor_critic_tests.rs"]
mod tests;
