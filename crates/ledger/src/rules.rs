//! Admission (staleness) rules: which samples are trained on, down-weighted or dropped.
//! Versioned and hashed; stored with every policy version.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

use crate::record::DecisionKind;
use crate::LedgerError;

/// The rule applied when a sample is consumed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// Train only on samples from the learner's current version.
    Strict,
    /// Weight samples by how much the policy changed since they were produced
    /// (`exp(-KL / kl_scale)`), dropping those below `min_weight` or too old.
    Decay,
    /// Train on samples up to a maximum age (versions or seconds); drop older ones.
    #[default]
    Drop,
}

impl RuleKind {
    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::Strict => "strict",
            RuleKind::Decay => "decay",
            RuleKind::Drop => "drop",
        }
    }
}

/// How far ahead of the learner workers collect, within `max_policy_lag` (async mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pacing {
    /// Each worker collects one fragment ahead of the learner: fragment `u` waits for
    /// version `u - 1`, so collection still overlaps the update and every sample is one
    /// version old, whatever the bound. Every update waits for one fragment of every
    /// worker, so running further ahead would make no update come sooner, only older.
    #[default]
    Fresh,
    /// Workers run as far ahead as the bound allows: on a fast env every sample is
    /// `max_policy_lag` versions old. For staleness experiments, and for workers a new
    /// version takes time to reach (other machines), which then need not wait for it.
    Bound,
}

impl Pacing {
    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Pacing::Fresh => "fresh",
            Pacing::Bound => "bound",
        }
    }

    /// Whether this is the default (left out of the canonical form, so rule sets written
    /// before pacing existed keep their hashes).
    pub fn is_fresh(&self) -> bool {
        *self == Pacing::Fresh
    }
}

/// One admission rule set. Serialisable to TOML and JSON; its [`AdmissionRules::hash`]
/// identifies it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionRules {
    /// The rule applied at consumption.
    pub rule: RuleKind,
    /// Admission at collection time (async mode): workers wait (back-pressure) rather than
    /// sample with a policy more than this many versions behind the learner.
    pub max_policy_lag: u64,
    /// How far ahead of the learner workers collect within that bound.
    #[serde(skip_serializing_if = "Pacing::is_fresh")]
    pub pacing: Pacing,
    /// `drop`/`decay`: drop samples more than this many versions old.
    pub max_age_versions: Option<u64>,
    /// `drop`/`decay`: drop samples completed more than this many seconds ago (wall-clock:
    /// decisions then depend on timing, so deterministic runs should not set it).
    pub max_age_seconds: Option<f64>,
    /// `decay`: weight = `exp(-KL / kl_scale)`.
    pub kl_scale: f64,
    /// `decay`: samples whose weight falls below this are dropped.
    pub min_weight: f64,
}

impl Default for AdmissionRules {
    fn default() -> Self {
        AdmissionRules {
            rule: RuleKind::Drop,
            max_policy_lag: 1,
            pacing: Pacing::Fresh,
            max_age_versions: None,
            max_age_seconds: None,
            kl_scale: 0.02,
            min_weight: 0.05,
        }
    }
}

/// What the learner knows about a run of samples when it decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleFacts {
    /// Learner version minus producing version.
    pub age_versions: u64,
    /// Seconds since the samples completed.
    pub age_seconds: f64,
    /// Estimated KL(producing || current) on the samples' observations, if measured.
    pub kl: Option<f64>,
}

/// A decision and its weight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admission {
    /// What is done.
    pub decision: DecisionKind,
    /// Policy-loss weight (0 when dropped).
    pub weight: f32,
}

