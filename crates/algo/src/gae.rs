//! Generalised advantage estimation over a time-major rollout.

/// One rollout's per-step inputs to GAE, time-major (`index = t * num_envs + env`).
pub struct GaeInput<'a> {
    /// Rewards.
    pub rewards: &'a [f32],
    /// V(s_t) recorded when acting.
    pub values: &'a [f32],
    /// s_{t+1} was terminal: bootstrap with zero.
    pub terminated: &'a [bool],
    /// The episode was cut after this step: bootstrap with V(final observation).
    pub truncated: &'a [bool],
    /// V(final observation) where truncated (ignored elsewhere).
    pub final_values: &'a [f32],
    /// V(s_T) for the observation after the rollout's last step.
    pub last_values: &'a [f32],
    /// Envs per time step.
    pub num_envs: usize,
}

impl GaeInput<'_> {
    /// Checks that every slice fits `len` rows and `num_envs` envs; returns steps per env.
    ///
    /// # Panics
    /// When lengths disagree.
    pub(crate) fn check(&self, outputs: &[&[f32]]) -> usize {
        let (n, len) = (self.num_envs, self.rewards.len());
        assert!(
            n > 0 && len.is_multiple_of(n),
            "rollout length is not a multiple of num_envs"
        );
        for s in [self.values, self.final_values].iter().chain(outputs) {
            assert_eq!(s.len(), len, "rollout slice length");
        }
        assert_eq!(self.terminated.len(), len);
        assert_eq!(self.truncated.len(), len);
        assert_eq!(self.last_values.len(), n);
        len / n
    }

    /// What follows row `k = t * num_envs + env`: the value to bootstrap from and whether
    /// the trace continues into the next row (0 at an episode end). After termination the
    /// value is 0; after truncation V(final observation), never 0; after the rollout's last
    /// step V(next observation), with nothing left to continue into.
    pub(crate) fn next(&self, t: usize, env: usize, steps: usize) -> (f32, f32) {
        let k = t * self.num_envs + env;
        if self.terminated[k] {
            (0.0, 0.0)
        } else if self.truncated[k] {
            (self.final_values[k], 0.0)
        } else if t + 1 == steps {
            (self.last_values[env], 1.0)
        } else {
            (self.values[k + self.num_envs], 1.0)
        }
    }
}

/// Writes advantages and returns (`advantage + value`).
///
/// `delta_t = r_t + gamma * V_next - V(s_t)`, where `V_next` is 0 after termination,
/// V(final observation) after truncation (never 0: the episode did not end in the MDP), and
/// V(s_{t+1}) otherwise; `A_t = delta_t + gamma * lambda * A_{t+1}`, with the chain cut at
/// episode ends.
///
/// # Panics
/// When slice lengths disagree.
pub fn compute_gae(
    input: &GaeInput<'_>,
    gamma: f32,
    lambda: f32,
    advantages: &mut [f32],
    returns: &mut [f32],
) {
    let steps = input.check(&[advantages, returns]);
    let n = input.num_envs;
    for env in 0..n {
        let mut next_advantage = 0.0_f32;
        for t in (0..steps).rev() {
            let k = t * n + env;
            let (next_value, continues) = input.next(t, env, steps);
            let delta = input.rewards[k] + gamma * next_value - input.values[k];
            next_advantage = delta + gamma * lambda * continues * next_advantage;
            advantages[k] = next_advantage;
            returns[k] = next_advantage + input.values[k];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: A_t = sum_l (gamma lambda)^l delta_{t+l} within the episode, written as an
    /// explicit forward sum.
    fn reference(input: &GaeInput<'_>, gamma: f32, lambda: f32) -> Vec<f32> {
        let n = input.num_envs;
        let steps = input.rewards.len() / n;
        let delta = |t: usize, env: usize| {
            let k = t * n + env;
            let next = if input.terminated[k] {
                0.0
            } else if input.truncated[k] {
                input.final_values[k]
            } else if t + 1 == steps {
                input.last_values[env]
            } else {
                input.values[k + n]
            };
            input.rewards[k] + gamma * next - input.values[k]
        };
        let mut out = vec![0.0; input.rewards.len()];
        for env in 0..n {
            for t in 0..steps {
                let mut sum = 0.0_f64;
                let mut weight = 1.0_f64;
                for u in t..steps {
                    sum += weight * f64::from(delta(u, env));
                    let k = u * n + env;
                    if input.terminated[k] || input.truncated[k] {
                        break;
                    }
                    weight *= f64::from(gamma * lambda);
                }
                out[t * n + env] = sum as f32;
            }
        }
        out
    }

    #[test]
    fn matches_the_explicit_sum_with_terminations_and_truncations() {
        let (n, steps) = (3, 9);
        let len = n * steps;
        let rewards: Vec<f32> = (0..len).map(|k| ((k * 7) % 5) as f32 - 1.5).collect();
        let values: Vec<f32> = (0..len).map(|k| ((k * 3) % 4) as f32 * 0.3).collect();
        let terminated: Vec<bool> = (0..len).map(|k| k % 11 == 4).collect();
        let truncated: Vec<bool> = (0..len).map(|k| k % 13 == 7).collect();
        let final_values: Vec<f32> = (0..len).map(|k| 2.0 + k as f32 * 0.01).collect();
        let last_values = [0.5, -0.25, 1.0];
        let input = GaeInput {
            rewards: &rewards,
            values: &values,
            terminated: &terminated,
            truncated: &truncated,
            final_values: &final_values,
            last_values: &last_values,
            num_envs: n,
        };
        let (mut adv, mut ret) = (vec![0.0; len], vec![0.0; len]);
        compute_gae(&input, 0.97, 0.9, &mut adv, &mut ret);
        let want = reference(&input, 0.97, 0.9);
        for k in 0..len {
            assert!(
                (adv[k] - want[k]).abs() < 1e-4,
                "{k}: {} vs {}",
                adv[k],
                want[k]
            );
            assert!((ret[k] - adv[k] - values[k]).abs() < 1e-6);
        }
    }

    #[test]
    fn truncation_bootstraps_from_the_final_value_not_zero() {
        let input = GaeInput {
            rewards: &[1.0],
            values: &[0.0],
            terminated: &[false],
            truncated: &[true],
            final_values: &[10.0],
            last_values: &[-100.0],
            num_envs: 1,
        };
        let (mut adv, mut ret) = ([0.0], [0.0]);
        compute_gae(&input, 0.9, 0.95, &mut adv, &mut ret);
        assert!((adv[0] - 10.0).abs() < 1e-6); // 1 + 0.9 * 10, not 1 + 0
    }
}
