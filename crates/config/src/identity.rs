//! A config's identity: what its hash covers, and what a resume may change.

use serde::Serialize;
use sha2::{Digest, Sha256};
use strata_algo::PpoConfig;
use strata_ledger::AdmissionRules;
use strata_nn::NetworkConfig;

use crate::config::{EnvConfig, Mode, OffPolicy, RuntimeConfig};
use crate::{ConfigError, RunConfig};

/// What defines a run's policy, declared once: its canonical JSON is hashed into the config
/// hash, and a `--resume` compares it field by field. Fields named in
/// [`Identity::KEPT_ON_RESUME`] define the policy being trained (a resume that changes one
/// is refused); the others may change at a resume, which then continues under a new
/// config hash from the version it starts at (the ledger binds that version to it).
/// Everything outside this struct is run control: it never changes the hash, and a resume
/// takes the new value.
///
/// Fields added after hashes were first published are left out of the canonical form at
/// their default, so the hashes of configs that leave them alone hold.
#[derive(Debug, PartialEq, Serialize)]
pub struct Identity<'a> {
    /// `env.*`.
    pub env: &'a EnvConfig,
    /// `ppo.*`.
    pub ppo: &'a PpoConfig,
    /// `network.*`.
    pub network: &'a NetworkConfig,
    /// `train.seed`.
    pub seed: u64,
    /// `train.total_steps` (the learning-rate and clip schedules anneal to it).
    pub total_steps: u64,
    /// `runtime.workers`.
    pub workers: usize,
    /// `runtime.mode`.
    pub mode: Mode,
    /// The lag bound in force ([`RunConfig::effective_lag`]).
    pub lag: u64,
    /// `runtime.off_policy`.
    pub off_policy: OffPolicy,
    /// `runtime.max_is_weight`.
    #[serde(skip_serializing_if = "is_default_max_is_weight")]
    pub max_is_weight: f64,
    /// `runtime.vtrace_rho_bar`.
    #[serde(skip_serializing_if = "is_one")]
    pub vtrace_rho_bar: f64,
    /// `runtime.vtrace_c_bar`.
    #[serde(skip_serializing_if = "is_one")]
    pub vtrace_c_bar: f64,
    /// `admission.*`.
    pub admission: &'a AdmissionRules,
}

fn is_default_max_is_weight(v: &f64) -> bool {
    *v == RuntimeConfig::default().max_is_weight
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

impl Identity<'_> {
    /// The identity's fields that a resume must keep, with the config keys each stands
    /// for (what a refusal names).
    pub const KEPT_ON_RESUME: [(&'static str, &'static str); 7] = [
        ("env", "env.*"),
        ("ppo", "ppo.*"),
        ("network", "network.*"),
        ("seed", "train.seed"),
        ("workers", "runtime.workers"),
        ("mode", "runtime.mode"),
        ("lag", "admission.max_policy_lag (in async mode)"),
    ];

    /// The canonical JSON, as an object of its fields.
    fn fields(&self) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(self).expect("the identity serialises") {
            serde_json::Value::Object(map) => map,
            _ => unreachable!("a struct serialises as an object"),
        }
    }

    /// The fields whose values differ from `other`'s, by name.
    pub fn differences(&self, other: &Identity<'_>) -> Vec<String> {
        let (a, b) = (self.fields(), other.fields());
        let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter(|k| a.get(*k) != b.get(*k))
            .cloned()
            .collect()
    }

    /// SHA-256 (hex, first 16 chars) of the canonical JSON.
    pub fn hash(&self) -> String {
        let json = serde_json::to_vec(self).expect("the identity serialises");
        let digest = Sha256::digest(json);
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }
}