impl AdmissionRules {
    /// Checks every value.
    ///
    /// # Errors
    /// [`LedgerError::InvalidRules`] naming the key.
    pub fn validate(&self) -> Result<(), LedgerError> {
        let bad = |key: &str, why: String| {
            Err(LedgerError::InvalidRules(format!("admission.{key}: {why}")))
        };
        if self.max_policy_lag > 64 {
            return bad(
                "max_policy_lag",
                format!("{} is above the limit of 64", self.max_policy_lag),
            );
        }
        if let Some(s) = self.max_age_seconds {
            if !(s.is_finite() && s > 0.0) {
                return bad("max_age_seconds", format!("{s} must be a positive number"));
            }
        }
        if !(self.kl_scale.is_finite() && self.kl_scale > 0.0) {
            return bad(
                "kl_scale",
                format!("{} must be a positive number", self.kl_scale),
            );
        }
        if !(0.0..=1.0).contains(&self.min_weight) {
            return bad(
                "min_weight",
                format!("{} must be within [0, 1]", self.min_weight),
            );
        }
        Ok(())
    }

    /// Parses TOML or JSON (by the first non-blank character) and validates.
    ///
    /// # Errors
    /// [`LedgerError::InvalidRules`] for syntax, unknown keys or bad values.
    pub fn parse(text: &str) -> Result<Self, LedgerError> {
        let rules: AdmissionRules = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| LedgerError::InvalidRules(e.to_string()))?
        } else {
            let table: toml::Table =
                toml::from_str(text).map_err(|e| LedgerError::InvalidRules(e.to_string()))?;
            // Accept a whole run config's `[admission]` section as well as bare rules.
            let body = match table.get("admission") {
                Some(toml::Value::Table(t)) => t.clone(),
                _ => table,
            };
            body.try_into()
                .map_err(|e: toml::de::Error| LedgerError::InvalidRules(e.to_string()))?
        };
        rules.validate()?;
        Ok(rules)
    }

    /// TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("rules serialise")
    }

    /// A stable hash of the rules (hex, 128 bits).
    pub fn hash(&self) -> String {
        let canonical = serde_json::to_string(self).expect("rules serialise");
        format!("{:032x}", xxh3_128(canonical.as_bytes()))
    }

    /// The decision for samples with these facts.
    ///
    /// # Errors
    /// `decay` needs a KL estimate for samples older than the current version.
    pub fn decide(&self, facts: SampleFacts) -> Result<Admission, String> {
        let drop = Admission {
            decision: DecisionKind::Dropped,
            weight: 0.0,
        };
        let full = Admission {
            decision: DecisionKind::Trained,
            weight: 1.0,
        };
        let too_old = self
            .max_age_versions
            .is_some_and(|m| facts.age_versions > m)
            || self.max_age_seconds.is_some_and(|m| facts.age_seconds > m);
        match self.rule {
            RuleKind::Strict => Ok(if facts.age_versions == 0 { full } else { drop }),
            RuleKind::Drop => Ok(if too_old { drop } else { full }),
            RuleKind::Decay => {
                if too_old {
                    return Ok(drop);
                }
                if facts.age_versions == 0 {
                    return Ok(full);
                }
                let kl = facts.kl.ok_or_else(|| {
                    "rule \"decay\" needs the KL between producing and current policy, which \
                     was not recorded for these samples"
                        .to_string()
                })?;
                let weight = (-kl.max(0.0) / self.kl_scale).exp();
                Ok(if weight < self.min_weight {
                    drop
                } else if weight < 1.0 {
                    Admission {
                        decision: DecisionKind::DownWeighted,
                        weight: weight as f32,
                    }
                } else {
                    full
                })
            }
        }
    }
}

