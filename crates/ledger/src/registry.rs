//! The rules registry of an open ledger: rule sets registered by version, policy
//! versions bound to them, the version sampling now; and reading the registered rules of
//! a stored ledger.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use crate::writer::Message;
use crate::{
    bindings, layout, now_ns, AdmissionRules, GenerationRecord, Ledger, LedgerError, Storage,
    VersionedRules,
};

/// Rule sets by version, the bindings of policy versions to them, and the current pair.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) rules: HashMap<u64, VersionedRules>,
    /// Policy version -> rules version, as last bound.
    pub(crate) bindings: bindings::Bindings,
    /// The version sampling now and its rules, after the last publish/promote/rollback.
    pub(crate) current: Option<(u64, u64)>,
}

/// Every registered rule set of a stored ledger, by version (read-only: safe while a
/// writer appends).
///
/// # Errors
/// [`LedgerError::BadFile`] naming an unreadable rules file, or storage failures.
pub fn stored_rules(storage: &Storage) -> Result<HashMap<u64, VersionedRules>, LedgerError> {
    let mut rules = HashMap::new();
    for path in storage.list(layout::RULES_DIR)? {
        if !path.ends_with(".json") {
            continue;
        }
        let bytes = storage.get(&path)?;
        let v: VersionedRules =
            serde_json::from_slice(&bytes).map_err(|e| LedgerError::BadFile {
                path: format!("{}/{path}", storage.location()),
                reason: e.to_string(),
            })?;
        rules.insert(v.version, v);
    }
    Ok(rules)
}

impl Ledger {
    /// Registers a rule set (validated); an identical one keeps its version.
    ///
    /// # Errors
    /// [`LedgerError::InvalidRules`], or storage failures (nothing registered).
    pub fn register_rules(&self, rules: &AdmissionRules) -> Result<VersionedRules, LedgerError> {
        rules.validate()?;
        let hash = rules.hash();
        let mut registry = self.registry.lock();
        if let Some(v) = registry.rules.values().find(|v| v.hash == hash) {
            return Ok(v.clone());
        }
        let version = registry.rules.keys().max().map_or(1, |m| m + 1);
        let v = VersionedRules {
            version,
            hash,
            rules: rules.clone(),
        };
        let json = serde_json::to_vec_pretty(&v).expect("rules serialise");
        self.storage
            .put_new(&layout::rules_path(version), bytes::Bytes::from(json))?;
        registry.rules.insert(version, v.clone());
        Ok(v)
    }

    /// A registered rule set.
    ///
    /// # Errors
    /// [`LedgerError::UnknownRulesVersion`].
    pub fn rules(&self, version: u64) -> Result<VersionedRules, LedgerError> {
        self.registry
            .lock()
            .rules
            .get(&version)
            .cloned()
            .ok_or(LedgerError::UnknownRulesVersion(version))
    }

    /// Binds a policy version to a rules version (`operation`: publish, promote); it
    /// becomes the current one.
    ///
    /// # Errors
    /// [`LedgerError::UnknownRulesVersion`], or a writer failure.
    pub fn bind(
        &self,
        policy_version: u64,
        config_hash: &str,
        rules_version: u64,
        operation: &str,
        author: &str,
    ) -> Result<(), LedgerError> {
        let mut registry = self.registry.lock();
        let rules = registry
            .rules
            .get(&rules_version)
            .ok_or(LedgerError::UnknownRulesVersion(rules_version))?;
        let record = GenerationRecord {
            policy_version,
            config_hash: config_hash.to_string(),
            rules_version,
            rules_hash: rules.hash.clone(),
            operation: operation.to_string(),
            author: author.to_string(),
            at_ns: now_ns(),
        };
        self.send(Message::Generation(record))?;
        registry.bindings.insert(policy_version, rules_version);
        registry.current = Some((policy_version, rules_version));
        self.shared
            .rules_version
            .store(rules_version, Ordering::Relaxed);
        Ok(())
    }

    /// The rules bound to a policy version.
    ///
    /// # Errors
    /// [`LedgerError::UnknownPolicyVersion`].
    pub fn rules_for_policy(&self, policy_version: u64) -> Result<VersionedRules, LedgerError> {
        let registry = self.registry.lock();
        let r = registry
            .bindings
            .get(policy_version)
            .ok_or(LedgerError::UnknownPolicyVersion(policy_version))?;
        registry
            .rules
            .get(&r)
            .cloned()
            .ok_or(LedgerError::UnknownRulesVersion(r))
    }

    /// Rolls back to `policy_version`: it and its rules become current again, recorded as
    /// one `rollback` operation. Returns the restored rules.
    ///
    /// # Errors
    /// [`LedgerError::UnknownPolicyVersion`] when no rules were ever bound to it.
    pub fn rollback(
        &self,
        policy_version: u64,
        config_hash: &str,
        author: &str,
    ) -> Result<VersionedRules, LedgerError> {
        let rules = self.rules_for_policy(policy_version)?;
        self.bind(
            policy_version,
            config_hash,
            rules.version,
            "rollback",
            author,
        )?;
        Ok(rules)
    }

    /// The current policy version and its rules, if any was bound.
    pub fn current(&self) -> Option<(u64, VersionedRules)> {
        let registry = self.registry.lock();
        let (p, r) = registry.current?;
        Some((p, registry.rules.get(&r)?.clone()))
    }
}
