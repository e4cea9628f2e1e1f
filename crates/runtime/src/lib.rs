//! The Strata runtime: turns a [`RunConfig`] into a training run.
//!
//! [`Trainer`] drives the learner: it starts rollout worker threads (and, if configured, a
//! central inference thread), consumes one fragment per worker per update from the
//! [`ExperienceBuffer`] in a fixed order, has the [`LearnerCore`] correct for lag, admit
//! and train (GAE or V-trace and the PPO update; the gateway's learner drives the same
//! core), and publishes policy version v+1 to the [`MemoryPolicyStore`]. Workers adopt
//! versions at fragment boundaries; in async mode they keep collecting up to
//! `admission.max_policy_lag` versions behind. A watchdog reports silent components; failed or stuck workers are restarted and
//! their fragments recorded invalid. Each consumed fragment goes through the admission
//! rules (`[admission]`) and, with a ledger attached, into the sample ledger with its
//! provenance ([`provenance`]). [`run::train`] drives a trainer inside a [`RunDir`] (config,
//! `metrics.jsonl`, `eval.jsonl`, TensorBoard scalars in `tb/`, checkpoints, `ledger/`) and
//! evaluates the current version on fixed seeds as it goes; [`Trainer::resume`] continues
//! from a checkpoint; [`evaluate`] scores a checkpointed [`Policy`];
//! [`Trainer::live_handle`] gives other threads a [`LiveSnapshot`] of workers, buffer and
//! learner (for a metrics endpoint or a monitor). Presets per built-in env live in
//! [`preset`]. [`transport`] is what runs workers outside this process: a
//! [`transport::WorkerLauncher`] decides what stands behind each worker's queues (threads
//! here by default; `strata-cluster`'s proxies for worker processes over NATS).
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
//! - **config hash**: identifies what defines the policy (env, PPO, network, seed, budget,
//!   and how samples are scheduled).
//! - **fragment**: `ppo.n_steps` steps of one worker's envs under one policy version.
//! - **slot**: a preallocated place in the buffer for one fragment, owned by one worker.
//! - **policy lag**: learner version when a fragment is consumed minus the version that
//!   produced it.
//! - **incarnation**: a worker's restart count (0 first); a fragment of an earlier
//!   incarnation is never trained on. (A *generation* is a policy version, as in the
//!   ledger.)
//! - **update record**: one line of `metrics.jsonl`.

mod buffer;
mod collector;
mod error;
mod eval;
mod host;
mod inference;
mod launcher;
mod ledger_link;
mod live;
pub mod provenance;
mod records;
pub mod run;
mod run_dir;
mod telemetry;
pub mod tensorboard;
mod trainer;
pub mod transport;
mod video;
mod wiring;
mod worker;

pub use buffer::{ExperienceBuffer, FillTime, Fragment, RowWidths, SlotId, StepProvenance};
pub use error::RuntimeError;
pub use eval::{evaluate, evaluate_recorded, EvalResult, Recording};
pub use live::{BufferView, ComponentView, LedgerView, LiveHandle, LiveSnapshot};
pub use records::{StopReason, Summary, UpdateRecord};
pub use run_dir::{utc_stamp, ClaimedDir, Existing, RunDir};
// The config, its presets and the factory: the `strata-config` crate's, re-exported for
// the crates that drive a run.
pub use strata_config::{
    build_envs, build_model, build_ppo, describe_encoders, env_spec, image_inputs, preset,
    preset_origin, resolve_env, ConfigError, ConfigFile, EnvConfig, GymSettings, Identity,
    Inference, LedgerSettings, Mode, OffPolicy, ReportSettings, RunConfig, RuntimeConfig,
    TrainConfig, DEFAULT_ENV, GYM_PRESETS,
};
// The learner core, the policy store, checkpoints, the run layout and resuming: the
// `strata-learner` crate's, re-exported for the crates that drive a run.
pub use strata_learner::learner_core::Admitted;
pub use strata_learner::{
    best_version, checkpoint, continue_run, find_version, group_digits, learner_core, load_policy,
    pick_checkpoint, read_checkpoint, resume_point, resume_run, save_checkpoint, AdmissionCounts,
    CheckpointMeta, Correction, InvalidFragment, LearnerCore, LearnerError, LoadedCheckpoint,
    MemoryPolicyStore, Policy, PolicyPick, PolicyStore, Progress, PublishedPolicy, RowSpan,
    RunLayout, SampleGroup, StoreError, TimeBreakdown, TrainerState, WorkerState,
};
pub use trainer::Trainer;
pub use video::GifWriter;
pub use worker::{WorkerCommand, WorkerError, WorkerEvent};
