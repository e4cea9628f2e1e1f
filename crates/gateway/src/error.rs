//! Errors: what an HTTP client sees ([`ApiError`]) and what stops the gateway
//! ([`GatewayError`]).

/// A request the gateway refuses or could not serve: an HTTP status and a message naming
/// the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// What was wrong.
    pub message: String,
}

impl ApiError {
    /// 400: malformed or invalid input.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// 401: no or unknown token.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, message)
    }

    /// 403: the token's role or owner does not allow this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, message)
    }

    /// 404: unknown episode, action or version.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, message)
    }

    /// 409: not allowed in the current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(409, message)
    }

    /// 429: over the rate limit.
    pub fn too_many(message: impl Into<String>) -> Self {
        Self::new(429, message)
    }

    /// 500/503: the gateway failed (storage, a worker gone).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(503, message)
    }

    pub(crate) fn new(status: u16, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl From<strata_ledger::LedgerError> for ApiError {
    fn from(e: strata_ledger::LedgerError) -> Self {
        match e {
            strata_ledger::LedgerError::Rejected(m) => ApiError::bad_request(m),
            strata_ledger::LedgerError::UnknownPolicyVersion(_)
            | strata_ledger::LedgerError::UnknownRulesVersion(_) => {
                ApiError::not_found(e.to_string())
            }
            other => ApiError::internal(other.to_string()),
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
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] strata_ledger::LedgerError),
    /// The runtime (config, model, checkpoint) failed.
    #[error(transparent)]
    Runtime(#[from] strata_runtime::RuntimeError),
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
