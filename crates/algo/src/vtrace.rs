//! V-trace (Espeholt et al., 2018): off-policy value targets and advantages for samples
//! collected by an older (behaviour) policy, with truncated importance ratios.

use crate::gae::GaeInput;

/// Writes V-trace advantages `rho_s (r_s + gamma v_{s+1} - V(x_s))` and value targets
/// `v_s`, time-major like [`crate::compute_gae`]. `ratios[k]` is `pi(a|x) / mu(a|x)`
/// (target over behaviour); `rho_bar` and `c_bar` truncate it for the TD error and the
/// trace. Episode ends cut the trace: after termination the next value is 0, after
/// truncation V(final observation).
///
/// # Panics
/// When slice lengths disagree.
pub fn compute_vtrace(
    input: &GaeInput<'_>,
    ratios: &[f32],
    gamma: f32,
    rho_bar: f32,
    c_bar: f32,
    advantages: &mut [f32],
    returns: &mut [f32],
) {
    let steps = input.check(&[ratios, advantages, returns]);
    let n = input.num_envs;
    for env in 0..n {
        // `v_{t+1} - V(x_{t+1})`, carried backwards (0 past the rollout's end).
        let mut next_correction = 0.0_f32;
        for t in (0..steps).rev() {
            let k = t * n + env;
            let (next_value, continues) = input.next(t, env, steps);
            let rho = ratios[k].min(rho_bar);
            let c = ratios[k].min(c_bar);
            let delta = input.rewards[k] + gamma * next_value - input.values[k];
            // v_{t+1}: the bootstrap value plus its own correction when the trace continues.
            let v_next = next_value + continues * next_correction;
            let correction = rho * delta + gamma * c * continues * next_correction;
            returns[k] = input.values[k] + correction;
            advantages[k] = rho * (input.rewards[k] + gamma * v_next - input.values[k]);
            next_correction = correction;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute_gae;

    #[test]
    fn on_policy_vtrace_targets_equal_lambda_one_returns() {
        let (n, steps) = (2, 7);
        let len = n * steps;
        let rewards: Vec<f32> = (0..len).map(|k| ((k * 5) % 3) as f32 - 0.5).collect();
        let values: Vec<f32> = (0..len).map(|k| ((k * 7) % 5) as f32 * 0.2).collect();
        let terminated: Vec<bool> = (0..len).map(|k| k == 6).collect();
        let truncated: Vec<bool> = (0..len).map(|k| k == 9).collect();
        let final_values: Vec<f32> = vec![1.5; len];
        let input = GaeInput {
            rewards: &rewards,
            values: &values,
            terminated: &terminated,
            truncated: &truncated,
            final_values: &final_values,
            last_values: &[0.3, -0.2],
            num_envs: n,
        };
        let (mut adv, mut ret) = (vec![0.0; len], vec![0.0; len]);
        compute_vtrace(&input, &vec![1.0; len], 0.9, 1.0, 1.0, &mut adv, &mut ret);
        let (mut gae_adv, mut gae_ret) = (vec![0.0; len], vec![0.0; len]);
        compute_gae(&input, 0.9, 1.0, &mut gae_adv, &mut gae_ret);
        for k in 0..len {
            assert!(
                (ret[k] - gae_ret[k]).abs() < 1e-5,
                "{k}: {} vs {}",
                ret[k],
                gae_ret[k]
            );
        }
        // The policy advantage uses v_{s+1}: one-step TD on the corrected values, which on
        // policy is again the lambda=1 advantage.
        for k in 0..len {
            assert!(
                (adv[k] - gae_adv[k]).abs() < 1e-5,
                "{k}: {} vs {}",
                adv[k],
                gae_adv[k]
            );
        }
    }

    #[test]
    fn truncated_ratios_shrink_the_correction() {
        let input = GaeInput {
            rewards: &[1.0, 1.0],
            values: &[0.0, 0.0],
            terminated: &[false, true],
            truncated: &[false, false],
            final_values: &[0.0, 0.0],
            last_values: &[0.0],
            num_envs: 1,
        };
        let (mut adv, mut ret) = ([0.0; 2], [0.0; 2]);
        compute_vtrace(&input, &[0.5, 3.0], 1.0, 1.0, 1.0, &mut adv, &mut ret);
        // Step 1: rho = min(3, 1) = 1, v_1 = 1. Step 0: rho = c = 0.5:
        // v_0 = 0 + 0.5 * (1 + 0 - 0) + 0.5 * 1 = 1.
        assert!((ret[1] - 1.0).abs() < 1e-6 && (ret[0] - 1.0).abs() < 1e-6);
        assert!((adv[0] - 0.5 * (1.0 + 1.0)).abs() < 1e-6);
    }
}
