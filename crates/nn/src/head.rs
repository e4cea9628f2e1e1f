//! The policy's head: the distribution the policy network's outputs parameterise
//! (categorical logits, diagonal-Gaussian means with free log-stds, or gSDE's
//! state-dependent exploration), and everything that depends on which: sampling, the
//! greedy action, log-probabilities and entropies with their gradients, and how many
//! log-std parameters there are. The one place that tells the kinds apart.

use serde::{Deserialize, Serialize};

use crate::distribution::{
    categorical_eval, categorical_mode, categorical_sample, gaussian_entropy, gaussian_eval,
    gaussian_sample, sde_eval, sde_sample, standard_normals, SampleRng,
};

/// Which distribution the policy outputs parameterise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Head {
    /// Logits over `n` actions; an action is one f32 holding the index.
    Categorical { n: usize },
    /// Means of `dim` independent Gaussians; log-stds are free parameters.
    Gaussian { dim: usize },
}

impl Head {
    /// Values per action.
    pub fn action_dim(self) -> usize {
        match self {
            Head::Categorical { .. } => 1,
            Head::Gaussian { dim } => dim,
        }
    }

    /// Policy-network outputs: logits, or the Gaussian's means.
    pub(crate) fn outputs(self) -> usize {
        match self {
            Head::Categorical { n } => n,
            Head::Gaussian { dim } => dim,
        }
    }

    /// Log-std parameters: none for a categorical head; one per action dimension, or with
    /// gSDE one per entry of the `latent x dim` exploration matrix.
    pub(crate) fn log_std_len(self, sde: bool, latent: usize) -> usize {
        match self {
            Head::Categorical { .. } => 0,
            Head::Gaussian { dim } if sde => latent * dim,
            Head::Gaussian { dim } => dim,
        }
    }
}

/// What the head reads from one forward pass of the policy network over `rows` rows.
#[derive(Clone, Copy)]
pub(crate) struct HeadInput<'a> {
    /// The network's outputs, `rows x outputs` (logits or means).
    pub outputs: &'a [f32],
    /// What fed its output layer, `rows x latent` (gSDE's features).
    pub latent: &'a [f32],
    /// The log-stds (empty for a categorical head).
    pub log_std: &'a [f32],
}

/// The policy head of a model, with its per-batch scratch space.
pub(crate) struct PolicyHead {
    kind: Head,
    /// Whether a Gaussian head explores with gSDE.
    sde: bool,
    /// Actions of the last evaluated minibatch.
    actions: Vec<f32>,
    /// Log-std gradients of an evaluation (discarded: only its backward pass keeps them).
    d_log_std_scratch: Vec<f32>,
}

impl PolicyHead {
    /// A `kind` head; `sde` asks a Gaussian head for gSDE (a categorical one ignores it).
    pub(crate) fn new(kind: Head, sde: bool) -> Self {
        PolicyHead {
            kind,
            sde: sde && matches!(kind, Head::Gaussian { .. }),
            actions: Vec::new(),
            d_log_std_scratch: Vec::new(),
        }
    }

    /// The distribution.
    pub(crate) fn kind(&self) -> Head {
        self.kind
    }

    /// Whether it explores with gSDE.
    pub(crate) fn sde(&self) -> bool {
        self.sde
    }

