//! Action distributions over network outputs, one row per sample: categorical over logits,
//! diagonal Gaussian with a state-independent log-std, and the gSDE Gaussian whose
//! variance depends on the state through the policy's latent features. Each has sampling, log-prob and
//! entropy, and the gradients of both w.r.t. its inputs.

use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The RNG actions are sampled with.
pub type SampleRng = Xoshiro256PlusPlus;

/// `0.5 * ln(2 pi)`.
const HALF_LN_2PI: f32 = 0.918_938_5;

/// Log-softmax normaliser: `ln sum exp(z)`, computed stably.
#[inline]
fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    max + logits.iter().map(|z| (z - max).exp()).sum::<f32>().ln()
}

/// Samples an index with probability `softmax(logits)`; returns it and its log-prob.
#[inline]
pub fn categorical_sample<R: Rng + ?Sized>(logits: &[f32], rng: &mut R) -> (usize, f32) {
    let lse = log_sum_exp(logits);
    let u: f32 = rng.random();
    let mut cumulative = 0.0;
    for (i, z) in logits.iter().enumerate() {
        cumulative += (z - lse).exp();
        if u < cumulative {
            return (i, z - lse);
        }
    }
    let last = logits.len() - 1;
    (last, logits[last] - lse)
}

/// The most likely index.
#[inline]
pub fn categorical_mode(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, z) in logits.iter().enumerate() {
        if *z > logits[best] {
            best = i;
        }
    }
    best
}

/// Log-prob of `action` and the entropy; writes `d(w_logp * logp + w_ent * entropy)/dlogits`
/// into `grad`.
#[inline]
pub fn categorical_eval(
    logits: &[f32],
    action: usize,
    w_logp: f32,
    w_ent: f32,
    grad: &mut [f32],
) -> (f32, f32) {
    let lse = log_sum_exp(logits);
    let mut entropy = 0.0;
    for (g, z) in grad.iter_mut().zip(logits) {
        let log_p = z - lse;
        let p = log_p.exp();
        entropy -= p * log_p;
        *g = p; // temporarily p
    }
    let log_prob = logits[action] - lse;
    for (i, g) in grad.iter_mut().enumerate() {
        let p = *g;
        let log_p = logits[i] - lse;
        // d logp(a) / dz_i = 1[i=a] - p_i ;  dH / dz_i = -p_i (log p_i + H)
        let d_logp = if i == action { 1.0 - p } else { -p };
        *g = w_logp * d_logp - w_ent * p * (log_p + entropy);
    }
    (log_prob, entropy)
}

/// Samples `mean + std * eps` into `action`; returns the log-prob.
#[inline]
pub fn gaussian_sample<R: Rng + ?Sized>(
    mean: &[f32],
    log_std: &[f32],
    rng: &mut R,
    action: &mut [f32],
) -> f32 {
    let mut log_prob = 0.0;
    for ((a, m), ls) in action.iter_mut().zip(mean).zip(log_std) {
        let eps: f32 = rng.sample(StandardNormal);
        *a = m + ls.exp() * eps;
        log_prob += -0.5 * eps * eps - ls - HALF_LN_2PI;
    }
    log_prob
}

/// Entropy of a diagonal Gaussian with these log-stds.
#[inline]
pub fn gaussian_entropy(log_std: &[f32]) -> f32 {
    log_std.iter().map(|ls| ls + 0.5 + HALF_LN_2PI).sum()
}

/// Log-prob of `action`; writes `d(w_logp * logp)/dmean` into `grad_mean` and *adds*
/// `d(w_logp * logp + w_ent * entropy)/dlog_std` into `grad_log_std`.
#[inline]
pub fn gaussian_eval(
    mean: &[f32],
    log_std: &[f32],
    action: &[f32],
    w_logp: f32,
    w_ent: f32,
    grad_mean: &mut [f32],
    grad_log_std: &mut [f32],
) -> f32 {
    let mut log_prob = 0.0;
    for j in 0..mean.len() {
        let inv_std = (-log_std[j]).exp();
        let z = (action[j] - mean[j]) * inv_std;
        log_prob += -0.5 * z * z - log_std[j] - HALF_LN_2PI;
        grad_mean[j] = w_logp * z * inv_std;
        grad_log_std[j] += w_logp * (z * z - 1.0) + w_ent;
    }
    log_prob
}

/// Fills `out` with standard normals from `rng` (a gSDE exploration matrix).
#[inline]
pub fn standard_normals<R: Rng + ?Sized>(out: &mut [f32], rng: &mut R) {
    for x in out {
        *x = rng.sample(StandardNormal);
    }
}

/// Variance floor of a gSDE Gaussian (SB3 adds the same), so a latent row of zeros still
/// gives a proper distribution.
const SDE_EPS: f32 = 1e-6;

