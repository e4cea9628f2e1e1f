//! What can go wrong in an environment call.

use thiserror::Error;

/// What went wrong in an environment call.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum EnvError {
    /// No environment is registered under this name.
    #[error("unknown environment `{name}` (known: {known})")]
    UnknownEnv { name: String, known: String },
    /// The action batch has the wrong number of values.
    #[error("action batch for `{env}` has {got} values, expected {expected} ({num_envs} envs x {per_env} per env)")]
    ActionShape {
        env: String,
        got: usize,
        expected: usize,
        num_envs: usize,
        per_env: usize,
    },
    /// A discrete action is not an integer in range, or an action is NaN/inf.
    #[error("invalid action {value} for env {index} of `{env}`: {reason}")]
    BadAction {
        env: String,
        index: usize,
        value: f32,
        reason: String,
    },
    /// The environment produced a NaN or infinite observation or reward.
    #[error(
        "env {index} of `{env}` produced a non-finite {what} ({value}) at episode step {step}"
    )]
    NonFinite {
        env: String,
        index: usize,
        what: &'static str,
        value: f64,
        step: u32,
    },
    /// A Gymnasium env's worker process failed: the env raised, the process died or hung.
    #[error("env process {process} of `{env}`: {error}")]
    Gym {
        env: String,
        process: usize,
        #[source]
        error: crate::gym::GymError,
    },
    /// A state given to `set_state` or a snapshot does not fit the environment.
    #[error("bad state for `{env}`: {reason}")]
    BadState { env: String, reason: String },
    /// Pictures were asked of an env that does not draw itself.
    #[error("env `{env}` cannot be recorded: {reason}")]
    NoPictures { env: String, reason: String },
}
