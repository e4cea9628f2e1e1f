//! PPO's hyperparameters, their validation, and the rule that picks a recurrent
//! policy's sequence length.

use serde::{Deserialize, Serialize};

/// PPO hyperparameters. Names follow Stable-Baselines3 / rl-zoo3 so their tuned presets
/// carry over; the loss uses SB3's convention (value loss = mean squared error, no 1/2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PpoConfig {
    /// Steps collected per env per update (rollout length T).
    pub n_steps: usize,
    /// Minibatch size.
    pub batch_size: usize,
    /// Passes over each rollout.
    pub n_epochs: usize,
    /// Discount factor.
    pub gamma: f64,
    /// GAE lambda.
    pub gae_lambda: f64,
    /// Initial learning rate.
    pub learning_rate: f64,
    /// Anneal the learning rate linearly to zero over the run.
    pub anneal_lr: bool,
    /// Policy ratio clip range.
    pub clip_range: f64,
    /// Anneal the clip range linearly to zero over the run.
    pub anneal_clip_range: bool,
    /// Clip the value update around the old value by this much (off when absent).
    pub clip_range_vf: Option<f64>,
    /// Entropy bonus coefficient.
    pub ent_coef: f64,
    /// Value loss coefficient.
    pub vf_coef: f64,
    /// Global gradient-norm clip (off when absent). Absent from a file means off, like
    /// every optional key, although the default clips at 0.5.
    #[serde(default)]
    pub max_grad_norm: Option<f64>,
    /// Clip each network's gradient (the policy with its log-std, the value network, a
    /// shared encoder or core) to `max_grad_norm` on its own instead of all together
    /// (SB3's global norm). On unnormalised returns the value loss's gradient sets the
    /// global norm, so the policy's step follows the value loss; per network it does
    /// not (docs/parity.md, the InvertedDoublePendulum collapse). On in the generic preset
    /// of a Gymnasium env. Left out of the config's hash when false (older configs keep
    /// theirs); written in the TOML a config is shown and saved as.
    #[serde(skip_serializing_if = "is_false")]
    pub clip_grad_per_network: bool,
    /// Normalise advantages per minibatch.
    pub norm_adv: bool,
    /// Stop the epochs early once a minibatch's approximate KL exceeds 1.5x this.
    pub target_kl: Option<f64>,
    /// Weight of the bounds loss on a Gaussian policy's mean: the mean squared distance by
    /// which the means lie outside the action bounds (rl_games' `bounds_loss_coef`). Off
    /// at 0. Past the bounds every action is clipped to the same value, so the policy
    /// gradient no longer pulls the mean back and it can drift away for good.
    pub bound_coef: f64,
    /// A recurrent policy trains on sequences of this many steps, each a fixed slice of
    /// an env's fragment (back-propagation through time is truncated at its start); 0 is
    /// automatic ([`PpoConfig::automatic_sequence_length`]): the whole fragment when a
    /// minibatch holds whole fragments, else the longest length of at most 32 steps that
    /// tiles both. Left out of the config hash when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub sequence_length: usize,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Default for PpoConfig {
    fn default() -> Self {
        PpoConfig {
            n_steps: 2048,
            batch_size: 64,
            n_epochs: 10,
            gamma: 0.99,
            gae_lambda: 0.95,
            learning_rate: 3e-4,
            anneal_lr: false,
            clip_range: 0.2,
            anneal_clip_range: false,
            clip_range_vf: None,
            ent_coef: 0.0,
            vf_coef: 0.5,
            max_grad_norm: Some(0.5),
            clip_grad_per_network: false,
            norm_adv: true,
            target_kl: None,
            bound_coef: 0.0,
            sequence_length: 0,
        }
    }
}

/// A config value out of its allowed range.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[error("`{key}` = {value}: {reason}")]
pub struct InvalidConfig {
    /// The offending key, dotted (`ppo.gamma`).
    pub key: String,
    /// Its value, printed.
    pub value: String,
    /// What is allowed.
    pub reason: String,
}

