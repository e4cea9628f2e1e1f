//! The PPO update: rollout -> GAE -> epochs x shuffled minibatches -> clipped surrogate,
//! value and entropy losses -> gradient step, with optional KL early stop.

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use strata_nn::{ActorCritic, Evaluation, GradClip};

use crate::loss::{bound_loss, ppo_loss, LossCoefficients, LossInput, LossTerms};
use crate::obs_rows::ObsRows;
use crate::rollout::RolloutBuffer;
use crate::sequences::{has_admitted_step, sequence_count, SequenceBatch};
use crate::PpoConfig;

/// What one update did, for the metrics file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateStats {
    /// Mean clipped surrogate loss.
    pub policy_loss: f32,
    /// Mean value loss.
    pub value_loss: f32,
    /// Mean entropy.
    pub entropy: f32,
    /// Mean approximate KL (k3) over every minibatch of every epoch.
    pub approx_kl: f32,
    /// Mean approximate KL over the last epoch's minibatches only: what SB3 logs as
    /// `train/approx_kl`, for comparisons with it (usually above the all-epoch mean, since
    /// the policy moves away from the behaviour policy epoch by epoch). Like SB3's, it
    /// includes the minibatch whose KL stopped the update early.
    #[serde(default)]
    pub approx_kl_last_epoch: f32,
    /// Mean clip fraction.
    pub clip_fraction: f32,
    /// `1 - Var(returns - values) / Var(returns)` over the rollout.
    pub explained_variance: f32,
    /// Learning rate used.
    pub learning_rate: f32,
    /// Clip range used.
    pub clip_range: f32,
    /// Mean gradient norm before clipping.
    pub grad_norm: f32,
    /// Mean gradient norm of the policy network and its log-std before clipping.
    #[serde(default)]
    pub policy_grad_norm: f32,
    /// Mean gradient norm of the value network before clipping.
    #[serde(default)]
    pub value_grad_norm: f32,
    /// Epochs completed (fewer than configured after a KL early stop).
    pub epochs: usize,
    /// Minibatch steps taken.
    pub minibatches: usize,
    /// Whether the target-KL early stop fired.
    pub early_stopped: bool,
    /// Seconds in the forward pass.
    pub forward_seconds: f64,
    /// Seconds in loss and backward pass.
    pub backward_seconds: f64,
    /// Seconds in the optimiser step.
    pub optimizer_seconds: f64,
    /// Mean bounds loss on the Gaussian means (0 when `bound_coef` is 0).
    pub bound_loss: f32,
}

/// The PPO learner: minibatch scratch space and the shuffling RNG. Holds no threads.
pub struct Ppo {
    config: PpoConfig,
    rng: Xoshiro256PlusPlus,
    /// Rows (feed-forward) or sequences (recurrent) to draw minibatches from.
    indices: Vec<usize>,
    mb: Minibatch,
    sequences: SequenceBatch,
    d_log_probs: Vec<f32>,
    d_entropy: Vec<f32>,
    d_values: Vec<f32>,
    d_means: Vec<f32>,
    /// A Gaussian policy's action bounds, for the bounds loss.
    action_bounds: Option<(Vec<f32>, Vec<f32>)>,
    evaluation: Evaluation,
}

impl Ppo {
    /// A learner whose minibatch shuffling is seeded by `seed`.
    pub fn new(config: PpoConfig, seed: u64) -> Self {
        Ppo {
            config,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            indices: Vec::new(),
            mb: Minibatch::default(),
            sequences: SequenceBatch::default(),
            d_log_probs: Vec::new(),
            d_entropy: Vec::new(),
            d_values: Vec::new(),
            d_means: Vec::new(),
            action_bounds: None,
            evaluation: Evaluation::default(),
        }
    }

    /// The action bounds of a Gaussian policy, which `bound_coef` keeps its means within.
    #[must_use]
    pub fn with_action_bounds(mut self, low: Vec<f32>, high: Vec<f32>) -> Self {
        self.action_bounds = Some((low, high));
        self
    }

