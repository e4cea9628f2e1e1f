//! Versions published by reference: an external policy's artifact and metadata.

use serde::{Deserialize, Serialize};

/// Where an external version's artifact lies and how to check it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// Where agents fetch it (any scheme: `s3://`, `https://`, a path).
    pub uri: String,
    /// Its SHA-256, 64 hex digits.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A policy version the gateway does not execute: published by reference, acted with by
/// the agents' own model, trained by a trainer that need not be Strata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalPolicy {
    /// The artifact.
    pub artifact: Artifact,
    /// The config hash of what produced it (recorded with every sample it chooses).
    pub config_hash: String,
    /// The trainer that produced it (a name, e.g. `my-ppo@2.1`).
    pub trainer: String,
    /// Free metadata, kept as given.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl ExternalPolicy {
    /// Checks every field.
    ///
    /// # Errors
    /// Names the first bad field.
    pub fn validate(&self) -> Result<(), String> {
        let a = &self.artifact;
        if a.uri.trim().is_empty() {
            return Err("external.artifact.uri is empty".into());
        }
        if a.sha256.len() != 64 || !a.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "external.artifact.sha256 {:?} is not 64 hex digits",
                a.sha256
            ));
        }
        if self.config_hash.trim().is_empty() {
            return Err("external.config_hash is empty".into());
        }
        if self.trainer.trim().is_empty() {
            return Err("external.trainer is empty".into());
        }
        let size = serde_json::to_vec(&self.metadata).map_or(0, |m| m.len());
        if size > MAX_METADATA {
            return Err(format!(
                "external.metadata is {size} bytes of JSON (at most {MAX_METADATA})"
            ));
        }
        Ok(())
    }
}

/// The most JSON an external version's metadata may take.
pub const MAX_METADATA: usize = 64 * 1024;
