//! The run configuration: every hyperparameter in one documented struct, loadable from TOML,
//! overridable key by key, validated once, hashed for identity. The sections are in
//! `sections`, their validation (a function per section) in `validate`; what of a config
//! is its identity is the `identity` module's.

mod sections;
mod validate;

use serde::{Deserialize, Serialize};
use strata_algo::PpoConfig;
use strata_ledger::{AdmissionRules, Pacing};
use strata_nn::NetworkConfig;

pub use sections::{
    EnvConfig, GymSettings, Inference, LedgerSettings, Mode, OffPolicy, ReportSettings,
    RuntimeConfig, TrainConfig,
};

/// Everything a run needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Environment.
    pub env: EnvConfig,
    /// PPO hyperparameters.
    pub ppo: PpoConfig,
    /// Network architecture.
    pub network: NetworkConfig,
    /// Run control.
    pub train: TrainConfig,
    /// Workers and scheduling.
    pub runtime: RuntimeConfig,
    /// Admission rules: which samples are trained on (versioned with each policy).
    pub admission: AdmissionRules,
    /// The sample ledger.
    pub ledger: LedgerSettings,
    /// Evaluation and TensorBoard output while training.
    pub report: ReportSettings,
}
impl RunConfig {
    /// Env groups per worker: 2 with central inference (double buffering) when the
    /// worker's envs split evenly, else 1.
    pub fn groups_per_worker(&self) -> usize {
        let m = self.env.num_envs / self.runtime.workers.max(1);
        if self.runtime.inference == Inference::Central && m >= 2 && m.is_multiple_of(2) {
            2
        } else {
            1
        }
    }

    /// Learner threads in force (resolves `train.learner_threads = 0`).
    pub fn learner_threads(&self) -> usize {
        if self.train.learner_threads > 0 {
            return self.train.learner_threads;
        }
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        match self.runtime.mode {
            Mode::Sync => cores.min(2),
            Mode::Async => cores.saturating_sub(self.runtime.workers).clamp(1, 2),
        }
    }

    /// Env steps per update (`n_steps * num_envs`).
    pub fn steps_per_update(&self) -> u64 {
        (self.ppo.n_steps * self.env.num_envs) as u64
    }

    /// The lag bound in force: 0 in sync mode, else `admission.max_policy_lag`.
    pub fn effective_lag(&self) -> u64 {
        match self.runtime.mode {
            Mode::Sync => 0,
            Mode::Async => self.admission.max_policy_lag,
        }
    }

    /// Whether workers adopt exactly version `u - sampling_lag()` for fragment `u`
    /// (deterministic mode, and sync mode always) rather than the newest published.
    pub fn exact_versions(&self) -> bool {
        self.train.deterministic || self.effective_lag() == 0
    }

    /// How many versions behind the learner a worker samples: fragment `u` is collected
    /// with version `u - sampling_lag()` or newer (exactly that version when versions are
    /// exact). Under `fresh` pacing one version, whatever the bound: every update waits
    /// for one fragment of every worker, so a worker further ahead makes no update come
    /// sooner, only its samples older. Under `bound` pacing the bound. 0 in sync mode.
    pub fn sampling_lag(&self) -> u64 {
        match self.admission.pacing {
            Pacing::Fresh => self.effective_lag().min(1),
            Pacing::Bound => self.effective_lag(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_key() {
        let mut c = RunConfig::default();
        c.ppo.gamma = 1.5;
        assert!(c.validate().unwrap_err().to_string().contains("ppo.gamma"));
        let mut c = RunConfig::default();
        c.env.num_envs = 0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("env.num_envs"));
        let mut c = RunConfig::default();
        c.env.name = "pong".into();
        assert!(c.validate().unwrap_err().to_string().contains("env.name"));
        let mut c = RunConfig::default();
        c.ppo.batch_size = 1_000_000;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("ppo.batch_size"));
    }
}