    /// The configuration.
    pub fn config(&self) -> &PpoConfig {
        &self.config
    }

    /// The shuffling RNG (saved in checkpoints).
    pub fn rng(&self) -> &Xoshiro256PlusPlus {
        &self.rng
    }

    /// Restores the shuffling RNG.
    pub fn set_rng(&mut self, rng: Xoshiro256PlusPlus) {
        self.rng = rng;
    }

    /// Trains `model` on `rollout` (advantages already computed). `progress_remaining` goes
    /// from 1 at the start of the run to 0 at its end and drives the annealing.
    pub fn update(
        &mut self,
        model: &mut dyn ActorCritic,
        rollout: &RolloutBuffer,
        progress_remaining: f32,
    ) -> UpdateStats {
        let c = &self.config;
        let anneal = |x: f64, on: bool| {
            if on {
                x as f32 * progress_remaining
            } else {
                x as f32
            }
        };
        let lr = anneal(c.learning_rate, c.anneal_lr);
        let clip = anneal(c.clip_range, c.anneal_clip_range).max(1e-8);
        let coefficients = LossCoefficients {
            clip_range: clip,
            clip_range_vf: c.clip_range_vf.map(|v| v as f32),
            vf_coef: c.vf_coef as f32,
            ent_coef: c.ent_coef as f32,
        };
        let (n_epochs, batch_size) = (c.n_epochs, c.batch_size);
        let target_kl = c.target_kl.map(|v| v as f32);
        let bound_coef = c.bound_coef as f32;
        let grad_clip = c.max_grad_norm.map(|v| GradClip {
            max_norm: v as f32,
            per_network: c.clip_grad_per_network,
        });
        let total = rollout.len();
        let mut stats = UpdateStats {
            learning_rate: lr,
            clip_range: clip,
            ..UpdateStats::default()
        };
        let mut sums = LossTerms::default();
        let (mut grad_norms, mut bound_sum) = ([0.0_f32; 3], 0.0);
        let (mut forward, mut backward, mut optimizer) =
            (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        self.indices.clear();
        // A recurrent policy trains on whole sequences ([`crate::sequences`]).
        let sequence_len = (rollout.state_len > 0).then(|| c.sequence_steps());
        let per_minibatch = match sequence_len {
            None => {
                // Dropped samples never enter a minibatch.
                self.indices
                    .extend((0..total).filter(|&i| rollout.admission[i] > 0.0));
                batch_size
            }
            Some(len) => {
                self.indices.extend(
                    (0..sequence_count(rollout, len))
                        .filter(|&k| has_admitted_step(rollout, len, k)),
                );
                (batch_size / len).max(1)
            }
        };
        let norm_adv = c.norm_adv;
        model.zero_grad();
        'epochs: for _ in 0..n_epochs {
            let (mut epoch_kl, mut epoch_minibatches) = (0.0_f32, 0_u32);
            self.indices.shuffle(&mut self.rng);
            let indices = std::mem::take(&mut self.indices);
            for ids in indices.chunks(per_minibatch) {
                let t0 = Instant::now();
                let real = match sequence_len {
                    None => {
                        self.mb.gather(rollout, ids, None, norm_adv);
                        let obs = self.mb.obs.batch(0..ids.len());
                        model.evaluate(obs, &self.mb.actions, &mut self.evaluation);
                        None
                    }
                    Some(len) => {
                        let seq = &mut self.sequences;
                        seq.fill(rollout, ids, len);
                        self.mb
                            .gather(rollout, &seq.rows, Some(&seq.real), norm_adv);
                        model.evaluate_sequences(
                            self.mb.obs.batch(0..seq.rows.len()),
                            &self.mb.actions,
                            seq.sequences(),
                            &mut self.evaluation,
                        );
                        Some(&seq.real[..])
                    }
                };
                let t1 = Instant::now();
                let n = self.mb.log_probs.len();
                self.d_log_probs.resize(n, 0.0);
                self.d_entropy.resize(n, 0.0);
                self.d_values.resize(n, 0.0);
                let input = LossInput {
                    new_log_probs: &self.evaluation.log_probs,
                    old_log_probs: &self.mb.log_probs,
                    advantages: &self.mb.advantages,
                    new_values: &self.evaluation.values,
                    old_values: &self.mb.values,
                    returns: &self.mb.returns,
                    entropy: &self.evaluation.entropy,
                    weights: Some(&self.mb.weights),
                    real,
                };
                let terms = ppo_loss(
                    &input,
                    coefficients,
                    &mut self.d_log_probs,
                    &mut self.d_entropy,
                    &mut self.d_values,
                );
                forward += t1 - t0;
                // Kept as it goes, before the KL stop: SB3 counts the minibatch that trips
                // the stop in the epoch's KL, so the figure compared with it does too.
                epoch_kl += terms.approx_kl;
                epoch_minibatches += 1;
                stats.approx_kl_last_epoch = epoch_kl / epoch_minibatches as f32;
                if let Some(kl) = target_kl {
                    if terms.approx_kl > 1.5 * kl {
                        stats.early_stopped = true;
                        self.indices = indices;
                        break 'epochs;
                    }
                }
                self.d_means.clear();
                if let Some((low, high)) = &self.action_bounds {
                    if bound_coef > 0.0 && !self.evaluation.means.is_empty() {
                        bound_sum += bound_loss(
                            &self.evaluation.means,
                            low,
                            high,
                            bound_coef,
                            &mut self.d_means,
                        );
                    }
                }
                model.backward(
                    &self.d_log_probs,
                    &self.d_entropy,
                    &self.d_values,
                    &self.d_means,
                );
                let t2 = Instant::now();
                let norms = model.optimizer_step(lr, grad_clip);
                grad_norms[0] += norms.global;
                grad_norms[1] += norms.policy;
                grad_norms[2] += norms.value;
                let t3 = Instant::now();
                backward += t2 - t1;
                optimizer += t3 - t2;
                sums.policy_loss += terms.policy_loss;
                sums.value_loss += terms.value_loss;
                sums.entropy += terms.entropy;
                sums.approx_kl += terms.approx_kl;
                sums.clip_fraction += terms.clip_fraction;
                stats.minibatches += 1;
            }
            self.indices = indices;
            stats.epochs += 1;
        }
        let m = stats.minibatches.max(1) as f32;
        stats.policy_loss = sums.policy_loss / m;
        stats.value_loss = sums.value_loss / m;
        stats.entropy = sums.entropy / m;
        stats.approx_kl = sums.approx_kl / m;
        stats.clip_fraction = sums.clip_fraction / m;
        stats.bound_loss = bound_sum / m;
        stats.grad_norm = grad_norms[0] / m;
        stats.policy_grad_norm = grad_norms[1] / m;
        stats.value_grad_norm = grad_norms[2] / m;
        stats.explained_variance = explained_variance(&rollout.values, &rollout.returns);
        stats.forward_seconds = forward.as_secs_f64();
        stats.backward_seconds = backward.as_secs_f64();
        stats.optimizer_seconds = optimizer.as_secs_f64();
        stats
    }
}