/// gSDE: the variance of each action dimension at one state, `sum_i z_i^2 exp(2 L_ij)`,
/// for latent features `z` and log-std matrix `L` (`latent x dim`, row-major).
#[inline]
fn sde_variance(latent: &[f32], log_std: &[f32], variance: &mut [f32]) {
    let dim = variance.len();
    variance.fill(SDE_EPS);
    for (i, z) in latent.iter().enumerate() {
        let z2 = z * z;
        for (j, v) in variance.iter_mut().enumerate() {
            *v += z2 * (2.0 * log_std[i * dim + j]).exp();
        }
    }
}

/// gSDE sampling (generalised state-dependent exploration): `action = mean + z . (exp(L) *
/// eps)` for the exploration matrix `eps` (`latent x dim` standard normals, held fixed
/// over a stretch of steps by the caller). The action is Gaussian with the variance of
/// [`sde_eval`]; returns its log-prob.
#[inline]
pub fn sde_sample(
    mean: &[f32],
    latent: &[f32],
    log_std: &[f32],
    eps: &[f32],
    action: &mut [f32],
    variance: &mut [f32],
) -> f32 {
    let dim = mean.len();
    action.copy_from_slice(mean);
    for (i, z) in latent.iter().enumerate() {
        let row = i * dim..(i + 1) * dim;
        for ((a, ls), e) in action.iter_mut().zip(&log_std[row.clone()]).zip(&eps[row]) {
            *a += z * ls.exp() * e;
        }
    }
    sde_variance(latent, log_std, variance);
    let mut log_prob = 0.0;
    for j in 0..dim {
        let d = action[j] - mean[j];
        log_prob += -0.5 * d * d / variance[j] - 0.5 * variance[j].ln() - HALF_LN_2PI;
    }
    log_prob
}

