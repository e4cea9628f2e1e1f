//! Errors: why an operation was refused ([`RequestError`], which the server maps to HTTP
//! statuses) and what stops the gateway ([`GatewayError`]).

/// Why the gateway refused an operation or could not serve it, in the domain's words.
/// The core never speaks HTTP: the server alone maps each kind to a status code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Malformed or invalid input.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// No token, or one the gateway does not know.
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    /// The caller's role or ownership does not allow it.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// An unknown episode, action, version, trajectory or sample.
    #[error("not found: {0}")]
    NotFound(String),
    /// Not allowed in the current state (an outstanding action, an ended episode, ...).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Over the caller's rate limit.
    #[error("rate limited: {0}")]
    RateLimited(String),
    /// The gateway could not serve it now (storage failed, the learner is gone); nothing
    /// was acknowledged.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl RequestError {
    /// [`RequestError::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        RequestError::Invalid(message.into())
    }

    /// [`RequestError::Unauthenticated`].
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        RequestError::Unauthenticated(message.into())
    }

    /// [`RequestError::Forbidden`].
    pub fn forbidden(message: impl Into<String>) -> Self {
        RequestError::Forbidden(message.into())
    }

    /// [`RequestError::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        RequestError::NotFound(message.into())
    }

    /// [`RequestError::Conflict`].
    pub fn conflict(message: impl Into<String>) -> Self {
        RequestError::Conflict(message.into())
    }

    /// [`RequestError::RateLimited`].
    pub fn rate_limited(message: impl Into<String>) -> Self {
        RequestError::RateLimited(message.into())
    }

    /// [`RequestError::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        RequestError::Unavailable(message.into())
    }

    /// What was wrong, without the kind.
    pub fn message(&self) -> &str {
        match self {
            RequestError::Invalid(m)
            | RequestError::Unauthenticated(m)
            | RequestError::Forbidden(m)
            | RequestError::NotFound(m)
            | RequestError::Conflict(m)
            | RequestError::RateLimited(m)
            | RequestError::Unavailable(m) => m,
        }
    }
}

impl From<strata_ledger::LedgerError> for RequestError {
    fn from(e: strata_ledger::LedgerError) -> Self {
        match e {
            strata_ledger::LedgerError::Rejected(m) => RequestError::Invalid(m),
            strata_ledger::LedgerError::UnknownPolicyVersion(_)
            | strata_ledger::LedgerError::UnknownRulesVersion(_) => {
                RequestError::NotFound(e.to_string())
            }
            other => RequestError::Unavailable(other.to_string()),
        }
    }
}

/// Why the gateway could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A file or socket failed.
    #[error("{path}: {source}")]
    Io {
        /// What was being accessed.
        path: String,
        /// The failure.
        source: std::io::Error,
    },
    /// Bad settings, naming the setting.
    #[error("invalid gateway setting {0}")]
    Config(String),
    /// The journal of episodes and actions is unreadable.
    #[error("gateway journal {path}, line {line}: {reason}")]
    Journal {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Another process serves from this gateway directory (one process per directory).
    #[error("{0}")]
    InUse(String),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] strata_ledger::LedgerError),
    /// The learner's side (config, model, checkpoint) failed.
    #[error(transparent)]
    Learner(#[from] strata_learner::LearnerError),
}

impl From<strata_config::ConfigError> for GatewayError {
    /// A config that could not build what it asks for: as a run reports it.
    fn from(e: strata_config::ConfigError) -> Self {
        GatewayError::Learner(e.into())
    }
}

impl GatewayError {
    /// An I/O failure on `path`.
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        GatewayError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}
