//! What can be wrong with a config, or with what it asks to build (an env, a model).

use std::path::PathBuf;

use strata_algo::InvalidConfig;
use strata_env::EnvError;
use strata_nn::NnError;
use thiserror::Error;

/// Why a config could not be read, checked or built. The runtime's `RuntimeError` has a
/// variant of the same name and message for each, so a run reports them unchanged.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The config text could not be parsed or a key does not exist.
    #[error("config: {0}")]
    Config(String),
    /// A config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A config value is out of range.
    #[error("invalid config: {0}")]
    InvalidConfig(InvalidConfig),
    /// The environment could not be made, or rejected what it was given.
    #[error("environment: {0}")]
    Env(#[from] EnvError),
    /// Python could not make or describe a `gym:` env.
    #[error("env `{env}`: {source}")]
    GymEnv {
        /// The env as asked for (`gym:...`).
        env: String,
        /// What Python said.
        source: strata_env::gym::GymError,
    },
    /// Model tensors do not fit the architecture.
    #[error("model: {0}")]
    Model(#[from] NnError),
}
