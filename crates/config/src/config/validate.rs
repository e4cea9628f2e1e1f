//! Checking a run config: every range and cross-field constraint, a function per section
//! (those that span sections with the later one), each refusal naming the key.

use strata_algo::InvalidConfig;
use strata_ledger::RuleKind;

use super::{Mode, RunConfig};
use crate::ConfigError;

/// A refusal of key `key`, holding `value`, for reason `why`.
fn bad(key: &str, value: &dyn ToString, why: &str) -> Result<(), ConfigError> {
    Err(ConfigError::InvalidConfig(InvalidConfig::new(
        key,
        value.to_string(),
        why,
    )))
}

/// A refusal unless `v` is a finite number above zero.
fn positive(key: &str, v: f64, why: &str) -> Result<(), ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        bad(key, &v, why)
    }
}

impl RunConfig {
    /// Checks every range and cross-field constraint.
    ///
    /// # Errors
    /// [`ConfigError::InvalidConfig`] naming the offending key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_env()?;
        self.validate_report()?;
        self.ppo
            .validate(self.env.num_envs)
            .map_err(ConfigError::InvalidConfig)?;
        self.validate_network()?;
        self.validate_runtime()?;
        self.validate_admission()?;
        self.validate_ledger()?;
        self.validate_train()
    }

    fn validate_env(&self) -> Result<(), ConfigError> {
        let env = &self.env;
        let gym = env.gym_target().is_some();
        if !gym && strata_env::spec_for(&env.name).is_err() {
            return bad(
                "env.name",
                &env.name,
                &format!(
                    "unknown env (known: {}, or gym:ID for a Gymnasium env)",
                    strata_env::env_names().join(", ")
                ),
            );
        }
        if !gym && !env.gym.is_unset() {
            return bad("env.gym", &"(set)", "applies to gym: envs only");
        }
        if let Some(name) = env
            .gym
            .wrappers
            .iter()
            .find(|w| !strata_env::gym::WRAPPERS.contains(&w.as_str()))
        {
            return bad(
                "env.gym.wrappers",
                name,
                &format!(
                    "unknown wrapper (known: {})",
                    strata_env::gym::WRAPPERS.join(", ")
                ),
            );
        }
        if gym && env.action_latency_ticks > 0 {
            return bad(
                "env.action_latency_ticks",
                &env.action_latency_ticks,
                "is for built-in envs; a gym: env's latency belongs in the env",
            );
        }
        if let (
            false,
            Some(strata_env::FaultPlan {
                kind: strata_env::FaultKind::Crash,
                ..
            }),
        ) = (gym, &env.fault)
        {
            return bad(
                "env.fault.kind",
                &"crash",
                "needs an env in a process of its own (gym:...); built-in envs share the trainer's",
            );
        }
        if env.num_envs == 0 {
            return bad("env.num_envs", &env.num_envs, "must be at least 1");
        }
        if env.action_latency_ticks > 1000 {
            return bad(
                "env.action_latency_ticks",
                &env.action_latency_ticks,
                "must be at most 1000",
            );
        }
        Ok(())
    }

    fn validate_report(&self) -> Result<(), ConfigError> {
        let share = self.report.eval_max_share;
        if !(share > 0.0 && share <= 1.0) {
            return bad(
                "report.eval_max_share",
                &share,
                "must be above 0 and at most 1 (1: no limit)",
            );
        }
        Ok(())
    }

    fn validate_network(&self) -> Result<(), ConfigError> {
        let network = &self.network;
        for (k, layers) in [
            ("network.policy_hidden", &network.policy_hidden),
            ("network.value_hidden", &network.value_hidden),
        ] {
            if layers.contains(&0) {
                return bad(k, &format!("{layers:?}"), "layer widths must be at least 1");
            }
        }
        if !network.log_std_init.is_finite() {
            return bad(
                "network.log_std_init",
                &network.log_std_init,
                "must be finite",
            );
        }
        if network.sde_sample_freq > 0 && !network.sde {
            return bad(
                "network.sde_sample_freq",
                &network.sde_sample_freq,
                "draws gSDE matrices: it needs network.sde = true",
            );
        }
        if !network.core.is_none() {
            if network.core_size == 0 || network.core_layers == 0 {
                return bad(
                    "network.core_size",
                    &format!("{} x {} layers", network.core_size, network.core_layers),
                    "a recurrent core needs at least 1 unit and 1 layer",
                );
            }
            self.ppo
                .validate_sequences()
                .map_err(ConfigError::InvalidConfig)?;
        }
        Ok(())
    }

    /// Workers and scheduling; and the env settings that depend on them.
    fn validate_runtime(&self) -> Result<(), ConfigError> {
        let r = &self.runtime;
        if r.workers == 0 || r.workers > 1024 {
            return bad("runtime.workers", &r.workers, "must be between 1 and 1024");
        }
        if !self.env.num_envs.is_multiple_of(r.workers) {
            return bad(
                "runtime.workers",
                &r.workers,
                &format!("must divide env.num_envs = {} evenly", self.env.num_envs),
            );
        }
        if !(r.max_is_weight.is_finite() && r.max_is_weight >= 1.0) {
            return bad(
                "runtime.max_is_weight",
                &r.max_is_weight,
                "must be at least 1",
            );
        }
        for (k, v) in [
            ("runtime.vtrace_rho_bar", r.vtrace_rho_bar),
            ("runtime.vtrace_c_bar", r.vtrace_c_bar),
        ] {
            positive(k, v, "must be a positive number")?;
        }
        for (k, v) in [
            ("runtime.wait_timeout_secs", r.wait_timeout_secs),
            ("runtime.silent_after_secs", r.silent_after_secs),
            ("runtime.restart_after_secs", r.restart_after_secs),
            ("runtime.fault_window_secs", r.fault_window_secs),
        ] {
            positive(k, v, "must be a positive number of seconds")?;
        }
        for (k, v) in [
            (
                "runtime.max_consecutive_failures",
                r.max_consecutive_failures,
            ),
            ("runtime.max_faults_per_window", r.max_faults_per_window),
        ] {
            if v == 0 {
                return bad(
                    k,
                    &v,
                    "must be at least 1 (1 stops the run at its first fault)",
                );
            }
        }
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        if r.pin_cpus.len() > cpus {
            return bad(
                "runtime.pin_cpus",
                &format!("{:?}", r.pin_cpus),
                &format!("more CPUs than the {cpus} this machine has"),
            );
        }
        if let Some(c) = r.pin_cpus.iter().find(|c| **c >= cpus) {
            return bad(
                "runtime.pin_cpus",
                &format!("{:?}", r.pin_cpus),
                &format!("CPU {c} does not exist (this machine has 0..{cpus})"),
            );
        }
        if self.env.fault_worker >= r.workers {
            return bad(
                "env.fault_worker",
                &self.env.fault_worker,
                &format!("there are only {} workers", r.workers),
            );
        }
        Ok(())
    }

    /// Admission rules, and how they fit the scheduling mode.
    fn validate_admission(&self) -> Result<(), ConfigError> {
        let mode = self.runtime.mode;
        if mode == Mode::Async && self.admission.max_policy_lag < 1 {
            return bad(
                "admission.max_policy_lag",
                &self.admission.max_policy_lag,
                "must be at least 1 in async mode",
            );
        }
        self.admission
            .validate()
            .map_err(|e| ConfigError::Config(e.to_string()))?;
        if self.admission.rule == RuleKind::Strict && mode == Mode::Async {
            return bad(
                "admission.rule",
                &"strict",
                "trains only on the current generation, but in async mode every fragment \
                 lags; use runtime.mode = \"sync\"",
            );
        }
        Ok(())
    }

    fn validate_ledger(&self) -> Result<(), ConfigError> {
        let l = &self.ledger;
        if l.flush_rows == 0 {
            return bad("ledger.flush_rows", &l.flush_rows, "must be at least 1");
        }
        positive(
            "ledger.flush_interval_secs",
            l.flush_interval_secs,
            "must be a positive number of seconds",
        )
    }

    fn validate_train(&self) -> Result<(), ConfigError> {
        let t = &self.train;
        if t.total_steps == 0 {
            return bad("train.total_steps", &t.total_steps, "must be at least 1");
        }
        if t.learner_threads > 256 {
            return bad(
                "train.learner_threads",
                &t.learner_threads,
                "must be between 0 (automatic) and 256",
            );
        }
        if t.solve_window == 0 {
            return bad("train.solve_window", &t.solve_window, "must be at least 1");
        }
        Ok(())
    }
}
