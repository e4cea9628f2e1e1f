//! The PPO loss on one minibatch and its gradient w.r.t. the model's outputs.

/// A minibatch's loss terms (means over the minibatch).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LossTerms {
    /// Clipped surrogate policy loss.
    pub policy_loss: f32,
    /// Value loss (mean squared error, optionally clipped).
    pub value_loss: f32,
    /// Mean policy entropy.
    pub entropy: f32,
    /// Approximate KL(old || new), the k3 estimator `mean((r - 1) - ln r)`.
    pub approx_kl: f32,
    /// Fraction of samples whose ratio left the clip range.
    pub clip_fraction: f32,
}

/// Inputs for one minibatch, per sample.
pub struct LossInput<'a> {
    /// Log-probs under the current policy.
    pub new_log_probs: &'a [f32],
    /// Log-probs recorded when acting.
    pub old_log_probs: &'a [f32],
    /// Advantages (already normalised if that is on).
    pub advantages: &'a [f32],
    /// Current value estimates.
    pub new_values: &'a [f32],
    /// Values recorded when acting.
    pub old_values: &'a [f32],
    /// Value targets.
    pub returns: &'a [f32],
    /// Current entropies.
    pub entropy: &'a [f32],
    /// Off-policy weights `pi_prox / pi_behaviour` per sample (decoupled PPO); `None` means
    /// on-policy (all 1).
    pub weights: Option<&'a [f32]>,
    /// Which rows count (a sequence minibatch carries rows admission dropped, for the
    /// recurrent state's sake): the others get no gradient and stay out of every mean.
    /// `None`: all.
    pub real: Option<&'a [bool]>,
}

/// Coefficients of the loss.
#[derive(Clone, Copy, Debug)]
pub struct LossCoefficients {
    /// Policy ratio clip range.
    pub clip_range: f32,
    /// Value clip range, if on.
    pub clip_range_vf: Option<f32>,
    /// Value loss weight.
    pub vf_coef: f32,
    /// Entropy bonus weight.
    pub ent_coef: f32,
}

/// `loss = policy_loss + vf_coef * value_loss - ent_coef * entropy`; writes the gradient of
/// `loss` w.r.t. each sample's new log-prob, entropy and value.
pub fn ppo_loss(
    input: &LossInput<'_>,
    c: LossCoefficients,
    d_log_probs: &mut [f32],
    d_entropy: &mut [f32],
    d_values: &mut [f32],
) -> LossTerms {
    let n = input.new_log_probs.len();
    let counted = input.real.map_or(n, |r| r.iter().filter(|x| **x).count());
    let inv_n = 1.0 / counted.max(1) as f32;
    let mut terms = LossTerms::default();
    let (lo, hi) = (1.0 - c.clip_range, 1.0 + c.clip_range);
    for i in 0..n {
        if input.real.is_some_and(|r| !r[i]) {
            (d_log_probs[i], d_entropy[i], d_values[i]) = (0.0, 0.0, 0.0);
            continue;
        }
        let log_ratio = input.new_log_probs[i] - input.old_log_probs[i];
        let ratio = log_ratio.exp();
        let adv = input.advantages[i] * input.weights.map_or(1.0, |w| w[i]);
        let unclipped = -adv * ratio;
        let clipped = -adv * ratio.clamp(lo, hi);
        let outside = !(lo..=hi).contains(&ratio);
        // max(unclipped, clipped): when the clipped branch wins outside the range, the
        // sample contributes no gradient; otherwise d/dlogp (-adv * ratio) = -adv * ratio.
        terms.policy_loss += unclipped.max(clipped);
        d_log_probs[i] = if clipped > unclipped && outside {
            0.0
        } else {
            -adv * ratio * inv_n
        };
        terms.approx_kl += (ratio - 1.0) - log_ratio;
        terms.clip_fraction += f32::from(u8::from((ratio - 1.0).abs() > c.clip_range));

        let (v, target) = (input.new_values[i], input.returns[i]);
        let err = v - target;
        let (sq, grad) = match c.clip_range_vf {
            None => (err * err, 2.0 * err),
            Some(cv) => {
                let old = input.old_values[i];
                let delta = v - old;
                let v_clipped = old + delta.clamp(-cv, cv);
                let err_clipped = v_clipped - target;
                if err_clipped * err_clipped > err * err {
                    let inside = delta.abs() <= cv;
                    (
                        err_clipped * err_clipped,
                        if inside { 2.0 * err_clipped } else { 0.0 },
                    )
                } else {
                    (err * err, 2.0 * err)
                }
            }
        };
        terms.value_loss += sq;
        d_values[i] = c.vf_coef * grad * inv_n;
        terms.entropy += input.entropy[i];
        d_entropy[i] = -c.ent_coef * inv_n;
    }
    terms.policy_loss *= inv_n;
    terms.value_loss *= inv_n;
    terms.entropy *= inv_n;
    terms.approx_kl *= inv_n;
    terms.clip_fraction *= inv_n;
    terms
}

