//! Normalisation wrappers: observation normalisation by running mean/variance and reward
//! scaling by the running std of the discounted return (the `VecNormalize` recipe).

use serde::{Deserialize, Serialize};

use crate::{EnvError, EnvSpec, StepBatch, VecEnv, VecEnvSnapshot};

/// Clip applied to normalised observations and scaled rewards.
const CLIP: f64 = 10.0;
/// Added to variances before the square root.
const EPSILON: f64 = 1e-8;

/// Running per-dimension mean and (population) variance, merged batch by batch with Chan et
/// al.'s parallel formula. Starts at mean 0, variance 1, with a tiny pseudo-count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningMeanStd {
    /// Per-dimension mean.
    pub mean: Vec<f64>,
    /// Per-dimension variance.
    pub var: Vec<f64>,
    /// Samples merged so far (plus the initial pseudo-count).
    pub count: f64,
}

impl RunningMeanStd {
    /// Statistics for `dim` dimensions.
    pub fn new(dim: usize) -> Self {
        RunningMeanStd {
            mean: vec![0.0; dim],
            var: vec![1.0; dim],
            count: 1e-4,
        }
    }

    /// An accumulator holding no samples (count 0), for the moments of one batch of data
    /// that is later [merged](RunningMeanStd::merge) elsewhere.
    pub fn empty(dim: usize) -> Self {
        RunningMeanStd {
            mean: vec![0.0; dim],
            var: vec![0.0; dim],
            count: 0.0,
        }
    }

    /// Merges another set of moments into these (Chan et al.), as if its samples had been
    /// given to [`RunningMeanStd::update`].
    ///
    /// # Panics
    /// When the dimensions differ.
    pub fn merge(&mut self, other: &RunningMeanStd) {
        assert_eq!(
            self.mean.len(),
            other.mean.len(),
            "merging statistics of different dimensions"
        );
        let total = self.count + other.count;
        if other.count == 0.0 || total == 0.0 {
            return;
        }
        for d in 0..self.mean.len() {
            let delta = other.mean[d] - self.mean[d];
            let m2 = self.var[d] * self.count
                + other.var[d] * other.count
                + delta * delta * self.count * other.count / total;
            self.mean[d] += delta * other.count / total;
            self.var[d] = m2 / total;
        }
        self.count = total;
    }

    /// Merges a batch of rows (`rows.len()` a multiple of the dimension).
    pub fn update<T: Copy + Into<f64>>(&mut self, rows: &[T]) {
        let dim = self.mean.len();
        let n = rows.len() / dim;
        if n == 0 {
            return;
        }
        let batch_count = n as f64;
        let total = self.count + batch_count;
        for d in 0..dim {
            let column = rows.iter().skip(d).step_by(dim).map(|v| (*v).into());
            let batch_mean = column.clone().sum::<f64>() / batch_count;
            let batch_var = column.map(|v| (v - batch_mean).powi(2)).sum::<f64>() / batch_count;
            let delta = batch_mean - self.mean[d];
            let m2 = self.var[d] * self.count
                + batch_var * batch_count
                + delta * delta * self.count * batch_count / total;
            self.mean[d] += delta * batch_count / total;
            self.var[d] = m2 / total;
        }
        self.count = total;
    }

    /// `clip((x - mean) / sqrt(var + eps), ±10)` in place over rows.
    pub fn normalize(&self, rows: &mut [f32]) {
        let dim = self.mean.len();
        for row in rows.chunks_exact_mut(dim) {
            for (d, x) in row.iter_mut().enumerate() {
                let z = (f64::from(*x) - self.mean[d]) / (self.var[d] + EPSILON).sqrt();
                *x = z.clamp(-CLIP, CLIP) as f32;
            }
        }
    }
}

/// Normalises observations (and final observations) with statistics set from outside (the
/// learner publishes them with each policy version), and collects the moments of the raw
/// observations it sees so the owner of the statistics can merge them.
pub struct NormalizeObservation<V> {
    inner: V,
    rms: RunningMeanStd,
    pending: RunningMeanStd,
    collecting: bool,
}

