//! What can go wrong in a ledger, each failure with what it was doing.

/// A failure kept with its cause, shareable: one flush's result answers every caller in
/// its group commit.
pub type SharedError = std::sync::Arc<dyn std::error::Error + Send + Sync>;

/// Ledger failures.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LedgerError {
    /// The storage location failed while doing `what`.
    #[error("ledger storage: {what}: {source}")]
    Storage {
        /// What was being done (naming the object).
        what: String,
        /// The failure.
        source: SharedError,
    },
    /// A stored file is unreadable, foreign or misplaced.
    #[error("ledger file {path}: {reason}")]
    BadFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Admission rules failed validation.
    #[error("invalid admission rules: {0}")]
    InvalidRules(String),
    /// A rules version that was never registered.
    #[error("unknown admission-rules version {0}")]
    UnknownRulesVersion(u64),
    /// A policy version with no rules bound.
    #[error("unknown policy version {0}: no admission rules were bound to it")]
    UnknownPolicyVersion(u64),
    /// Bad input to an append.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The writer thread is gone or did not answer in time.
    #[error("ledger writer: {0}")]
    Writer(String),
    /// Another process writes this (local) ledger: one writer per directory.
    #[error("{0}")]
    InUse(String),
}

impl LedgerError {
    /// Whether this is a storage failure because an object is not there (a file removed
    /// while it was being read).
    pub(crate) fn is_not_found(&self) -> bool {
        let LedgerError::Storage { source, .. } = self else {
            return false;
        };
        source
            .downcast_ref::<object_store::Error>()
            .is_some_and(|e| matches!(e, object_store::Error::NotFound { .. }))
            || source
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    }

    /// A storage failure while doing `what`.
    pub fn storage(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        LedgerError::Storage {
            what: what.into(),
            source: SharedError::from(source.into()),
        }
    }
}
