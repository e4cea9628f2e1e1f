//! PPO for Strata, written to read like CleanRL: [`RolloutBuffer`] -> [`compute_gae`] ->
//! [`Ppo::update`] (epochs x shuffled minibatches -> [`ppo_loss`] -> backward -> Adam), with
//! no threads or channels inside; the runtime drives it.
//!
//! ```
//! use rand::SeedableRng;
//! use strata_algo::{Ppo, PpoConfig, RolloutBuffer};
//! use strata_nn::{ActorCritic, Head, ActorCriticNet, NetworkConfig, SampleRng};
//! let mut rng = SampleRng::seed_from_u64(0);
//! let mut model = ActorCriticNet::new(2, Head::Gaussian { dim: 1 }, &NetworkConfig::default(), &mut rng);
//! let mut rollout = RolloutBuffer::new(4, 8, 2, 1);
//! rollout.compute_advantages(0.99, 0.95);
//! let mut ppo = Ppo::new(PpoConfig { n_steps: 8, batch_size: 16, ..PpoConfig::default() }, 0);
//! let stats = ppo.update(&mut model, &rollout, 1.0);
//! assert_eq!(stats.minibatches, 2 * 10);
//! ```

mod config;
mod gae;
mod loss;
mod obs_rows;
mod ppo;
mod rollout;
mod sequences;
mod steps;
mod vtrace;

pub use config::{InvalidConfig, PpoConfig, AUTO_SEQUENCE_MAX, AUTO_SEQUENCE_MIN};
pub use gae::{compute_gae, GaeInput};
pub use loss::{bound_loss, ppo_loss, LossCoefficients, LossInput, LossTerms};
pub use obs_rows::ObsRows;
pub use ppo::{explained_variance, Ppo, UpdateStats};
pub use rollout::{IsWeightStats, RolloutBuffer};
pub use sequences::{sequence_count, SequenceBatch};
pub use steps::{StepColumns, Steps, StepsMut};
pub use vtrace::compute_vtrace;