/// A registered rule set: its version and hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionedRules {
    /// Registry version (1, 2, ...).
    pub version: u64,
    /// [`AdmissionRules::hash`].
    pub hash: String,
    /// The rules.
    pub rules: AdmissionRules,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(age_versions: u64, kl: Option<f64>) -> SampleFacts {
        SampleFacts {
            age_versions,
            age_seconds: 0.5,
            kl,
        }
    }

    #[test]
    fn strict_trains_only_the_current_generation() {
        let rules = AdmissionRules {
            rule: RuleKind::Strict,
            max_policy_lag: 0,
            ..AdmissionRules::default()
        };
        assert_eq!(
            rules.decide(facts(0, None)).unwrap().decision,
            DecisionKind::Trained
        );
        assert_eq!(
            rules.decide(facts(1, Some(0.0))).unwrap().decision,
            DecisionKind::Dropped
        );
    }

    #[test]
    fn decay_weights_by_kl_not_by_version_gap() {
        let rules = AdmissionRules {
            rule: RuleKind::Decay,
            kl_scale: 0.01,
            min_weight: 0.1,
            ..AdmissionRules::default()
        };
        // Three versions old but the policy barely moved: nearly full weight.
        let a = rules.decide(facts(3, Some(0.0001))).unwrap();
        // One version old but the policy moved a lot: dropped.
        let b = rules.decide(facts(1, Some(0.05))).unwrap();
        assert_eq!(a.decision, DecisionKind::DownWeighted);
        assert!((a.weight - (-0.01f32).exp()).abs() < 1e-6);
        assert_eq!(b.decision, DecisionKind::Dropped);
        assert!(rules.decide(facts(1, None)).is_err());
    }

    #[test]
    fn drop_by_versions_or_seconds() {
        let rules = AdmissionRules {
            rule: RuleKind::Drop,
            max_age_versions: Some(2),
            max_age_seconds: Some(1.0),
            ..AdmissionRules::default()
        };
        assert_eq!(rules.decide(facts(2, None)).unwrap().weight, 1.0);
        assert_eq!(rules.decide(facts(3, None)).unwrap().weight, 0.0);
        let late = SampleFacts {
            age_seconds: 1.5,
            ..facts(0, None)
        };
        assert_eq!(rules.decide(late).unwrap().decision, DecisionKind::Dropped);
    }

    #[test]
    fn rules_round_trip_through_toml_and_json_with_a_stable_hash() {
        let rules = AdmissionRules {
            rule: RuleKind::Decay,
            max_age_seconds: Some(30.0),
            ..AdmissionRules::default()
        };
        let from_toml = AdmissionRules::parse(&rules.to_toml()).unwrap();
        let from_json = AdmissionRules::parse(&serde_json::to_string(&rules).unwrap()).unwrap();
        assert_eq!(from_toml, rules);
        assert_eq!(from_json, rules);
        assert_eq!(from_toml.hash(), rules.hash());
        assert_ne!(AdmissionRules::default().hash(), rules.hash());
        let section = format!("[admission]\n{}", rules.to_toml());
        assert_eq!(AdmissionRules::parse(&section).unwrap(), rules);
    }

    #[test]
    fn pacing_is_read_and_hashed_but_the_default_keeps_older_hashes() {
        // Rule sets written before pacing existed have no such key: they read as `fresh`
        // and hash as they did, since the default is left out of the canonical form.
        let default = AdmissionRules::default();
        assert!(!default.to_toml().contains("pacing"));
        assert_eq!(
            default.hash(),
            AdmissionRules::parse("rule = \"drop\"\nmax_policy_lag = 1")
                .unwrap()
                .hash()
        );
        let bound = AdmissionRules::parse("max_policy_lag = 4\npacing = \"bound\"").unwrap();
        assert_eq!(bound.pacing, Pacing::Bound);
        assert_eq!(AdmissionRules::parse(&bound.to_toml()).unwrap(), bound);
        let fresh = AdmissionRules {
            pacing: Pacing::Fresh,
            ..bound.clone()
        };
        assert_ne!(bound.hash(), fresh.hash());
        let err = AdmissionRules::parse("pacing = \"eager\"").unwrap_err();
        assert!(err.to_string().contains("pacing"), "{err}");
    }

    #[test]
    fn bad_rules_name_the_key() {
        for (text, key) in [
            ("rule = \"sometimes\"", "sometimes"),
            ("kl_scale = -1.0", "kl_scale"),
            ("min_weight = 2.0", "min_weight"),
            ("max_age_seconds = 0.0", "max_age_seconds"),
            ("max_policy_lag = 100", "max_policy_lag"),
            ("colour = 1", "colour"),
        ] {
            let err = AdmissionRules::parse(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
