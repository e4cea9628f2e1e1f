//! Acrobot-v1, step for step as Gymnasium computes it.

use std::f64::consts::PI;

use rand::Rng;

use crate::{check_state, Env, EnvError, EnvRng, EnvSpec, Space, Transition};

const DT: f64 = 0.2;
const LINK_LENGTH_1: f64 = 1.0;
const LINK_MASS_1: f64 = 1.0;
const LINK_MASS_2: f64 = 1.0;
const LINK_COM_POS_1: f64 = 0.5;
const LINK_COM_POS_2: f64 = 0.5;
const LINK_MOI: f64 = 1.0;
const MAX_VEL_1: f64 = 4.0 * PI;
const MAX_VEL_2: f64 = 9.0 * PI;
const AVAIL_TORQUE: [f64; 3] = [-1.0, 0.0, 1.0];
const G: f64 = 9.8;

/// Acrobot-v1: swing the tip of a two-link chain above a line by torquing the middle joint.
/// One RK4 step of `dt = 0.2` per action ("book" dynamics), f64 state; the start state is
/// rounded to f32 as Gymnasium's reset does.
#[derive(Clone, Debug, Default)]
pub struct Acrobot {
    state: [f64; 4],
}

/// Time derivative of `(theta1, theta2, dtheta1, dtheta2)` under torque `a`, with the
/// reference's operation order.
#[inline]
fn dsdt(s: [f64; 4], a: f64) -> [f64; 4] {
    let (m1, m2, l1, lc1, lc2, i1, i2) = (
        LINK_MASS_1,
        LINK_MASS_2,
        LINK_LENGTH_1,
        LINK_COM_POS_1,
        LINK_COM_POS_2,
        LINK_MOI,
        LINK_MOI,
    );
    let [theta1, theta2, dtheta1, dtheta2] = s;
    let (sin2, cos2) = theta2.sin_cos();
    let d1 = m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2.0 * l1 * lc2 * cos2) + i1 + i2;
    let d2 = m2 * (lc2 * lc2 + l1 * lc2 * cos2) + i2;
    let phi2 = m2 * lc2 * G * (theta1 + theta2 - PI / 2.0).cos();
    let phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin2
        - 2.0 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
        + (m1 * lc1 + m2 * l1) * G * (theta1 - PI / 2.0).cos()
        + phi2;
    let ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin2 - phi2)
        / (m2 * lc2 * lc2 + i2 - d2 * d2 / d1);
    let ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    [dtheta1, dtheta2, ddtheta1, ddtheta2]
}

/// Gymnasium's `wrap`: shift by whole periods into `[lo, hi]`.
fn wrap(mut x: f64, lo: f64, hi: f64) -> f64 {
    let diff = hi - lo;
    while x > hi {
        x -= diff;
    }
    while x < lo {
        x += diff;
    }
    x
}

impl Acrobot {
    fn is_terminal(&self) -> bool {
        let [t1, t2, _, _] = self.state;
        -t1.cos() - (t2 + t1).cos() > 1.0
    }
}

impl Env for Acrobot {
    /// Success: the tip swung above the line.
    fn success(&self, terminated: bool) -> Option<bool> {
        Some(terminated)
    }

    fn spec(&self) -> EnvSpec {
        EnvSpec {
            images: Vec::new(),
            name: "acrobot".into(),
            gymnasium_id: "Acrobot-v1".into(),
            observation_space: Space::Box {
                low: vec![-1.0, -1.0, -1.0, -1.0, -MAX_VEL_1 as f32, -MAX_VEL_2 as f32],
                high: vec![1.0, 1.0, 1.0, 1.0, MAX_VEL_1 as f32, MAX_VEL_2 as f32],
            },
            action_space: Space::Discrete { n: 3 },
            max_episode_steps: 500,
            reward_threshold: -100.0,
        }
    }

    fn reset(&mut self, rng: &mut EnvRng, obs: &mut [f32]) {
        for s in &mut self.state {
            *s = f64::from(rng.random_range(-0.1_f64..0.1) as f32);
        }
        self.observe(obs);
    }

    #[inline]
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Transition {
        let torque = AVAIL_TORQUE[action[0] as usize];
        // Classic RK4 over [0, dt]; the torque is a constant fifth state with zero derivative.
        let y0 = self.state;
        let dt2 = DT / 2.0;
        let add = |y: [f64; 4], h: f64, k: [f64; 4]| std::array::from_fn(|i| y[i] + h * k[i]);
        let k1 = dsdt(y0, torque);
        let k2 = dsdt(add(y0, dt2, k1), torque);
        let k3 = dsdt(add(y0, dt2, k2), torque);
        let k4 = dsdt(add(y0, DT, k3), torque);
        let ns: [f64; 4] =
            std::array::from_fn(|i| y0[i] + DT / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]));
        self.state = [
            wrap(ns[0], -PI, PI),
            wrap(ns[1], -PI, PI),
            ns[2].clamp(-MAX_VEL_1, MAX_VEL_1),
            ns[3].clamp(-MAX_VEL_2, MAX_VEL_2),
        ];
        let terminated = self.is_terminal();
        self.observe(obs);
        Transition {
            reward: if terminated { 0.0 } else { -1.0 },
            terminated,
        }
    }

    #[inline]
    fn render(&self) -> Option<crate::Frame> {
        Some(crate::render::acrobot(&self.state()))
    }

    fn observe(&self, obs: &mut [f32]) {
        let [t1, t2, d1, d2] = self.state;
        let (s1, c1) = t1.sin_cos();
        let (s2, c2) = t2.sin_cos();
        obs[..6].copy_from_slice(&[
            c1 as f32, s1 as f32, c2 as f32, s2 as f32, d1 as f32, d2 as f32,
        ]);
    }

    fn state(&self) -> Vec<f64> {
        self.state.to_vec()
    }

    fn set_state(&mut self, state: &[f64]) -> Result<(), EnvError> {
        check_state("acrobot", state, 4)?;
        self.state.copy_from_slice(state);
        Ok(())
    }
}
