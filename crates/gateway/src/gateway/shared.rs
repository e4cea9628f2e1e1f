//! Shared release: gateways of one run that take their versions from a learner elsewhere
//! and agree on the version they serve through one pointer moved by compare-and-swap (the
//! transport, `strata-cluster`, keeps it in NATS KV). A promote or a rollback moves the
//! pointer from the revision this gateway last saw; if another gateway moved it since,
//! the call fails with `Conflict` and changes nothing: of two racing operators exactly
//! one wins. Every gateway applies the pointer when it moves ([`Gateway::observe_pointer`]).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::*;

/// What gateways serve: a version, the admission rules it was published with, and
/// whether it switches at once (rollback, forced promote) or after the cooldown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServingPointer {
    /// The stable version.
    pub version: u64,
    /// Its admission-rules version.
    pub rules_version: u64,
    /// Switch at once rather than after the cooldown.
    pub immediate: bool,
    /// The admission rules themselves (their version is this writer's own number): every
    /// gateway and the learner register and apply them, so rules set or rolled back
    /// through one gateway hold for the whole run. Absent from pointers written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<strata_ledger::AdmissionRules>,
    /// Moved by the run's learner releasing a version on its own (`--release auto`), not
    /// by an operator: an operator's promote or rollback goes over such a move rather than
    /// being refused as a conflict.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_learner: bool,
}

/// How many of the learner's own moves an operator's move goes over before giving up.
const LEARNER_MOVES_PASSED: usize = 32;

/// The store of the serving pointer (revisioned, compare-and-swap).
pub trait SharedRelease: Send + Sync {
    /// The pointer and its revision, if set.
    ///
    /// # Errors
    /// The store cannot be reached (in words).
    fn read(&self) -> Result<Option<(ServingPointer, u64)>, String>;

    /// Sets the pointer if its revision is still `expected` (`None`: it must not exist
    /// yet); the new revision, or `None` when someone else moved it first.
    ///
    /// # Errors
    /// The store cannot be reached (in words).
    fn swap(&self, expected: Option<u64>, to: &ServingPointer) -> Result<Option<u64>, String>;
}

/// The pointer store and the revision this gateway last saw.
pub(crate) struct Shared {
    store: Arc<dyn SharedRelease>,
    seen: Mutex<Option<u64>>,
}

impl Gateway {
    /// Makes this gateway one of several serving a run whose versions come from elsewhere
    /// ([`Gateway::import_version`]) and whose stable version is `store`'s pointer. Call
    /// once, right after opening.
    ///
    /// # Errors
    /// `Unavailable` when the store cannot be read; `Conflict` when called twice.
    pub fn share_release(&self, store: Arc<dyn SharedRelease>) -> Result<(), RequestError> {
        let current = store.read().map_err(RequestError::unavailable)?;
        self.shared
            .set(Shared {
                store,
                seen: Mutex::new(current.as_ref().map(|(_, revision)| *revision)),
            })
            .map_err(|_| RequestError::conflict("the release is shared already"))?;
        if let Some((pointer, revision)) = current {
            self.observe_pointer(pointer, revision)?;
        }
        Ok(())
    }

    /// Stores version `version` published by the learner elsewhere (its parameters) and
    /// makes it the canary candidate after the cooldown (or, with `--release manual`, only
    /// stores it). A version already stored is left as it is.
    ///
    /// # Errors
    /// Storage failures.
    /// A version the retention rule already let go here is not imported again (a restart
    /// imports every version the run published): [`Gateway::import_pointed_version`]
    /// brings one back when the shared pointer names it.
    pub fn import_version(&self, version: u64, params: Vec<f32>) -> Result<(), RequestError> {
        let decided = version <= self.state.lock().release.retention.decided_upto;
        if decided || self.policies.exists(version) {
            return Ok(());
        }
        self.store_imported(version, params)
    }

    /// Imports `version`, which the shared pointer names (another gateway's operator
    /// promoted or rolled back to it), even if the retention rule let it go here, and
    /// keeps it from now on.
    ///
    /// # Errors
    /// Storage failures.
    pub fn import_pointed_version(
        &self,
        version: u64,
        params: Vec<f32>,
    ) -> Result<(), RequestError> {
        if !self.policies.exists(version) {
            self.store_imported(version, params)?;
        }
        let mut state = self.state.lock();
        state.release.retention.pin(version);
        self.journal_release(&state)
    }