impl InvalidConfig {
    /// An error for `key`.
    pub fn new(key: impl Into<String>, value: impl ToString, reason: impl Into<String>) -> Self {
        InvalidConfig {
            key: key.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

impl PpoConfig {
    /// Checks every value's range; `num_envs` gives the rollout size for `batch_size`.
    ///
    /// # Errors
    /// [`InvalidConfig`] naming the first offending key (prefixed `ppo.`).
    pub fn validate(&self, num_envs: usize) -> Result<(), InvalidConfig> {
        let err = |k: &str, v: &dyn ToString, why: &str| {
            Err(InvalidConfig::new(format!("ppo.{k}"), v.to_string(), why))
        };
        let unit = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if self.n_steps == 0 {
            return err("n_steps", &self.n_steps, "must be at least 1");
        }
        if self.batch_size == 0 || self.batch_size > self.n_steps * num_envs {
            return err(
                "batch_size",
                &self.batch_size,
                &format!(
                    "must be between 1 and n_steps * num_envs = {}",
                    self.n_steps * num_envs
                ),
            );
        }
        if self.n_epochs == 0 {
            return err("n_epochs", &self.n_epochs, "must be at least 1");
        }
        if !unit(self.gamma) {
            return err("gamma", &self.gamma, "must be in [0, 1]");
        }
        if !unit(self.gae_lambda) {
            return err("gae_lambda", &self.gae_lambda, "must be in [0, 1]");
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return err(
                "learning_rate",
                &self.learning_rate,
                "must be a positive number",
            );
        }
        if !(self.clip_range.is_finite() && self.clip_range > 0.0) {
            return err("clip_range", &self.clip_range, "must be a positive number");
        }
        if let Some(c) = self.clip_range_vf {
            if !(c.is_finite() && c > 0.0) {
                return err("clip_range_vf", &c, "must be a positive number");
            }
        }
        for (k, v) in [("ent_coef", self.ent_coef), ("vf_coef", self.vf_coef)] {
            if !(v.is_finite() && v >= 0.0) {
                return err(k, &v, "must be a non-negative number");
            }
        }
        if self.clip_grad_per_network && self.max_grad_norm.is_none() {
            return err(
                "clip_grad_per_network",
                &true,
                "clips to ppo.max_grad_norm, which is off: set one or turn this off",
            );
        }
        if let Some(g) = self.max_grad_norm {
            if !(g.is_finite() && g > 0.0) {
                return err("max_grad_norm", &g, "must be a positive number");
            }
        }
        if !(self.bound_coef.is_finite() && self.bound_coef >= 0.0) {
            return err("bound_coef", &self.bound_coef, "must be >= 0");
        }
        if let Some(kl) = self.target_kl {
            if !(kl.is_finite() && kl > 0.0) {
                return err("target_kl", &kl, "must be a positive number");
            }
        }
        Ok(())
    }

    /// Steps per training sequence of a recurrent policy: `sequence_length`, or with 0 the
    /// automatic length (the whole fragment where no automatic length works; validation
    /// refuses that case).
    pub fn sequence_steps(&self) -> usize {
        if self.sequence_length == 0 {
            self.automatic_sequence_length().unwrap_or(self.n_steps)
        } else {
            self.sequence_length
        }
    }

    /// The sequence length `sequence_length = 0` stands for, so that turning a core on
    /// needs no other setting: the whole fragment (`n_steps`) when a minibatch holds whole
    /// fragments; otherwise the longest length of at most [`AUTO_SEQUENCE_MAX`] steps that
    /// divides both `n_steps` and `batch_size` (rl-zoo3's and POPGym's order: SB3's 2048
    /// steps in minibatches of 64 give 32), if it is at least [`AUTO_SEQUENCE_MIN`] steps.
    /// `None` when no length works by this rule.
    pub fn automatic_sequence_length(&self) -> Option<usize> {
        if self.n_steps > 0 && self.batch_size.is_multiple_of(self.n_steps) {
            return Some(self.n_steps);
        }
        let both = gcd(self.n_steps, self.batch_size);
        (AUTO_SEQUENCE_MIN..=both.min(AUTO_SEQUENCE_MAX))
            .rev()
            .find(|d| both.is_multiple_of(*d))
    }

    /// Checks the sequence rule of a recurrent policy: sequences tile each fragment, and
    /// a minibatch holds whole sequences.
    ///
    /// # Errors
    /// [`InvalidConfig`] naming `ppo.sequence_length` or `ppo.batch_size`.
    pub fn validate_sequences(&self) -> Result<(), InvalidConfig> {
        let len = self.sequence_steps();
        if !self.n_steps.is_multiple_of(len) {
            return Err(InvalidConfig::new(
                "ppo.sequence_length",
                self.sequence_length,
                format!(
                    "must divide ppo.n_steps = {} (sequences tile each env's fragment)",
                    self.n_steps
                ),
            ));
        }
        if !self.batch_size.is_multiple_of(len) || self.automatic_fails() {
            // A length that fits both, at most 32 steps (rl-zoo3's and POPGym's order).
            let both = gcd(self.n_steps, self.batch_size);
            let fits = (1..=both.min(AUTO_SEQUENCE_MAX))
                .rev()
                .find(|d| both.is_multiple_of(*d))
                .unwrap_or(1);
            let hint = if self.sequence_length == 0 {
                format!(
                    "; ppo.sequence_length = 0 (automatic) finds no length of \
                     {AUTO_SEQUENCE_MIN}-{AUTO_SEQUENCE_MAX} steps dividing both ppo.n_steps = {} \
                     and the minibatch: set ppo.sequence_length (e.g. {fits}, which divides \
                     both), or a ppo.n_steps and a ppo.batch_size that are multiples of \
                     {AUTO_SEQUENCE_MAX}",
                    self.n_steps
                )
            } else {
                format!(" (ppo.sequence_length = {fits} would divide both)")
            };
            return Err(InvalidConfig::new(
                "ppo.batch_size",
                self.batch_size,
                format!(
                    "must be a multiple of the sequence length, {len}, with a recurrent \
                     core (a minibatch holds whole sequences){hint}"
                ),
            ));
        }
        Ok(())
    }
}

impl PpoConfig {
    /// A recurrent policy's sequences for people, with where their length came from (for
    /// `strata config show`).
    pub fn describe_sequences(&self) -> String {
        if self.sequence_length != 0 {
            return format!(
                "{} steps (ppo.sequence_length), {} a minibatch",
                self.sequence_length,
                self.batch_size / self.sequence_length.max(1)
            );
        }
        match self.automatic_sequence_length() {
            Some(n) if n == self.n_steps => format!(
                "whole fragments of {n} steps, {} a minibatch (ppo.sequence_length = 0: \
                 automatic; ppo.batch_size = {} holds whole fragments)",
                self.batch_size / n.max(1),
                self.batch_size
            ),
            Some(n) => format!(
                "{n} steps, {} a minibatch (ppo.sequence_length = 0: automatic, the longest \
                 of {AUTO_SEQUENCE_MIN}-{AUTO_SEQUENCE_MAX} steps dividing ppo.n_steps = {} \
                 and ppo.batch_size = {})",
                self.batch_size / n,
                self.n_steps,
                self.batch_size
            ),
            None => "none: no automatic length fits (see ppo.sequence_length)".into(),
        }
    }

    /// Automatic sequences (`sequence_length = 0`) asked for where the rule finds none.
    fn automatic_fails(&self) -> bool {
        self.sequence_length == 0 && self.automatic_sequence_length().is_none()
    }
}

/// The longest sequence `sequence_length = 0` chooses when whole fragments do not fit a
/// minibatch.
pub const AUTO_SEQUENCE_MAX: usize = 32;
/// The shortest: below it truncated back-propagation sees too little of the past to be
/// worth choosing without being asked.
pub const AUTO_SEQUENCE_MIN: usize = 8;

/// The greatest common divisor.
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_network_clipping_needs_a_norm_to_clip_to() {
        let mut c = PpoConfig {
            clip_grad_per_network: true,
            ..PpoConfig::default()
        };
        c.validate(1).unwrap();
        c.max_grad_norm = None;
        let e = c.validate(1).unwrap_err();
        assert_eq!(e.key, "ppo.clip_grad_per_network");
        assert!(e.to_string().contains("ppo.max_grad_norm"), "{e}");
    }
}
