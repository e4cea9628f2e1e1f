//! Forward kinematics of the Franka Emika Panda from its published modified
//! Denavit-Hartenberg parameters (Craig's convention), joint limits and velocity limits.

/// Joints.
pub const JOINTS: usize = 7;

/// `(a, d, alpha)` per joint in metres and radians, then the flange (`theta` = 0).
pub const MDH: [(f64, f64, f64); JOINTS + 1] = [
    (0.0, 0.333, 0.0),
    (0.0, 0.0, -std::f64::consts::FRAC_PI_2),
    (0.0, 0.316, std::f64::consts::FRAC_PI_2),
    (0.0825, 0.0, std::f64::consts::FRAC_PI_2),
    (-0.0825, 0.384, -std::f64::consts::FRAC_PI_2),
    (0.0, 0.0, std::f64::consts::FRAC_PI_2),
    (0.088, 0.0, std::f64::consts::FRAC_PI_2),
    (0.0, 0.107, 0.0),
];

/// Lower joint limits (rad).
pub const Q_MIN: [f64; JOINTS] = [
    -2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973,
];
/// Upper joint limits (rad).
pub const Q_MAX: [f64; JOINTS] = [2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973];
/// Joint velocity limits (rad/s).
pub const QD_MAX: [f64; JOINTS] = [2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61];
/// Franka's default "ready" pose.
pub const HOME: [f64; JOINTS] = [
    0.0,
    -std::f64::consts::FRAC_PI_4,
    0.0,
    -3.0 * std::f64::consts::FRAC_PI_4,
    0.0,
    std::f64::consts::FRAC_PI_2,
    std::f64::consts::FRAC_PI_4,
];

/// A homogeneous transform, row-major 4x4 (the last row is implicit).
type Transform = [[f64; 4]; 3];

fn compose(t: &Transform, u: &Transform) -> Transform {
    let mut out = [[0.0; 4]; 3];
    for r in 0..3 {
        for c in 0..4 {
            let mut v = t[r][0] * u[0][c] + t[r][1] * u[1][c] + t[r][2] * u[2][c];
            if c == 3 {
                v += t[r][3];
            }
            out[r][c] = v;
        }
    }
    out
}

/// The modified-DH link transform `Rx(alpha) Tx(a) Rz(theta) Tz(d)`.
fn link(a: f64, d: f64, alpha: f64, theta: f64) -> Transform {
    let (st, ct) = theta.sin_cos();
    let (sa, ca) = alpha.sin_cos();
    [
        [ct, -st, 0.0, a],
        [st * ca, ct * ca, -sa, -sa * d],
        [st * sa, ct * sa, ca, ca * d],
    ]
}

/// The flange's position in the base frame (metres).
pub fn flange_position(q: &[f64; JOINTS]) -> [f64; 3] {
    let mut t: Transform = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
    ];
    for (i, &(a, d, alpha)) in MDH.iter().enumerate() {
        let theta = if i < JOINTS { q[i] } else { 0.0 };
        t = compose(&t, &link(a, d, alpha, theta));
    }
    [t[0][3], t[1][3], t[2][3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Poses computed by `scripts/panda_fk_fixtures.py` (NumPy, the textbook product of
    /// modified-DH matrices), independent of this code.
    #[allow(clippy::approx_constant)] // the ready pose's angles, as NumPy printed them
    const FIXTURES: [([f64; JOINTS], [f64; 3]); 4] = include!("panda_fk_fixtures.in");

    #[test]
    fn zero_configuration_matches_the_published_geometry() {
        let p = flange_position(&[0.0; JOINTS]);
        // x = a4 + a5 + a7, z = d1 + d3 + d5 - d_flange.
        let expected = [0.0825 - 0.0825 + 0.088, 0.0, 0.333 + 0.316 + 0.384 - 0.107];
        for k in 0..3 {
            assert!((p[k] - expected[k]).abs() < 1e-12, "{p:?} vs {expected:?}");
        }
    }

    #[test]
    fn poses_match_an_independent_implementation() {
        for (q, expected) in FIXTURES {
            let p = flange_position(&q);
            for k in 0..3 {
                assert!(
                    (p[k] - expected[k]).abs() < 1e-9,
                    "{q:?}: {p:?} vs {expected:?}"
                );
            }
        }
    }
}