/// One minibatch's columns, gathered contiguous.
#[derive(Default)]
struct Minibatch {
    obs: ObsRows,
    actions: Vec<f32>,
    log_probs: Vec<f32>,
    advantages: Vec<f32>,
    values: Vec<f32>,
    returns: Vec<f32>,
    weights: Vec<f32>,
}

impl Minibatch {
    /// Gathers rows `idx` of the rollout; normalises the advantages over the rows `real`
    /// marks (all when `None`) when `norm_adv`.
    fn gather(
        &mut self,
        rollout: &RolloutBuffer,
        idx: &[usize],
        real: Option<&[bool]>,
        norm_adv: bool,
    ) {
        let ad = rollout.action_dim;
        self.obs.gather_rows_from(&rollout.obs, idx.iter().copied());
        self.actions.clear();
        self.log_probs.clear();
        self.advantages.clear();
        self.values.clear();
        self.returns.clear();
        self.weights.clear();
        for &k in idx {
            self.actions
                .extend_from_slice(&rollout.actions[k * ad..(k + 1) * ad]);
            self.log_probs.push(rollout.log_probs[k]);
            self.advantages.push(rollout.advantages[k]);
            self.values.push(rollout.values[k]);
            self.returns.push(rollout.returns[k]);
            self.weights.push(rollout.weights[k] * rollout.admission[k]);
        }
        if norm_adv {
            normalize(&mut self.advantages, real);
        }
    }
}

