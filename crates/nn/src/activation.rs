//! Hidden-layer activations, with a fast f32 tanh.

use serde::{Deserialize, Serialize};

/// Activation of the hidden layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// Hyperbolic tangent (PPO's usual choice).
    Tanh,
    /// Rectified linear unit.
    Relu,
}

/// tanh in f32 by a 13/6 minimax rational approximation (the one Eigen uses), within a few
/// f32 ulps of the exact value. libm's `tanhf` cost 4x the whole layer, and this form
/// vectorises. Plain multiply-adds, not `mul_add`: without FMA enabled at compile time
/// `mul_add` becomes a slow library call.
#[inline(always)]
pub fn fast_tanh(x: f32) -> f32 {
    const CLAMP: f32 = 7.905_311;
    const A1: f32 = 4.893_524_6e-3;
    const A3: f32 = 6.372_619_3e-4;
    const A5: f32 = 1.485_722_4e-5;
    const A7: f32 = 5.122_297e-8;
    const A9: f32 = -8.604_672e-11;
    const A11: f32 = 2.000_188e-13;
    const A13: f32 = -2.760_768_5e-16;
    const B0: f32 = 4.893_525e-3;
    const B2: f32 = 2.268_434_6e-3;
    const B4: f32 = 1.185_347e-4;
    const B6: f32 = 1.198_258_4e-6;
    let x = x.clamp(-CLAMP, CLAMP);
    let x2 = x * x;
    let p = x2 * A13 + A11;
    let p = x2 * p + A9;
    let p = x2 * p + A7;
    let p = x2 * p + A5;
    let p = x2 * p + A3;
    let p = x2 * p + A1;
    let p = x * p;
    let q = x2 * B6 + B4;
    let q = x2 * q + B2;
    let q = x2 * q + B0;
    p / q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_tanh_tracks_libm() {
        let mut worst = 0.0_f64;
        for i in -200_000..=200_000 {
            let x = i as f32 * 1e-4;
            worst = worst.max((f64::from(fast_tanh(x)) - f64::from(x).tanh()).abs());
        }
        assert!(worst < 1e-6, "max error {worst}");
        assert_eq!(fast_tanh(100.0), fast_tanh(8.0));
        assert!((fast_tanh(100.0) - 1.0).abs() < 1e-6);
        assert_eq!(fast_tanh(0.0), 0.0);
    }
}