    fn store_imported(&self, version: u64, params: Vec<f32>) -> Result<(), RequestError> {
        self.policies
            .insert(version, params)
            .map_err(|e| RequestError::unavailable(e.to_string()))?;
        let rules = *self.active_rules.lock();
        self.ledger
            .bind(version, &self.config_hash, rules, "publish", LEARNER)?;
        let mut state = self.state.lock();
        state.release.latest = state.release.latest.max(version);
        if self.settings.release == ReleaseMode::Canary {
            state.release.publish(version, Channel::Canary, now_ns());
        }
        self.journal_release(&state)
    }

    /// Applies the shared pointer at `revision` (moved by this or another gateway): its
    /// version becomes stable, at once or after the cooldown, with its rules.
    ///
    /// # Errors
    /// `NotFound` while the version is not imported yet (applied on a later look);
    /// journal failures.
    pub fn observe_pointer(
        &self,
        pointer: ServingPointer,
        revision: u64,
    ) -> Result<(), RequestError> {
        let Some(shared) = self.shared.get() else {
            return Ok(());
        };
        if shared.seen.lock().is_some_and(|seen| seen >= revision)
            && self.state.lock().release.stable == pointer.version
        {
            return Ok(());
        }
        self.require_version(pointer.version)?;
        *shared.seen.lock() = Some(revision);
        *self.active_rules.lock() = match &pointer.rules {
            // This ledger's number for the rules the pointer carries (registered once).
            Some(rules) => self.ledger.register_rules(rules)?.version,
            None => pointer.rules_version,
        };
        self.change_release(|_, state| {
            state
                .release
                .follow(pointer.version, pointer.immediate, now_ns());
            Ok(())
        })
        .map(|_| ())
    }

    /// Moves the shared pointer (when there is one) before a promote or rollback changes
    /// anything here.
    ///
    /// # Errors
    /// `Conflict` when another gateway moved it since this one last looked; `Unavailable`
    /// when the store cannot be reached.
    pub(super) fn move_pointer(&self, pointer: ServingPointer) -> Result<(), RequestError> {
        let Some(shared) = self.shared.get() else {
            return Ok(());
        };
        let mut seen = shared.seen.lock();
        // A learner releasing versions on its own may move the pointer many times a
        // second: its moves are not another operator's decision, so this one goes over
        // them (a few tries); another operator's move is a conflict.
        for _ in 0..LEARNER_MOVES_PASSED {
            if let Some(revision) = shared
                .store
                .swap(*seen, &pointer)
                .map_err(RequestError::unavailable)?
            {
                *seen = Some(revision);
                return Ok(());
            }
            match shared.store.read().map_err(RequestError::unavailable)? {
                Some((now, revision)) if now.by_learner => *seen = Some(revision),
                now => {
                    return Err(RequestError::conflict(format!(
                        "the serving version was moved by another operator since this gateway last looked (now {}); check the status and retry",
                        now.map_or("unset".to_string(), |(p, r)| format!("version {} at revision {r}", p.version))
                    )))
                }
            }
        }
        Err(RequestError::unavailable(
            "the run's learner kept moving the serving version; retry",
        ))
    }

    /// Puts new admission rules on the shared pointer (when there is one), its version
    /// unchanged: every gateway and the learner apply them.
    ///
    /// # Errors
    /// As [`Gateway::move_pointer`].
    pub(super) fn move_pointer_rules(
        &self,
        rules_version: u64,
        rules: strata_ledger::AdmissionRules,
    ) -> Result<(), RequestError> {
        let Some(shared) = self.shared.get() else {
            return Ok(());
        };
        let current = shared.store.read().map_err(RequestError::unavailable)?;
        let version = match current {
            // Moved since this gateway last looked: the compare-and-swap below refuses.
            Some((pointer, _)) => pointer.version,
            None => self.state.lock().release.stable,
        };
        self.move_pointer(ServingPointer {
            version,
            rules_version,
            immediate: false,
            rules: Some(rules),
            by_learner: false,
        })
    }

    /// Whether the serving version is shared with other gateways.
    pub fn shares_release(&self) -> bool {
        self.shared.get().is_some()
    }
}