impl<V: VecEnv> NormalizeObservation<V> {
    /// Wraps `inner`, starting from mean 0 and variance 1, collecting moments.
    pub fn new(inner: V) -> Self {
        let dim = inner.spec().obs_dim();
        NormalizeObservation {
            inner,
            rms: RunningMeanStd::new(dim),
            pending: RunningMeanStd::empty(dim),
            collecting: true,
        }
    }

    /// Wraps `inner` with fixed statistics, collecting nothing (evaluation).
    ///
    /// # Errors
    /// [`EnvError::BadState`] when the statistics have another dimension.
    pub fn frozen(inner: V, rms: RunningMeanStd) -> Result<Self, EnvError> {
        let mut wrapped = NormalizeObservation::new(inner);
        wrapped.set_rms(&rms)?;
        wrapped.collecting = false;
        Ok(wrapped)
    }

    fn set_rms(&mut self, rms: &RunningMeanStd) -> Result<(), EnvError> {
        if rms.mean.len() != self.rms.mean.len() {
            return Err(EnvError::BadState {
                env: self.inner.spec().name.clone(),
                reason: format!(
                    "observation statistics have {} dimensions, observations {}",
                    rms.mean.len(),
                    self.rms.mean.len()
                ),
            });
        }
        self.rms = rms.clone();
        Ok(())
    }
}

impl<V: VecEnv> VecEnv for NormalizeObservation<V> {
    fn spec(&self) -> &EnvSpec {
        self.inner.spec()
    }
    fn num_envs(&self) -> usize {
        self.inner.num_envs()
    }
    fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError> {
        self.inner.reset(seed, obs)?;
        if self.collecting {
            self.pending.update(obs);
        }
        self.rms.normalize(obs);
        Ok(())
    }
    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError> {
        self.inner.step(actions, out)?;
        if self.collecting {
            self.pending.update(&out.obs[..]);
        }
        self.rms.normalize(&mut out.obs);
        let dim = self.rms.mean.len();
        for i in 0..self.num_envs() {
            if out.done(i) {
                self.rms
                    .normalize(&mut out.final_obs[i * dim..(i + 1) * dim]);
            }
        }
        Ok(())
    }
    fn snapshot(&self) -> VecEnvSnapshot {
        VecEnvSnapshot {
            obs_rms: Some(self.rms.clone()),
            ..self.inner.snapshot()
        }
    }
    fn restore(&mut self, snapshot: &VecEnvSnapshot) -> Result<(), EnvError> {
        let Some(rms) = &snapshot.obs_rms else {
            return Err(EnvError::BadState {
                env: self.spec().name.clone(),
                reason: "snapshot lacks observation-normalisation statistics".into(),
            });
        };
        self.set_rms(rms)?;
        self.inner.restore(snapshot)
    }
    fn restores_exactly(&self) -> bool {
        self.inner.restores_exactly()
    }
    fn revive(&mut self) -> Result<bool, EnvError> {
        self.inner.revive()
    }
    fn set_training(&mut self, training: bool) {
        self.collecting = training;
        self.inner.set_training(training);
    }
    fn normalizer(&self) -> NormalizerStats {
        NormalizerStats {
            obs: Some(self.rms.clone()),
            ..self.inner.normalizer()
        }
    }
    fn context(&self, env: usize, current: bool) -> crate::EnvContext {
        self.inner.context(env, current)
    }
    fn reobserve(&mut self, env: usize, obs: &mut [f32]) {
        self.inner.reobserve(env, obs);
        self.rms.normalize(obs);
    }
    fn record(&mut self) -> Result<(), EnvError> {
        self.inner.record()
    }
    fn take_frames(&mut self) -> Result<Vec<crate::Frame>, EnvError> {
        self.inner.take_frames()
    }
    fn set_normalizer(&mut self, stats: &NormalizerStats) -> Result<(), EnvError> {
        if let Some(rms) = &stats.obs {
            self.set_rms(rms)?;
        }
        self.inner.set_normalizer(stats)
    }
    fn take_normalizer_delta(&mut self) -> NormalizerStats {
        let dim = self.rms.mean.len();
        NormalizerStats {
            obs: Some(std::mem::replace(
                &mut self.pending,
                RunningMeanStd::empty(dim),
            )),
            ..self.inner.take_normalizer_delta()
        }
    }
}

