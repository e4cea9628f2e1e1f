//! What can stop a run, and how the config's and the learner's errors become it.

use std::path::PathBuf;

use strata_algo::InvalidConfig;
use strata_env::EnvError;
use strata_nn::NnError;
use thiserror::Error;

/// What can stop a run.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The config text could not be parsed or a key does not exist.
    #[error("config: {0}")]
    Config(String),
    /// A config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ConfigFile {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A config value is out of range.
    #[error("invalid config: {0}")]
    InvalidConfig(InvalidConfig),
    /// The environment rejected an action or produced NaN/inf.
    #[error("environment: {0}")]
    Env(#[from] EnvError),
    /// Python could not make or describe a `gym:` env.
    #[error("env `{env}`: {source}")]
    GymEnv {
        env: String,
        source: strata_env::gym::GymError,
    },
    /// A checkpoint is missing, unreadable or does not fit.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    /// A checkpoint was asked for before the first update (no worker state yet).
    #[error("nothing to checkpoint yet: no update has completed")]
    NothingToSave,
    /// Model tensors do not fit the architecture.
    #[error("model: {0}")]
    Model(#[from] NnError),
    /// A rollout worker stopped on an error (env NaN, panic) or vanished.
    #[error("worker {worker}: {error}")]
    Worker { worker: usize, error: String },
    /// The sample ledger could not record (storage failure, writer not keeping up).
    #[error("ledger: {0}")]
    Ledger(#[from] strata_ledger::LedgerError),
    /// The policy store refused a version (out of order, corrupt) or is closed.
    #[error("policy store: {0}")]
    PolicyStore(#[from] strata_learner::StoreError),
    /// A thread (worker, inference, watchdog, learner pool) could not be started.
    #[error("cannot start {what}: {source}")]
    Thread {
        what: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The run was asked to stop (Ctrl-C / SIGTERM).
    #[error("interrupted")]
    Interrupted,
    /// A run directory is held by another process, or holds something this command must
    /// not write into (another run, unrelated files).
    #[error("{0}")]
    RunDir(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl From<strata_config::ConfigError> for RuntimeError {
    /// Each config error becomes the run error of the same name and message.
    fn from(e: strata_config::ConfigError) -> Self {
        use strata_config::ConfigError as C;
        match e {
            C::Config(m) => RuntimeError::Config(m),
            C::ConfigFile { path, source } => RuntimeError::ConfigFile { path, source },
            C::InvalidConfig(i) => RuntimeError::InvalidConfig(i),
            C::Env(e) => RuntimeError::Env(e),
            C::GymEnv { env, source } => RuntimeError::GymEnv { env, source },
            C::Model(e) => RuntimeError::Model(e),
        }
    }
}

impl From<strata_learner::LearnerError> for RuntimeError {
    /// Each learner error becomes the run error of the same name and message.
    fn from(e: strata_learner::LearnerError) -> Self {
        use strata_learner::LearnerError as L;
        match e {
            L::Config(c) => c.into(),
            L::Checkpoint { path, reason } => RuntimeError::Checkpoint { path, reason },
            L::Model(e) => RuntimeError::Model(e),
            L::PolicyStore(e) => RuntimeError::PolicyStore(e),
            L::Thread { what, source } => RuntimeError::Thread { what, source },
            L::Io { path, source } => RuntimeError::Io { path, source },
        }
    }
}

impl RuntimeError {
    /// A thread that could not be started.
    pub fn thread(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        RuntimeError::Thread {
            what: what.into(),
            source: source.into(),
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            path: path.into(),
            source,
        }
    }

    /// A checkpoint problem at `path`.
    pub fn checkpoint(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        RuntimeError::Checkpoint {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