/// `(x - mean) / (std + 1e-8)` with the unbiased std, as SB3 and CleanRL do, over the
/// values `real` marks (all when `None`); fewer than two are left as they are.
fn normalize(values: &mut [f32], real: Option<&[bool]>) {
    let counts = |i: usize| real.is_none_or(|r| r[i]);
    let n = (0..values.len()).filter(|&i| counts(i)).count();
    if n < 2 {
        return;
    }
    let n = n as f64;
    let kept = || {
        values
            .iter()
            .enumerate()
            .filter(|(i, _)| counts(*i))
            .map(|(_, v)| f64::from(*v))
    };
    let mean = kept().sum::<f64>() / n;
    let var = kept().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let std = var.sqrt() + 1e-8;
    for v in values.iter_mut() {
        *v = ((f64::from(*v) - mean) / std) as f32;
    }
}

/// `1 - Var(y - y_pred) / Var(y)`; NaN when `y` has no variance.
pub fn explained_variance(predicted: &[f32], targets: &[f32]) -> f32 {
    let n = targets.len() as f64;
    let mean = |it: &mut dyn Iterator<Item = f64>| it.sum::<f64>() / n;
    let var_of = |f: &dyn Fn(usize) -> f64| {
        let m = mean(&mut (0..targets.len()).map(f));
        (0..targets.len()).map(|i| (f(i) - m).powi(2)).sum::<f64>() / n
    };
    let var_y = var_of(&|i| f64::from(targets[i]));
    if var_y == 0.0 {
        return f32::NAN;
    }
    let var_diff = var_of(&|i| f64::from(targets[i]) - f64::from(predicted[i]));
    (1.0 - var_diff / var_y) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_nn::{ActorCriticNet, Head, Memory, NetworkConfig, SampleRng};

    #[test]
    fn explained_variance_of_perfect_and_useless_predictions() {
        let y = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(explained_variance(&y, &y), 1.0);
        assert!(explained_variance(&[2.5; 4], &y).abs() < 1e-6);
        assert!(explained_variance(&y, &[1.0; 4]).is_nan());
    }

    #[test]
    fn normalised_advantages_have_zero_mean_unit_std() {
        let mut v = [1.0_f32, 5.0, -2.0, 7.0, 0.5];
        normalize(&mut v, None);
        let mean: f32 = v.iter().sum::<f32>() / 5.0;
        let var: f32 = v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / 4.0;
        assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5);
    }

    /// A two-armed bandit's model: one constant observation, two actions.
    fn bandit_model(rng: &mut SampleRng) -> ActorCriticNet {
        ActorCriticNet::new(
            1,
            Head::Categorical { n: 2 },
            &NetworkConfig::default(),
            rng,
        )
    }

    /// One batch of 64 one-step bandit episodes sampled by `model`, each action paid by
    /// `pay`, advantages computed.
    fn bandit_batch(
        model: &mut ActorCriticNet,
        rollout: &mut RolloutBuffer,
        rng: &mut SampleRng,
        pay: impl Fn(f32) -> f32,
    ) {
        let obs = rollout.obs.as_dense().unwrap().to_vec();
        model.act(
            &obs,
            Memory::none(),
            rng,
            &[],
            &mut rollout.actions,
            &mut rollout.log_probs,
            &mut rollout.values,
        );
        for k in 0..64 {
            rollout.rewards[k] = pay(rollout.actions[k]);
            rollout.terminated[k] = true;
        }
        rollout.compute_advantages(0.99, 0.95);
    }

    /// A one-step bandit: action 1 pays 1, action 0 pays 0. PPO must learn to prefer 1,
    /// and the KL early stop must cut epochs short with a tiny target.
    #[test]
    fn learns_a_bandit_and_stops_early_on_kl() {
        let mut rng = SampleRng::seed_from_u64(0);
        let mut model = bandit_model(&mut rng);
        let config = PpoConfig {
            n_steps: 1,
            batch_size: 16,
            n_epochs: 4,
            learning_rate: 3e-3,
            ..PpoConfig::default()
        };
        let mut ppo = Ppo::new(config.clone(), 1);
        let mut rollout = RolloutBuffer::new(64, 1, 1, 1);

        for _ in 0..30 {
            bandit_batch(&mut model, &mut rollout, &mut rng, |a| a);
            ppo.update(&mut model, &rollout, 1.0);
        }
        let share = rollout.actions.iter().sum::<f32>() / 64.0;
        assert!(share > 0.9, "share of the paying action: {share}");
        // A fresh, undecided model with a tiny KL target stops within the first epoch.
        let mut model = bandit_model(&mut rng);
        let mut strict = Ppo::new(
            PpoConfig {
                target_kl: Some(1e-6),
                n_epochs: 10,
                learning_rate: 1e-2,
                ..config
            },
            1,
        );
        bandit_batch(&mut model, &mut rollout, &mut rng, |a| a * 2.0 - 1.0);
        let s = strict.update(&mut model, &rollout, 1.0);
        assert!(s.early_stopped && s.epochs < 10, "{s:?}");
        // The minibatch that tripped the stop is in the last epoch's KL, as in SB3's log,
        // and not in the all-epoch mean of the minibatches that trained.
        assert!(s.approx_kl_last_epoch > s.approx_kl, "{s:?}");
    }

    /// The all-epoch KL averages the first epoch, where the policy has barely moved, with
    /// the later ones; the last epoch's mean (SB3's `approx_kl`) sits above it, and with
    /// one epoch the two are the same figure.
    #[test]
    fn last_epoch_kl_is_the_last_epochs_mean() {
        let update = |n_epochs| {
            let mut rng = SampleRng::seed_from_u64(3);
            let mut model = bandit_model(&mut rng);
            let config = PpoConfig {
                n_steps: 1,
                batch_size: 16,
                n_epochs,
                learning_rate: 1e-2,
                ..PpoConfig::default()
            };
            let mut rollout = RolloutBuffer::new(64, 1, 1, 1);
            bandit_batch(&mut model, &mut rollout, &mut rng, |a| a * 2.0 - 1.0);
            Ppo::new(config, 1).update(&mut model, &rollout, 1.0)
        };
        let one = update(1);
        assert_eq!(one.approx_kl_last_epoch, one.approx_kl, "{one:?}");
        // Same seeds, so two epochs begin as the one did: the second epoch's mean is what
        // is left of the two-epoch mean once the first epoch is taken out (not, say, the
        // last minibatch alone).
        let two = update(2);
        let second_epoch = 2.0 * two.approx_kl - one.approx_kl;
        assert!(
            (two.approx_kl_last_epoch - second_epoch).abs() <= 1e-4 * second_epoch.abs(),
            "last epoch {} against the second epoch's mean {second_epoch}",
            two.approx_kl_last_epoch
        );
        let four = update(4);
        assert!(four.approx_kl > 0.0, "{four:?}");
        assert!(
            four.approx_kl_last_epoch > 1.2 * four.approx_kl,
            "last epoch {} against all epochs {}",
            four.approx_kl_last_epoch,
            four.approx_kl
        );
    }
}
