//! The per-step columns PPO trains on (observation, action, behaviour log-prob, value,
//! reward), which a worker's fragment, a deployed agent's reported segment and the rollout
//! each hold: one view of them, and one copy between any two.

use crate::obs_rows::ObsRows;

/// A read view of step columns: `obs_dim` observation and `action_dim` action values per
/// row, one log-prob, value and reward.
#[derive(Clone, Copy)]
pub struct Steps<'a> {
    /// Observations, `obs_dim` per row.
    pub obs: &'a ObsRows,
    /// Actions as sampled, `action_dim` per row.
    pub actions: &'a [f32],
    /// Behaviour log-probs.
    pub log_probs: &'a [f32],
    /// Value estimates.
    pub values: &'a [f32],
    /// Rewards.
    pub rewards: &'a [f32],
}

/// A write view of step columns.
pub struct StepsMut<'a> {
    /// Observations, `obs_dim` per row.
    pub obs: &'a mut ObsRows,
    /// Actions as sampled, `action_dim` per row.
    pub actions: &'a mut [f32],
    /// Behaviour log-probs.
    pub log_probs: &'a mut [f32],
    /// Value estimates.
    pub values: &'a mut [f32],
    /// Rewards.
    pub rewards: &'a mut [f32],
}

/// Anything holding step columns.
pub trait StepColumns {
    /// The columns, to read.
    fn steps(&self) -> Steps<'_>;
}

/// Implements [`StepColumns`] for a type whose step columns are its fields `obs`,
/// `actions`, `log_probs`, `values` and `rewards`.
#[macro_export]
macro_rules! impl_step_columns {
    ($t:ty) => {
        impl $crate::StepColumns for $t {
            fn steps(&self) -> $crate::Steps<'_> {
                $crate::Steps {
                    obs: &self.obs,
                    actions: &self.actions,
                    log_probs: &self.log_probs,
                    values: &self.values,
                    rewards: &self.rewards,
                }
            }
        }
    };
}

impl StepsMut<'_> {
    /// Copies `rows` rows of `src` from row `from` into rows `to..` (`obs_dim` and
    /// `action_dim` values per row in the observation and action columns).
    pub fn copy_from(
        &mut self,
        to: usize,
        src: Steps<'_>,
        from: usize,
        rows: usize,
        (obs_dim, action_dim): (usize, usize),
    ) {
        let ad = action_dim;
        assert_eq!(self.obs.dim(), obs_dim, "observation width");
        self.obs.copy_rows_from(to, src.obs, from, rows);
        self.actions[to * ad..(to + rows) * ad]
            .copy_from_slice(&src.actions[from * ad..(from + rows) * ad]);
        for (dst, src) in [
            (&mut *self.log_probs, src.log_probs),
            (&mut *self.values, src.values),
            (&mut *self.rewards, src.rewards),
        ] {
            dst[to..to + rows].copy_from_slice(&src[from..from + rows]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_rows_of_every_column_with_their_widths() {
        let mut src_obs = ObsRows::dense(6, 2);
        src_obs.write(0, &(0..12).map(|i| i as f32).collect::<Vec<_>>());
        let src_act: Vec<f32> = (0..6).map(|i| 100.0 + i as f32).collect(); // 6 rows x 1
        let col = |k: f32| -> Vec<f32> { (0..6).map(|i| k + i as f32).collect() };
        let (lp, v, r) = (col(10.0), col(20.0), col(30.0));
        let src = Steps {
            obs: &src_obs,
            actions: &src_act,
            log_probs: &lp,
            values: &v,
            rewards: &r,
        };
        let (mut o, mut a, mut l, mut vv, mut rr) = (
            ObsRows::dense(4, 2),
            vec![0.0; 4],
            vec![0.0; 4],
            vec![0.0; 4],
            vec![0.0; 4],
        );
        let mut dst = StepsMut {
            obs: &mut o,
            actions: &mut a,
            log_probs: &mut l,
            values: &mut vv,
            rewards: &mut rr,
        };
        dst.copy_from(1, src, 3, 2, (2, 1));
        assert_eq!(
            o.as_dense().unwrap(),
            [0.0, 0.0, 6.0, 7.0, 8.0, 9.0, 0.0, 0.0]
        );
        assert_eq!(a, [0.0, 103.0, 104.0, 0.0]);
        assert_eq!((l[1], vv[2], rr[1]), (13.0, 24.0, 33.0));
        assert_eq!((l[0], l[3]), (0.0, 0.0));
    }
}
