//! The learner's versions on the server: publishing them, moving the run's serving
//! pointer, and following an operator's rollback through any gateway.

use std::time::Instant;

use strata_gateway::{ServingPointer, SharedRelease};
use strata_learner::PublishedPolicy;

use super::{DeployedLearner, AUTHOR};
use crate::records;
use crate::ClusterError;

impl DeployedLearner<'_> {
    /// An operator moved the serving pointer back (a rollback through any gateway): the
    /// learner goes on from that version.
    pub(super) fn follow_rollback(&mut self) -> Result<(), ClusterError> {
        self.pointer_read_at = Instant::now();
        let Some((pointer, revision)) = self.release.read().map_err(ClusterError::Wire)? else {
            return Ok(());
        };
        let Some((seen, seen_version)) = self.pointer_seen else {
            self.pointer_seen = Some((revision, pointer.version));
            return Ok(());
        };
        if seen >= revision {
            return Ok(());
        }
        self.pointer_seen = Some((revision, pointer.version));
        // Rules set or rolled back through any gateway hold here from the next update.
        if let Some(rules) = &pointer.rules {
            if rules.hash() != self.rules.hash {
                self.rules = self
                    .ledger
                    .register_rules(rules)
                    .map_err(|e| ClusterError::Config(format!("admission rules: {e}")))?;
                tracing::info!(
                    component = "learner",
                    rules_version = self.rules.version,
                    rules_hash = %self.rules.hash,
                    "admission rules changed through a gateway: applied from the next update"
                );
            }
        }
        // A promote (the pointer moving up, or staying) is not a rollback.
        if pointer.version >= seen_version {
            return Ok(());
        }
        let policy = records::policy(&self.link, pointer.version)?;
        self.core
            .model_mut()
            .set_flat_params(&policy.params)
            .map_err(strata_runtime::RuntimeError::from)?;
        self.rolled_back_to = Some(pointer.version);
        tracing::info!(
            component = "learner",
            version = pointer.version,
            "an operator rolled the run back: going on from that version"
        );
        Ok(())
    }

    /// The version whose parameters the learner holds (what decisions count ages from).
    pub(super) fn base_version(&self) -> u64 {
        self.rolled_back_to.unwrap_or(self.progress.policy_version)
    }

    /// Publishes the held parameters as the checkpointed version (retrying while NATS
    /// does not answer), binding it to the rules in the learner's ledger.
    pub(super) fn publish(&self) -> Result<(), ClusterError> {
        let version = self.progress.policy_version;
        let policy = PublishedPolicy::new(version, self.core.params().to_vec(), Default::default());
        crate::link::retrying(
            "publishing a version",
            || records::publish_policy(&self.link, &policy),
            self.stop,
        )
        .ok_or(ClusterError::Stopped)?;
        let _ = self.ledger.bind(
            version,
            &self.config_hash,
            self.rules.version,
            "publish",
            AUTHOR,
        );
        Ok(())
    }

    /// Moves the serving pointer to `version` (after the gateways' cooldown), unless an
    /// operator moved it meanwhile (that move stands; a rollback is followed).
    pub(super) fn move_pointer(&mut self, version: u64) -> Result<(), ClusterError> {
        let current = self.release.read().map_err(ClusterError::Wire)?;
        let (rules_version, rules, expected) = match current {
            Some((p, revision)) => {
                if self.pointer_seen.is_none_or(|(seen, _)| seen < revision) {
                    // Someone else moved it since this learner last did: look first.
                    return self.follow_rollback();
                }
                // The rules in force travel on with the new version.
                (p.rules_version, p.rules, Some(revision))
            }
            None => (self.rules.version, Some(self.rules.rules.clone()), None),
        };
        let pointer = ServingPointer {
            version,
            rules_version,
            immediate: false,
            rules,
            by_learner: true,
        };
        match self
            .release
            .swap(expected, &pointer)
            .map_err(ClusterError::Wire)?
        {
            Some(revision) => self.pointer_seen = Some((revision, version)),
            None => self.follow_rollback()?,
        }
        Ok(())
    }
}
