//! Action latency and what was observed while an action executed.
//!
//! With latency `k`, an action takes `k` env ticks to take effect: the env keeps evolving
//! under the previous action for `k` ticks, then applies the new one for one tick. Every
//! tick's observation goes into the step's [`ExecSummary`], and the env clock advances per
//! tick, so issue/completion times and observation summaries describe real execution.

/// Per env, the observations seen between an action's issue and its completion.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecSummary {
    /// Observation width.
    pub obs_dim: usize,
    /// Observations seen (env ticks) this step, per env.
    pub ticks: Vec<u32>,
    /// FNV-1a hash of those observations' bytes, in order, per env.
    pub hash: Vec<u64>,
    /// Per-dimension minimum, `num_envs * obs_dim`.
    pub min: Vec<f32>,
    /// Per-dimension maximum.
    pub max: Vec<f32>,
    /// Per-dimension mean.
    pub mean: Vec<f32>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl ExecSummary {
    /// Zeroed summaries for `num_envs` envs.
    pub fn new(num_envs: usize, obs_dim: usize) -> Self {
        ExecSummary {
            obs_dim,
            ticks: vec![0; num_envs],
            hash: vec![0; num_envs],
            min: vec![0.0; num_envs * obs_dim],
            max: vec![0.0; num_envs * obs_dim],
            mean: vec![0.0; num_envs * obs_dim],
        }
    }

    /// Adds one observed tick of env `i` (the first tick of a step starts afresh).
    pub fn observe(&mut self, i: usize, obs: &[f32]) {
        let d = self.obs_dim;
        let rows = i * d..(i + 1) * d;
        let first = self.ticks[i] == 0;
        let mut h = if first { FNV_OFFSET } else { self.hash[i] };
        for v in obs {
            for b in v.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
            }
        }
        self.hash[i] = h;
        let (min, max, sum) = (
            &mut self.min[rows.clone()],
            &mut self.max[rows.clone()],
            &mut self.mean[rows],
        );
        if first {
            min.copy_from_slice(obs);
            max.copy_from_slice(obs);
            sum.copy_from_slice(obs);
        } else {
            for k in 0..d {
                min[k] = min[k].min(obs[k]);
                max[k] = max[k].max(obs[k]);
                sum[k] += obs[k];
            }
        }
        self.ticks[i] += 1;
    }

    /// Turns env `i`'s sums into means.
    pub fn finish(&mut self, i: usize) {
        let d = self.obs_dim;
        let n = self.ticks[i].max(1) as f32;
        if n > 1.0 {
            for m in &mut self.mean[i * d..(i + 1) * d] {
                *m /= n;
            }
        }
    }

    /// Marks env `i` as not yet observed this step.
    pub fn start(&mut self, i: usize) {
        self.ticks[i] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_min_max_mean_and_hashes_in_order() {
        let mut s = ExecSummary::new(1, 2);
        s.start(0);
        s.observe(0, &[1.0, 4.0]);
        s.observe(0, &[3.0, 2.0]);
        s.finish(0);
        assert_eq!(
            (s.ticks[0], &s.min[..], &s.max[..]),
            (2, &[1.0, 2.0][..], &[3.0, 4.0][..])
        );
        assert_eq!(s.mean, vec![2.0, 3.0]);
        let forward = s.hash[0];
        s.start(0);
        s.observe(0, &[3.0, 2.0]);
        s.observe(0, &[1.0, 4.0]);
        assert_ne!(s.hash[0], forward, "order matters");
    }
}