impl RunConfig {
    /// What defines this config's policy ([`Identity`]).
    pub fn identity(&self) -> Identity<'_> {
        Identity {
            env: &self.env,
            ppo: &self.ppo,
            network: &self.network,
            seed: self.train.seed,
            total_steps: self.train.total_steps,
            workers: self.runtime.workers,
            mode: self.runtime.mode,
            lag: self.effective_lag(),
            off_policy: self.runtime.off_policy,
            max_is_weight: self.runtime.max_is_weight,
            vtrace_rho_bar: self.runtime.vtrace_rho_bar,
            vtrace_c_bar: self.runtime.vtrace_c_bar,
            admission: &self.admission,
        }
    }

    /// The config a `--resume` of this checkpointed config continues with: `wanted` (the
    /// checkpoint's config with the command's overrides), as long as it keeps every field
    /// of [`Identity::KEPT_ON_RESUME`]. Whether the config hash changes follows from the
    /// two identities ([`RunConfig::config_hash`]).
    ///
    /// # Errors
    /// [`ConfigError::Config`] naming the keys `wanted` changes that define the policy.
    pub fn resumed_with(self, wanted: RunConfig) -> Result<RunConfig, ConfigError> {
        let changed = self.identity().differences(&wanted.identity());
        let kept: Vec<&str> = Identity::KEPT_ON_RESUME
            .iter()
            .filter(|(field, _)| changed.iter().any(|c| c == field))
            .map(|(_, keys)| *keys)
            .collect();
        if !kept.is_empty() {
            return Err(ConfigError::Config(format!(
                "--resume keeps what defines the policy being trained, and this changes {}; \
                 nothing was changed (train a new run to change them)",
                kept.join(", ")
            )));
        }
        Ok(wanted)
    }

    /// The config hash: [`Identity::hash`] of [`RunConfig::identity`] (env, PPO, network,
    /// seed, budget, how samples are scheduled and corrected, and the admission rules).
    /// Run-control switches (checkpointing, stopping, timeouts, the ledger, reports) do
    /// not change it.
    pub fn config_hash(&self) -> String {
        self.identity().hash()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_follows_identity_not_run_control() {
        let a = RunConfig::default();
        let mut b = a.clone();
        b.train.checkpoint_every = 5000;
        b.train.stop_when_solved = true;
        assert_eq!(a.config_hash(), b.config_hash());
        b.ppo.learning_rate *= 2.0;
        assert_ne!(a.config_hash(), b.config_hash());
        assert_eq!(a.config_hash().len(), 16);
    }

    /// Every leaf of `value` (a config as JSON), by path.
    fn leaves(value: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    leaves(v, &p, out);
                }
            }
            _ => out.push(path.to_string()),
        }
    }

    /// `config` with the leaf at `path` set to another value that still reads as a config.
    fn flipped(config: &RunConfig, path: &str) -> Option<RunConfig> {
        let base = serde_json::to_value(config).unwrap();
        let current = path.split('.').fold(&base, |v, k| &v[k]).clone();
        use serde_json::json;
        let candidates: Vec<serde_json::Value> = match &current {
            serde_json::Value::Bool(b) => vec![json!(!b)],
            serde_json::Value::Number(n) if n.is_u64() => vec![json!(n.as_u64().unwrap() + 1)],
            serde_json::Value::Number(n) if n.is_i64() => vec![json!(n.as_i64().unwrap() + 1)],
            serde_json::Value::Number(n) => vec![json!(n.as_f64().unwrap() * 0.5 + 0.125)],
            serde_json::Value::String(_) => [
                "pendulum", "async", "central", "vtrace", "lstm", "bound", "decay", "canary",
                "tanh", "relu", "other",
            ]
            .iter()
            .map(|s| json!(s))
            .collect(),
            serde_json::Value::Array(_) => vec![json!([1]), json!(["x"]), json!([[1, 2]])],
            serde_json::Value::Null => vec![
                json!(3),
                json!(0.5),
                json!(true),
                json!("x"),
                json!([1]),
                json!({"kind": "nan", "at_step": 1}),
            ],
            serde_json::Value::Object(_) => unreachable!("a leaf"),
        };
        candidates.into_iter().find_map(|c| {
            if c == current {
                return None;
            }
            let mut v = base.clone();
            let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
            let slot = parent
                .split('.')
                .filter(|k| !k.is_empty())
                .fold(&mut v, |v, k| &mut v[k]);
            slot[key] = c;
            serde_json::from_value::<RunConfig>(v)
                .ok()
                .filter(|flipped| flipped != config)
        })
    }

    #[test]
    fn the_hash_changes_exactly_when_a_resume_treats_the_change_as_identity() {
        // Async with a lag, so that `admission.max_policy_lag` is part of the identity.
        let mut base = RunConfig::default();
        base.runtime.mode = Mode::Async;
        base.runtime.workers = 2;
        base.admission.max_policy_lag = 2;
        let mut paths = Vec::new();
        leaves(&serde_json::to_value(&base).unwrap(), "", &mut paths);
        let mut checked = 0;
        let mut unflippable = Vec::new();
        for path in &paths {
            let Some(other) = flipped(&base, path) else {
                unflippable.push(path.clone());
                continue;
            };
            checked += 1;
            let hash_changes = other.config_hash() != base.config_hash();
            match base.clone().resumed_with(other.clone()) {
                // Refused: only for what defines the policy, which the hash covers.
                Err(e) => assert!(hash_changes, "{path}: refused ({e}) yet not in the hash"),
                Ok(resumed) => {
                    assert_eq!(resumed, other, "{path}: a resume takes the value asked for");
                    // A resume goes on under a new hash exactly when it sees the
                    // identity change.
                    let changed = base.identity().differences(&resumed.identity());
                    assert_eq!(
                        hash_changes,
                        !changed.is_empty(),
                        "{path}: the hash and the resume disagree on whether it is identity"
                    );
                }
            }
        }
        // Every leaf but a few optional ones with no simple other value was flipped.
        assert!(checked > 60, "{checked} of {}", paths.len());
        assert!(unflippable.len() <= 4, "not flipped: {unflippable:?}");
        // The ones a user meets: a new budget continues under a new hash, a new seed is
        // refused naming its key, a new checkpoint interval keeps the hash.
        let mut budget = base.clone();
        budget.train.total_steps *= 2;
        assert_ne!(budget.config_hash(), base.config_hash());
        assert!(base.clone().resumed_with(budget).is_ok());
        let mut seed = base.clone();
        seed.train.seed += 1;
        let refused = base.clone().resumed_with(seed).unwrap_err().to_string();
        assert!(refused.contains("train.seed"), "{refused}");
        let mut every = base.clone();
        every.train.checkpoint_every += 1;
        assert_eq!(every.config_hash(), base.config_hash());
    }

    #[test]
    fn off_policy_coefficients_at_their_defaults_leave_older_hashes_alone() {
        // The hash of the default config before these fields joined the identity.
        let a = RunConfig::default();
        let mut b = a.clone();
        b.runtime.vtrace_rho_bar = 0.9;
        assert_ne!(a.config_hash(), b.config_hash());
        let json = serde_json::to_string(&a.identity()).unwrap();
        assert!(
            !json.contains("vtrace") && !json.contains("max_is_weight"),
            "{json}"
        );
    }
}
