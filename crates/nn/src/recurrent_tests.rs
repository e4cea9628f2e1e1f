//! Gradient and reset checks of the recurrent cores.

use super::*;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus as Rng64;

const STEPS: usize = 6;
const BATCH: usize = 3;

struct Case {
    layer: Recurrent,
    params: Vec<f32>,
    xs: Vec<f32>,
    starts: Vec<bool>,
    state0: Vec<f32>,
    /// The loss's weight on each output.
    w: Vec<f32>,
}

impl Case {
    fn new(kind: CellKind) -> Self {
        let layer = Recurrent::new(kind, 3, 4);
        let mut rng = Rng64::seed_from_u64(5);
        let mut params = layer.init_orthogonal(&mut rng);
        for p in &mut params {
            *p += rng.random_range(-0.3..0.3); // biases too
        }
        let mut uniform = |n: usize, scale: f32| -> Vec<f32> {
            (0..n).map(|_| rng.random_range(-scale..scale)).collect()
        };
        let xs = uniform(STEPS * BATCH * 3, 1.0);
        let state0 = uniform(BATCH * layer.state_size(), 0.8);
        let w = uniform(STEPS * BATCH * 4, 1.0);
        // Env 1's episode starts at step 3; env 2's at step 0.
        let mut starts = vec![false; STEPS * BATCH];
        starts[3 * BATCH + 1] = true;
        starts[2] = true;
        Case {
            layer,
            params,
            xs,
            starts,
            state0,
            w,
        }
    }

    fn loss(&self, params: &[f32], xs: &[f32]) -> f64 {
        let mut cache = RecurrentCache::default();
        let out = self.layer.forward(
            params,
            xs,
            &self.starts,
            &self.state0,
            (STEPS, BATCH),
            &mut cache,
        );
        out.iter().zip(&self.w).map(|(o, w)| f64::from(o * w)).sum()
    }
}

fn check_gradients(kind: CellKind) {
    let case = Case::new(kind);
    let mut cache = RecurrentCache::default();
    case.layer.forward(
        &case.params,
        &case.xs,
        &case.starts,
        &case.state0,
        (STEPS, BATCH),
        &mut cache,
    );
    let mut grads = vec![0.0; case.layer.num_params()];
    let mut d_xs = Vec::new();
    case.layer
        .backward(&case.params, &mut cache, &case.w, &mut grads, &mut d_xs);
    let h = 1e-2_f32;
    let mut params = case.params.clone();
    for i in 0..params.len() {
        let orig = params[i];
        params[i] = orig + h;
        let up = case.loss(&params, &case.xs);
        params[i] = orig - h;
        let down = case.loss(&params, &case.xs);
        params[i] = orig;
        let numeric = (up - down) / (2.0 * f64::from(h));
        let analytic = f64::from(grads[i]);
        assert!(
            (numeric - analytic).abs() <= 2e-3 + 1e-2 * numeric.abs(),
            "{kind:?} param {i}: numeric {numeric} analytic {analytic}"
        );
    }
    let mut xs = case.xs.clone();
    for i in 0..xs.len() {
        let orig = xs[i];
        xs[i] = orig + h;
        let up = case.loss(&case.params, &xs);
        xs[i] = orig - h;
        let down = case.loss(&case.params, &xs);
        xs[i] = orig;
        let numeric = (up - down) / (2.0 * f64::from(h));
        let analytic = f64::from(d_xs[i]);
        assert!(
            (numeric - analytic).abs() <= 2e-3 + 1e-2 * numeric.abs(),
            "{kind:?} input {i}: numeric {numeric} analytic {analytic}"
        );
    }
}

#[test]
fn lstm_gradients_through_time_match_finite_differences() {
    check_gradients(CellKind::Lstm);
}

#[test]
fn gru_gradients_through_time_match_finite_differences() {
    check_gradients(CellKind::Gru);
}

#[test]
fn an_episode_start_runs_as_a_fresh_sequence_from_a_zero_state() {
    for kind in [CellKind::Lstm, CellKind::Gru] {
        let case = Case::new(kind);
        let mut cache = RecurrentCache::default();
        let whole = case
            .layer
            .forward(
                &case.params,
                &case.xs,
                &case.starts,
                &case.state0,
                (STEPS, BATCH),
                &mut cache,
            )
            .to_vec();
        // Env 1 from its start at step 3, alone, from a zero state.
        let (h, i) = (case.layer.hidden(), case.layer.input());
        let xs: Vec<f32> = (3..STEPS)
            .flat_map(|t| case.xs[(t * BATCH + 1) * i..(t * BATCH + 2) * i].to_vec())
            .collect();
        let zero = vec![0.0; case.layer.state_size()];
        let mut alone = RecurrentCache::default();
        let fresh = case.layer.forward(
            &case.params,
            &xs,
            &[false; STEPS - 3],
            &zero,
            (STEPS - 3, 1),
            &mut alone,
        );
        for t in 3..STEPS {
            let row = (t * BATCH + 1) * h;
            assert_eq!(
                &whole[row..row + h],
                &fresh[(t - 3) * h..(t - 2) * h],
                "{kind:?}"
            );
        }
        // The gradient stops at the start: nothing reaches env 1's earlier inputs from its
        // later outputs.
        let mut w = vec![0.0; STEPS * BATCH * h];
        for t in 3..STEPS {
            w[(t * BATCH + 1) * h..(t * BATCH + 2) * h].fill(1.0);
        }
        let mut grads = vec![0.0; case.layer.num_params()];
        let mut d_xs = Vec::new();
        case.layer
            .backward(&case.params, &mut cache, &w, &mut grads, &mut d_xs);
        for t in 0..3 {
            let row = (t * BATCH + 1) * i;
            assert!(
                d_xs[row..row + i].iter().all(|d| *d == 0.0),
                "{kind:?} step {t}"
            );
        }
        assert!(d_xs[(3 * BATCH + 1) * i..(3 * BATCH + 2) * i]
            .iter()
            .any(|d| *d != 0.0));
    }
}
