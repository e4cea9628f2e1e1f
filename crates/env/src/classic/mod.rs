//! The classic-control tasks, ported from Gymnasium 1.x line by line: same constants,
//! integrators, operation order and floating-point types, so that trajectories match the
//! reference (see `scripts/record_gymnasium_fixtures.py` and `tests/gymnasium_fixtures.rs`).

mod acrobot;
mod cartpole;
mod masked;
mod mountain_car_continuous;
mod pendulum;

pub use acrobot::Acrobot;
pub use cartpole::CartPole;
pub use masked::Masked;
pub use mountain_car_continuous::MountainCarContinuous;
pub use pendulum::Pendulum;
