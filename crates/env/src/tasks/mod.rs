//! The seeds' target tasks: a 7-joint arm reaching a target, and filling in a form on a
//! screen where popups appear.

mod arm_reach;
pub mod panda;
mod ui_form;

pub use arm_reach::ArmReach;
pub use ui_form::UiForm;

/// A uniform draw in [0, 1) from a hashed seed (the top 53 bits).
fn unit_interval(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A 64-bit seed as two f64 values that hold its halves exactly (env states are f64).
fn seed_to_state(seed: u64) -> [f64; 2] {
    [(seed >> 32) as f64, (seed & 0xffff_ffff) as f64]
}

/// The seed [`seed_to_state`] wrote.
fn seed_from_state(halves: &[f64]) -> u64 {
    ((halves[0] as u64) << 32) | halves[1] as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_round_trip_through_state_and_draws_stay_in_the_unit_interval() {
        for seed in [0, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            assert_eq!(super::seed_from_state(&super::seed_to_state(seed)), seed);
            let u = super::unit_interval(seed);
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }
}
