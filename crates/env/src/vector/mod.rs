//! The vectorised environment: many instances of one env stepped in lock-step, with
//! time limits, same-step autoreset and per-env seeds derived from one run seed. The step
//! batch and snapshots in `batch`, the interface in `vec_env`, the in-process vector of a
//! built-in env in `vectorized`.

mod batch;
mod vec_env;
mod vectorized;

pub use batch::*;
pub use vec_env::VecEnv;
pub use vectorized::Vectorized;
pub(crate) use vectorized::{check_actions, clip_action};