    /// Log-probabilities and entropies of `actions` (and a Gaussian's means) for the rows
    /// of `input`; `d_out` (`rows x outputs`) is scratch for the backward pass. Keeps the
    /// actions for [`PolicyHead::backward`].
    pub(crate) fn evaluate(
        &mut self,
        input: HeadInput<'_>,
        actions: &[f32],
        (log_probs, entropy, means): (&mut Vec<f32>, &mut Vec<f32>, &mut Vec<f32>),
        d_out: &mut [f32],
    ) {
        let k = self.kind.outputs();
        let batch = input.outputs.len() / k;
        let HeadInput {
            outputs,
            latent,
            log_std,
        } = input;
        means.clear();
        self.actions.clear();
        self.actions.extend_from_slice(actions);
        log_probs.resize(batch, 0.0);
        entropy.resize(batch, 0.0);
        match self.kind {
            Head::Categorical { .. } => {
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    let (lp, h) = categorical_eval(
                        &outputs[row.clone()],
                        actions[i] as usize,
                        0.0,
                        0.0,
                        &mut d_out[row],
                    );
                    log_probs[i] = lp;
                    entropy[i] = h;
                }
            }
            Head::Gaussian { dim } if self.sde => {
                means.extend_from_slice(&outputs[..batch * k]);
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
                        &mut d_out[row],
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
                        &mut d_out[row],
                        &mut self.d_log_std_scratch,
                    );
                    entropy[i] = h;
                }
            }
        }
    }

    /// The gradients of the last evaluated minibatch's loss: w.r.t. the network's outputs
    /// into `d_out` (overwritten), w.r.t. the log-stds added into `log_std_grads`, from the
    /// per-row gradients w.r.t. log-prob, entropy and (`d_means`, empty when none) means.
    pub(crate) fn backward(
        &mut self,
        input: HeadInput<'_>,
        (d_log_probs, d_entropy, d_means): (&[f32], &[f32], &[f32]),
        d_out: &mut [f32],
        log_std_grads: &mut [f32],
    ) {
        let batch = d_log_probs.len();
        let k = self.kind.outputs();
        let HeadInput {
            outputs,
            latent,
            log_std,
        } = input;
        match self.kind {
            Head::Categorical { .. } => {
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    categorical_eval(
                        &outputs[row.clone()],
                        self.actions[i] as usize,
                        d_log_probs[i],
                        d_entropy[i],
                        &mut d_out[row],
                    );
                }
            }
            Head::Gaussian { dim } if self.sde => {
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
                        &mut d_out[row.clone()],
                        log_std_grads,
                        &mut variance,
                    );
                    add_mean_gradients(&mut d_out[row.clone()], d_means, row);
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
                        &mut d_out[row.clone()],
                        log_std_grads,
                    );
                    add_mean_gradients(&mut d_out[row.clone()], d_means, row);
                }
            }
        }
    }

    /// Samples an action and its log-probability per row of `input`. The rows come in
    /// `parts`, each drawing from its own RNG, so a part's actions do not depend on what
    /// else was in the batch. gSDE draws each row's exploration matrix from `sde_noise`
    /// (`rows x log-stds`) when given, else fresh from the part's RNG.
    pub(crate) fn sample(
        &self,
        input: HeadInput<'_>,
        (parts, rngs): (&[usize], &mut [SampleRng]),
        sde_noise: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
    ) {
        let k = self.kind.outputs();
        let batch = input.outputs.len() / k;
        let HeadInput {
            outputs,
            latent,
            log_std,
        } = input;
        let sde_len = log_std.len();
        let (mut eps, mut variance) = (Vec::new(), Vec::new());
        if self.sde {
            eps.resize(sde_len, 0.0);
            variance.resize(self.kind.action_dim(), 0.0);
        }
        let mut row = 0;
        for (&len, rng) in parts.iter().zip(rngs.iter_mut()) {
            for i in row..row + len {
                let dist = &outputs[i * k..(i + 1) * k];
                match self.kind {
                    Head::Gaussian { dim } if self.sde => {
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
    }

    /// The most likely action per row of the network's `outputs`: the arg-max logit, or
    /// the means.
    pub(crate) fn greedy(&self, outputs: &[f32], actions: &mut [f32]) {
        match self.kind {
            Head::Categorical { n } => {
                for (i, row) in outputs.chunks_exact(n).enumerate() {
                    actions[i] = categorical_mode(row) as f32;
                }
            }
            Head::Gaussian { .. } => actions[..outputs.len()].copy_from_slice(outputs),
        }
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
