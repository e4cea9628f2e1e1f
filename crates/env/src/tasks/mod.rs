//! The seeds' target tasks: a 7-joint arm reaching a target.

mod arm_reach;
pub mod panda;

pub use arm_reach::ArmReach;
