//! What the admission rules did with one training batch, as the metrics line reports it.

use serde::{Deserialize, Serialize};

/// What the admission rules did with one training batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AdmissionCounts {
    /// Hash of the rules in force.
    pub rules_hash: String,
    /// Their version in the ledger (none without a ledger).
    pub rules_version: Option<u64>,
    /// Samples trained on with full weight.
    pub trained: u64,
    /// Samples trained on with a weight below one.
    pub down_weighted: u64,
    /// Samples dropped.
    pub dropped: u64,
}