/// The bounds loss: `coef` times the mean over rows of the squared distance by which each
/// mean lies outside `[low, high]` (per action dimension, summed). Writes its gradient
/// w.r.t. each mean into `d_means` (laid out as `means`) and returns the loss.
pub fn bound_loss(
    means: &[f32],
    low: &[f32],
    high: &[f32],
    coef: f32,
    d_means: &mut Vec<f32>,
) -> f32 {
    let dim = low.len();
    let rows = means.len() / dim;
    let scale = coef / rows.max(1) as f32;
    d_means.clear();
    let mut loss = 0.0;
    for (j, m) in means.iter().enumerate() {
        let (lo, hi) = (low[j % dim], high[j % dim]);
        let excess = m - m.clamp(lo, hi);
        loss += excess * excess;
        d_means.push(2.0 * scale * excess);
    }
    loss * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(input: &LossInput<'_>, c: LossCoefficients) -> f64 {
        let n = input.new_log_probs.len();
        let (mut a, mut b, mut d) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        let t = ppo_loss(input, c, &mut a, &mut b, &mut d);
        f64::from(t.policy_loss) + f64::from(c.vf_coef * t.value_loss)
            - f64::from(c.ent_coef * t.entropy)
    }

    #[test]
    fn gradients_match_finite_differences_in_every_branch() {
        // Ratios inside and outside the clip range, positive and negative advantages,
        // value errors inside and outside the value clip.
        let new_lp = [-0.5_f32, -0.2, -1.4, -0.9, -0.7, -0.3];
        let old_lp = [-0.55_f32, -0.6, -1.0, -0.9, -0.4, -0.35];
        let adv = [1.0_f32, 1.0, -1.0, 0.5, -2.0, -0.7];
        let new_v = [0.5_f32, 1.5, -0.1, 0.3, 2.0, 0.9];
        let old_v = [0.45_f32, 0.5, 0.0, 0.3, 1.0, 1.0];
        let ret = [1.0_f32, 0.0, -1.0, 0.2, 3.0, 0.7];
        let ent = [0.6_f32, 0.5, 0.7, 0.6, 0.4, 0.5];
        let weights = [1.0_f32, 0.5, 2.0, 1.3, 0.8, 1.0];
        for (clip_vf, w) in [
            (None, None),
            (Some(0.2), None),
            (Some(0.2), Some(&weights[..])),
        ] {
            let c = LossCoefficients {
                clip_range: 0.2,
                clip_range_vf: clip_vf,
                vf_coef: 0.5,
                ent_coef: 0.01,
            };
            let input = LossInput {
                new_log_probs: &new_lp,
                old_log_probs: &old_lp,
                advantages: &adv,
                new_values: &new_v,
                old_values: &old_v,
                returns: &ret,
                entropy: &ent,
                weights: w,
                real: None,
            };
            let (mut dl, mut de, mut dv) = ([0.0; 6], [0.0; 6], [0.0; 6]);
            ppo_loss(&input, c, &mut dl, &mut de, &mut dv);
            let h = 1e-3;
            for i in 0..6 {
                let mut up = new_lp;
                up[i] += h;
                let mut down = new_lp;
                down[i] -= h;
                let f = |lp: &[f32; 6]| {
                    total(
                        &LossInput {
                            new_log_probs: lp,
                            ..input
                        },
                        c,
                    )
                };
                let numeric = (f(&up) - f(&down)) / (2.0 * f64::from(h));
                assert!(
                    (numeric - f64::from(dl[i])).abs() < 1e-3,
                    "logp {i}: {numeric} vs {}",
                    dl[i]
                );
                let mut up = new_v;
                up[i] += h;
                let mut down = new_v;
                down[i] -= h;
                let f = |v: &[f32; 6]| {
                    total(
                        &LossInput {
                            new_values: v,
                            ..input
                        },
                        c,
                    )
                };
                let numeric = (f(&up) - f(&down)) / (2.0 * f64::from(h));
                assert!(
                    (numeric - f64::from(dv[i])).abs() < 1e-3,
                    "value {i}: {numeric} vs {}",
                    dv[i]
                );
                let mut up = ent;
                up[i] += h;
                let f = |e: &[f32; 6]| {
                    total(
                        &LossInput {
                            entropy: e,
                            ..input
                        },
                        c,
                    )
                };
                let numeric = (f(&up) - f(&ent)) / f64::from(h);
                assert!((numeric - f64::from(de[i])).abs() < 1e-3);
            }
        }
    }

    #[test]
    fn kl_and_clip_fraction_are_zero_on_policy() {
        let lp = [-0.3_f32, -1.2];
        let input = LossInput {
            new_log_probs: &lp,
            old_log_probs: &lp,
            advantages: &[1.0, -1.0],
            new_values: &[0.0, 0.0],
            old_values: &[0.0, 0.0],
            returns: &[0.0, 0.0],
            entropy: &[0.5, 0.5],
            weights: None,
            real: None,
        };
        let c = LossCoefficients {
            clip_range: 0.2,
            clip_range_vf: None,
            vf_coef: 0.5,
            ent_coef: 0.0,
        };
        let t = ppo_loss(&input, c, &mut [0.0; 2], &mut [0.0; 2], &mut [0.0; 2]);
        assert_eq!(t.approx_kl, 0.0);
        assert_eq!(t.clip_fraction, 0.0);
        assert_eq!(t.policy_loss, 0.0);
    }

    #[test]
    fn bound_loss_is_zero_inside_and_its_gradient_matches_differences() {
        let (low, high) = ([-1.0_f32, -2.0], [1.0_f32, 2.0]);
        let mut d = Vec::new();
        assert_eq!(
            bound_loss(&[0.5, -1.5, 1.0, 2.0], &low, &high, 0.3, &mut d),
            0.0
        );
        assert!(d.iter().all(|&g| g == 0.0));
        let means = [1.5_f32, -2.5, -1.25, 0.0];
        let loss = bound_loss(&means, &low, &high, 0.3, &mut d);
        // Rows: (0.5² + 0.5²) and (0.25²); mean over 2 rows, times 0.3.
        assert!((loss - 0.3 * (0.5 + 0.0625) / 2.0).abs() < 1e-6, "{loss}");
        let mut scratch = Vec::new();
        for j in 0..means.len() {
            let (mut up, mut down) = (means, means);
            up[j] += 1e-3;
            down[j] -= 1e-3;
            let numeric = (bound_loss(&up, &low, &high, 0.3, &mut scratch)
                - bound_loss(&down, &low, &high, 0.3, &mut scratch))
                / 2e-3;
            assert!(
                (numeric - d[j]).abs() < 1e-3,
                "dim {j}: {numeric} vs {}",
                d[j]
            );
        }
    }

    #[test]
    fn rows_that_do_not_count_change_nothing() {
        let c = LossCoefficients {
            clip_range: 0.2,
            clip_range_vf: Some(0.3),
            vf_coef: 0.5,
            ent_coef: 0.01,
        };
        let all = LossInput {
            new_log_probs: &[-0.3, -2.0, -1.1],
            old_log_probs: &[-0.5, -0.2, -1.0],
            advantages: &[1.0, 5.0, -0.7],
            new_values: &[0.2, 9.0, -0.4],
            old_values: &[0.1, 0.0, -0.3],
            returns: &[0.5, -9.0, 0.0],
            entropy: &[0.6, 0.1, 0.4],
            weights: None,
            real: Some(&[true, false, true]),
        };
        let kept = |x: &[f32]| [x[0], x[2]];
        let (lp, olp, adv) = (
            kept(all.new_log_probs),
            kept(all.old_log_probs),
            kept(all.advantages),
        );
        let (v, ov, ret, ent) = (
            kept(all.new_values),
            kept(all.old_values),
            kept(all.returns),
            kept(all.entropy),
        );
        let two = LossInput {
            new_log_probs: &lp,
            old_log_probs: &olp,
            advantages: &adv,
            new_values: &v,
            old_values: &ov,
            returns: &ret,
            entropy: &ent,
            weights: None,
            real: None,
        };
        let (mut dl, mut de, mut dv) = ([9.0; 3], [9.0; 3], [9.0; 3]);
        let masked = ppo_loss(&all, c, &mut dl, &mut de, &mut dv);
        let (mut dl2, mut de2, mut dv2) = ([0.0; 2], [0.0; 2], [0.0; 2]);
        let plain = ppo_loss(&two, c, &mut dl2, &mut de2, &mut dv2);
        assert_eq!(masked, plain);
        assert_eq!((dl[1], de[1], dv[1]), (0.0, 0.0, 0.0));
        assert_eq!(
            [dl[0], dl[2], dv[0], dv[2], de[0]],
            [dl2[0], dl2[1], dv2[0], dv2[1], de2[0]]
        );
    }
}