/// gSDE log-prob of `action` and entropy at one state; writes `d(w_logp * logp)/dmean`
/// into `grad_mean` and *adds* `d(w_logp * logp + w_ent * entropy)/dL` into
/// `grad_log_std` (`latent x dim`). The latent features are treated as constants, as SB3
/// does: the log-std matrix alone shapes the exploration.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn sde_eval(
    mean: &[f32],
    latent: &[f32],
    log_std: &[f32],
    action: &[f32],
    w_logp: f32,
    w_ent: f32,
    grad_mean: &mut [f32],
    grad_log_std: &mut [f32],
    variance: &mut [f32],
) -> (f32, f32) {
    let dim = mean.len();
    sde_variance(latent, log_std, variance);
    let (mut log_prob, mut entropy) = (0.0, 0.0);
    for j in 0..dim {
        let d = action[j] - mean[j];
        let r2 = d * d / variance[j];
        log_prob += -0.5 * r2 - 0.5 * variance[j].ln() - HALF_LN_2PI;
        entropy += 0.5 * variance[j].ln() + 0.5 + HALF_LN_2PI;
        grad_mean[j] = w_logp * d / variance[j];
        // d logp / d var_j = (r2 - 1) / (2 var_j);  d H / d var_j = 1 / (2 var_j).
        variance[j] = (w_logp * (r2 - 1.0) + w_ent) / (2.0 * variance[j]);
    }
    for (i, z) in latent.iter().enumerate() {
        let z2 = z * z;
        let row = i * dim..(i + 1) * dim;
        for ((g, ls), d_var) in grad_log_std[row.clone()]
            .iter_mut()
            .zip(&log_std[row])
            .zip(variance.iter())
        {
            // d var_j / d L_ij = 2 z_i^2 exp(2 L_ij).
            *g += d_var * 2.0 * z2 * (2.0 * ls).exp();
        }
    }
    (log_prob, entropy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;
    use std::f32::consts::PI;

    /// Checks each `analytic[k]` against the central difference of `f` in coordinate `k`
    /// of `x`.
    fn check_against_differences<const N: usize>(
        x: [f32; N],
        analytic: &[f32],
        tolerance: f64,
        what: &str,
        f: impl Fn(&[f32; N]) -> f64,
    ) {
        for k in 0..N {
            let (mut up, mut down) = (x, x);
            up[k] += 1e-2;
            down[k] -= 1e-2;
            let numeric = (f(&up) - f(&down)) / 2e-2;
            assert!(
                (numeric - f64::from(analytic[k])).abs() < tolerance,
                "{what} {k}: numeric {numeric} vs analytic {}",
                analytic[k]
            );
        }
    }

    #[test]
    fn categorical_gradients_match_finite_differences() {
        let logits = [0.3_f32, -1.2, 0.7, 0.1];
        let (wl, we) = (0.8_f32, -0.3_f32);
        let f = |z: &[f32]| {
            let mut g = [0.0; 4];
            let (lp, h) = categorical_eval(z, 2, 0.0, 0.0, &mut g);
            f64::from(wl * lp + we * h)
        };
        let mut grad = [0.0; 4];
        categorical_eval(&logits, 2, wl, we, &mut grad);
        for i in 0..4 {
            let mut up = logits;
            up[i] += 1e-2;
            let mut down = logits;
            down[i] -= 1e-2;
            let numeric = (f(&up) - f(&down)) / 2e-2;
            assert!(
                (numeric - f64::from(grad[i])).abs() < 1e-3,
                "{i}: {numeric} vs {}",
                grad[i]
            );
        }
    }

    #[test]
    fn gaussian_gradients_match_finite_differences() {
        let (mean, log_std, action) = ([0.2_f32, -0.5], [-0.3_f32, 0.4], [0.9_f32, -1.7]);
        let (wl, we) = (1.3_f32, 0.2_f32);
        let f = |m: &[f32], ls: &[f32]| {
            let (mut gm, mut gs) = ([0.0; 2], [0.0; 2]);
            let lp = gaussian_eval(m, ls, &action, 0.0, 0.0, &mut gm, &mut gs);
            f64::from(wl * lp + we * gaussian_entropy(ls))
        };
        let (mut gm, mut gs) = ([0.0; 2], [0.0; 2]);
        gaussian_eval(&mean, &log_std, &action, wl, we, &mut gm, &mut gs);
        check_against_differences(mean, &gm, 1e-3, "mean", |m| f(m, &log_std));
        check_against_differences(log_std, &gs, 2e-3, "log_std", |ls| f(&mean, ls));
    }

    #[test]
    fn samples_follow_the_distributions() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let logits = [0.0_f32, 1.0_f32.ln(), 2.0_f32.ln()]; // probabilities 1/4, 1/4, 1/2
        let mut counts = [0usize; 3];
        for _ in 0..40_000 {
            counts[categorical_sample(&logits, &mut rng).0] += 1;
        }
        assert!((counts[2] as f32 / 40_000.0 - 0.5).abs() < 0.01);
        let mut a = [0.0_f32];
        let (mut sum, mut sum_sq) = (0.0_f64, 0.0_f64);
        for _ in 0..40_000 {
            gaussian_sample(&[1.0], &[0.5_f32.ln()], &mut rng, &mut a);
            sum += f64::from(a[0]);
            sum_sq += f64::from(a[0]).powi(2);
        }
        let mean = sum / 40_000.0;
        assert!((mean - 1.0).abs() < 0.01);
        assert!((sum_sq / 40_000.0 - mean * mean - 0.25).abs() < 0.01);
        assert!((HALF_LN_2PI - 0.5 * (2.0 * PI).ln()).abs() < 1e-6);
    }

    #[test]
    fn sde_gradients_match_finite_differences_and_samples_match_the_variance() {
        let mean = [0.3_f32, -0.2];
        let latent = [0.5_f32, -1.2, 0.8];
        let log_std = [-0.3_f32, 0.1, -0.7, 0.2, 0.4, -1.0];
        let action = [0.9_f32, -1.1];
        let (wl, we) = (0.7_f32, -0.4_f32);
        let mut var = [0.0; 2];
        let f = |m: &[f32], ls: &[f32]| {
            let (mut gm, mut gs, mut v) = ([0.0; 2], [0.0; 6], [0.0; 2]);
            let (lp, h) = sde_eval(m, &latent, ls, &action, 0.0, 0.0, &mut gm, &mut gs, &mut v);
            f64::from(wl * lp + we * h)
        };
        let (mut gm, mut gs) = ([0.0; 2], [0.0; 6]);
        sde_eval(
            &mean, &latent, &log_std, &action, wl, we, &mut gm, &mut gs, &mut var,
        );
        check_against_differences(mean, &gm, 2e-3, "mean", |m| f(m, &log_std));
        check_against_differences(log_std, &gs, 2e-3, "log_std", |ls| f(&mean, ls));
        // Sampled actions have the variance the log-prob assumes.
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
        let n = 20_000;
        let (mut sum, mut sum2) = ([0.0f64; 2], [0.0f64; 2]);
        let (mut a, mut eps) = ([0.0; 2], [0.0; 6]);
        for _ in 0..n {
            for e in &mut eps {
                *e = rng.sample(StandardNormal);
            }
            let lp = sde_sample(&mean, &latent, &log_std, &eps, &mut a, &mut var);
            let (mut g1, mut g2, mut v2) = ([0.0; 2], [0.0; 6], [0.0; 2]);
            let (check, _) = sde_eval(
                &mean, &latent, &log_std, &a, 0.0, 0.0, &mut g1, &mut g2, &mut v2,
            );
            assert!((lp - check).abs() < 1e-4);
            for j in 0..2 {
                let d = f64::from(a[j] - mean[j]);
                sum[j] += d;
                sum2[j] += d * d;
            }
        }
        for j in 0..2 {
            let empirical = sum2[j] / n as f64 - (sum[j] / n as f64).powi(2);
            let expected = f64::from(var[j]);
            assert!(
                (empirical / expected - 1.0).abs() < 0.05,
                "dim {j}: {empirical} vs {expected}"
            );
        }
    }
}