/// Scales rewards by the std of the discounted return (no mean subtraction), so value
/// targets stay near unit scale whatever the env's reward magnitude. The statistics are set
/// from outside; the moments of the running returns it sees are collected for merging.
pub struct ScaleReward<V> {
    inner: V,
    rms: RunningMeanStd,
    pending: RunningMeanStd,
    returns: Vec<f64>,
    gamma: f64,
    collecting: bool,
}

impl<V: VecEnv> ScaleReward<V> {
    /// Wraps `inner`, discounting with `gamma`.
    pub fn new(inner: V, gamma: f64) -> Self {
        let n = inner.num_envs();
        ScaleReward {
            inner,
            rms: RunningMeanStd::new(1),
            pending: RunningMeanStd::empty(1),
            returns: vec![0.0; n],
            gamma,
            collecting: true,
        }
    }
}

impl<V: VecEnv> VecEnv for ScaleReward<V> {
    fn spec(&self) -> &EnvSpec {
        self.inner.spec()
    }
    fn num_envs(&self) -> usize {
        self.inner.num_envs()
    }
    fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError> {
        self.inner.reset(seed, obs)?;
        self.returns.fill(0.0);
        Ok(())
    }
    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError> {
        self.inner.step(actions, out)?;
        for (ret, r) in self.returns.iter_mut().zip(&out.rewards) {
            *ret = *ret * self.gamma + f64::from(*r);
        }
        if self.collecting {
            self.pending.update(&self.returns[..]);
        }
        let scale = (self.rms.var[0] + EPSILON).sqrt();
        for (i, r) in out.rewards.iter_mut().enumerate() {
            *r = (f64::from(*r) / scale).clamp(-CLIP, CLIP) as f32;
            if out.terminated[i] || out.truncated[i] {
                self.returns[i] = 0.0;
            }
        }
        Ok(())
    }
    fn snapshot(&self) -> VecEnvSnapshot {
        VecEnvSnapshot {
            return_rms: Some((self.rms.clone(), self.returns.clone())),
            ..self.inner.snapshot()
        }
    }
    fn restore(&mut self, snapshot: &VecEnvSnapshot) -> Result<(), EnvError> {
        match &snapshot.return_rms {
            Some((rms, returns)) if returns.len() == self.returns.len() && rms.mean.len() == 1 => {
                self.rms = rms.clone();
                self.returns.clone_from(returns);
            }
            _ => {
                return Err(EnvError::BadState {
                    env: self.spec().name.clone(),
                    reason: "snapshot lacks matching reward-scaling statistics".into(),
                })
            }
        }
        self.inner.restore(snapshot)?;
        if !self.inner.restores_exactly() {
            // Fresh episodes: their discounted returns start again.
            self.returns.fill(0.0);
        }
        Ok(())
    }
    fn restores_exactly(&self) -> bool {
        self.inner.restores_exactly()
    }
    fn revive(&mut self) -> Result<bool, EnvError> {
        self.inner.revive()
    }
    fn set_training(&mut self, training: bool) {
        self.collecting = training;
        self.inner.set_training(training);
    }
    fn normalizer(&self) -> NormalizerStats {
        NormalizerStats {
            returns: Some(self.rms.clone()),
            ..self.inner.normalizer()
        }
    }
    fn set_normalizer(&mut self, stats: &NormalizerStats) -> Result<(), EnvError> {
        if let Some(rms) = &stats.returns {
            if rms.mean.len() != 1 {
                return Err(EnvError::BadState {
                    env: self.spec().name.clone(),
                    reason: "return statistics must be one-dimensional".into(),
                });
            }
            self.rms = rms.clone();
        }
        self.inner.set_normalizer(stats)
    }
    fn context(&self, env: usize, current: bool) -> crate::EnvContext {
        self.inner.context(env, current)
    }
    fn reobserve(&mut self, env: usize, obs: &mut [f32]) {
        self.inner.reobserve(env, obs)
    }
    fn record(&mut self) -> Result<(), EnvError> {
        self.inner.record()
    }
    fn take_frames(&mut self) -> Result<Vec<crate::Frame>, EnvError> {
        self.inner.take_frames()
    }
    fn take_normalizer_delta(&mut self) -> NormalizerStats {
        NormalizerStats {
            returns: Some(std::mem::replace(
                &mut self.pending,
                RunningMeanStd::empty(1),
            )),
            ..self.inner.take_normalizer_delta()
        }
    }
}

