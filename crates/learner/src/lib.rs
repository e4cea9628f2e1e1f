//! The learner's side of a Strata run, without the thread engine: what every driver that
//! trains needs (the runtime's trainer on workers' fragments, the gateway's learner on
//! agents' segments).
//!
//! - [`LearnerCore`] corrects a filled rollout for policy lag, admits its sample groups
//!   under the rules and runs the PPO update, on a [`LearnerPool`] whose threads are
//!   joined on drop.
//! - [`PolicyStore`] publishes numbered policy versions ([`MemoryPolicyStore`] in one
//!   process).
//! - [`checkpoint`]: the checkpoint file format ([`TrainerState`]: config, weights,
//!   optimiser, [`Progress`], each worker's [`WorkerState`]) and which of a run's
//!   checkpoints a command means; [`RunLayout`] says where each thing of a run directory
//!   sits.
//! - [`continue_run`]: the one rule every way of resuming follows.

mod admission_counts;
pub mod checkpoint;
mod error;
pub mod learner_core;
mod learner_pool;
mod ledger_cursor;
mod policy_store;
mod progress;
mod resume;
mod run_layout;
mod worker_state;

pub use admission_counts::AdmissionCounts;
pub use checkpoint::{
    best_version, find_version, load_policy, pick_checkpoint, read_checkpoint, resume_point,
    save_checkpoint, CheckpointMeta, LoadedCheckpoint, Policy, PolicyPick, TrainerState,
};
pub use error::LearnerError;
pub use learner_core::{Correction, LearnerCore, RowSpan, SampleGroup};
pub use learner_pool::{pin_current_thread, LearnerPool};
pub use ledger_cursor::LedgerCursor;
pub use policy_store::{MemoryPolicyStore, PolicyStore, PublishedPolicy, StoreError};
pub use progress::{InvalidFragment, Progress, TimeBreakdown};
pub use resume::{continue_run, group_digits, resume_run};
pub use run_layout::{RunLayout, BEST_DIR, BEST_EVAL};
pub use worker_state::WorkerState;
