//! Checkpoints: the file format (`format`: what a checkpoint holds and how it is
//! written and verified) and discovery (`discovery`: which of a run's checkpoints a
//! command means). Where they sit in a run directory is [`crate::RunLayout`]'s; how a
//! resumed run goes on is the `resume` module's.

mod discovery;
mod format;

pub use discovery::{
    best_version, find_version, load_policy, pick_checkpoint, resume_point, Policy, PolicyPick,
};
pub use format::{
    read_checkpoint, save_checkpoint, tensors_from_bytes, tensors_to_bytes, CheckpointMeta,
    LoadedCheckpoint, TensorFileError, TrainerState,
};