/// Normalisation statistics of an env stack: those in use, or the moments collected since
/// the last [`VecEnv::take_normalizer_delta`]. `None` where that wrapper is off.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NormalizerStats {
    /// Per-dimension observation statistics.
    pub obs: Option<RunningMeanStd>,
    /// Statistics of the running discounted return.
    pub returns: Option<RunningMeanStd>,
}

impl NormalizerStats {
    /// Merges collected moments into these statistics (both must have the same wrappers).
    pub fn merge(&mut self, delta: &NormalizerStats) {
        if let (Some(s), Some(d)) = (&mut self.obs, &delta.obs) {
            s.merge(d);
        }
        if let (Some(s), Some(d)) = (&mut self.returns, &delta.returns) {
            s.merge(d);
        }
    }
}

impl VecEnv for Box<dyn VecEnv> {
    fn spec(&self) -> &EnvSpec {
        (**self).spec()
    }
    fn num_envs(&self) -> usize {
        (**self).num_envs()
    }
    fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError> {
        (**self).reset(seed, obs)
    }
    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError> {
        (**self).step(actions, out)
    }
    fn snapshot(&self) -> VecEnvSnapshot {
        (**self).snapshot()
    }
    fn restore(&mut self, snapshot: &VecEnvSnapshot) -> Result<(), EnvError> {
        (**self).restore(snapshot)
    }
    fn restores_exactly(&self) -> bool {
        (**self).restores_exactly()
    }
    fn revive(&mut self) -> Result<bool, EnvError> {
        (**self).revive()
    }
    fn set_training(&mut self, training: bool) {
        (**self).set_training(training)
    }
    fn normalizer(&self) -> NormalizerStats {
        (**self).normalizer()
    }
    fn set_normalizer(&mut self, stats: &NormalizerStats) -> Result<(), EnvError> {
        (**self).set_normalizer(stats)
    }
    fn take_normalizer_delta(&mut self) -> NormalizerStats {
        (**self).take_normalizer_delta()
    }
    fn context(&self, env: usize, current: bool) -> crate::EnvContext {
        (**self).context(env, current)
    }
    fn reobserve(&mut self, env: usize, obs: &mut [f32]) {
        (**self).reobserve(env, obs)
    }
    fn record(&mut self) -> Result<(), EnvError> {
        (**self).record()
    }
    fn take_frames(&mut self) -> Result<Vec<crate::Frame>, EnvError> {
        (**self).take_frames()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_stats_match_a_direct_computation() {
        let data: Vec<f64> = (0..300)
            .map(|i| ((i * 37) % 101) as f64 * 0.1 - 3.0)
            .collect();
        let mut rms = RunningMeanStd::new(1);
        for chunk in data.chunks(7) {
            rms.update(chunk);
        }
        let mean = data.iter().sum::<f64>() / 300.0;
        let var = data.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 300.0;
        assert!((rms.mean[0] - mean).abs() < 1e-4);
        assert!((rms.var[0] - var).abs() < 1e-3);
    }

    #[test]
    fn merging_batches_equals_updating_with_all_of_them() {
        let a: Vec<f64> = (0..40).map(|i| (i as f64 * 0.7).sin() * 3.0).collect();
        let b: Vec<f64> = (0..25).map(|i| (i as f64 * 1.3).cos() + 2.0).collect();
        let mut direct = RunningMeanStd::new(1);
        direct.update(&a[..]);
        direct.update(&b[..]);
        let mut merged = RunningMeanStd::new(1);
        let (mut da, mut db) = (RunningMeanStd::empty(1), RunningMeanStd::empty(1));
        da.update(&a[..]);
        db.update(&b[..]);
        merged.merge(&da);
        merged.merge(&db);
        assert!((direct.mean[0] - merged.mean[0]).abs() < 1e-12);
        assert!((direct.var[0] - merged.var[0]).abs() < 1e-12);
        assert_eq!(direct.count, merged.count);
    }

    #[test]
    fn normalised_values_are_clipped() {
        let mut rms = RunningMeanStd::new(2);
        rms.update(&[0.0_f32, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let mut row = [1e6_f32, -1e6];
        rms.normalize(&mut row);
        assert_eq!(row, [10.0, -10.0]);
    }
}
