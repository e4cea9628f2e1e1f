//! The Strata runtime: turns a [`RunConfig`] into a training run.
//!
//! [`Trainer`] owns the vectorised env, the model and the PPO learner and runs the
//! collect -> GAE -> update loop, publishing policy version v+1 after every update.
//! [`run::train`] drives it inside a [`RunDir`] (config, `metrics.jsonl`, checkpoints);
//! [`Trainer::resume`] continues from a checkpoint bit for bit; [`evaluate`] scores a
//! checkpointed [`Policy`]. Presets per built-in env live in [`preset`].
//!
//! ```no_run
//! use strata_runtime::{preset, run, RunDir, Trainer};
//! let mut config = preset("cartpole").unwrap();
//! config.train.stop_when_solved = true;
//! let mut trainer = Trainer::new(config).unwrap();
//! let mut dir = RunDir::create(std::path::Path::new("runs/demo"), &trainer).unwrap();
//! let summary = run::train(&mut trainer, &mut dir, &mut |_| {}).unwrap();
//! println!("solved: {}", summary.solved);
//! ```
//!
//! # Terminology
//!
//! - **policy version**: incremented by every update; 0 is the initial policy.
//! - **config hash**: identifies what defines the policy (env, PPO, network, seed, budget).
//! - **update record**: one line of `metrics.jsonl`.

mod buffer;
pub mod checkpoint;
mod config;
mod error;
mod eval;
mod inference;
mod learner_pool;
mod policy_store;
mod presets;
mod records;
pub mod run;
mod telemetry;
mod trainer;
mod wiring;
mod worker;

pub use buffer::{ExperienceBuffer, Fragment, SlotId, WorkerState};
pub use checkpoint::{load_policy, read_checkpoint, save_checkpoint, CheckpointMeta, Policy};
pub use config::{EnvConfig, Inference, Mode, OffPolicy, RunConfig, RuntimeConfig, TrainConfig};
pub use error::RuntimeError;
pub use eval::{evaluate, EvalResult};
pub use policy_store::{PolicyStore, PublishedPolicy, StoreError};
pub use presets::preset;
pub use records::{InvalidFragment, Progress, Summary, TimeBreakdown, UpdateRecord};
pub use run::RunDir;
pub use trainer::{build_envs, build_model, Trainer};
pub use worker::{WorkerCommand, WorkerEvent};
