//! What can stop the learner's side of a run: its config, its checkpoints, its threads.

use std::path::PathBuf;

use strata_config::ConfigError;
use strata_nn::NnError;
use thiserror::Error;

use crate::policy_store::StoreError;

/// What the learner, its checkpoints and its policy store can fail on. A run reports each
/// as the [`strata_runtime`](../strata_runtime/index.html) error of the same name and
/// message.
#[derive(Debug, Error)]
pub enum LearnerError {
    /// The config cannot be used (unknown key, value out of range, env or model that
    /// cannot be built), or asks for something a resume cannot give.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A checkpoint is missing, unreadable or does not fit.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The checkpoint (or the file in it).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Model tensors do not fit the architecture.
    #[error("model: {0}")]
    Model(#[from] NnError),
    /// The policy store refused a version (out of order, corrupt) or is closed.
    #[error("policy store: {0}")]
    PolicyStore(#[from] StoreError),
    /// The learner's threads could not be started.
    #[error("cannot start {what}: {source}")]
    Thread {
        /// Which threads.
        what: String,
        /// Why the OS refused.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS's error.
        source: std::io::Error,
    },
}

impl LearnerError {
    /// A config problem described in words (`config: ...`, as a run says it).
    pub fn config(message: impl Into<String>) -> Self {
        LearnerError::Config(ConfigError::Config(message.into()))
    }

    /// A thread that could not be started.
    pub fn thread(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        LearnerError::Thread {
            what: what.into(),
            source: source.into(),
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LearnerError::Io {
            path: path.into(),
            source,
        }
    }

    /// A checkpoint problem at `path`.
    pub fn checkpoint(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        LearnerError::Checkpoint {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
