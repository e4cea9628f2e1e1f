//! The network's architecture as a run config states it, and the head it ends in.

use serde::{Deserialize, Serialize};

use crate::activation::Activation;

/// Network architecture, from the run config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// Hidden layer widths of the policy network.
    pub policy_hidden: Vec<usize>,
    /// Hidden layer widths of the value network.
    pub value_hidden: Vec<usize>,
    /// Hidden activation.
    pub activation: Activation,
    /// Initial log standard deviation of a Gaussian policy.
    pub log_std_init: f64,
    /// Orthogonal initialisation (gain sqrt 2 hidden, 0.01 policy head, 1 value head);
    /// otherwise the same with gain 1 everywhere.
    pub ortho_init: bool,
    /// Generalised state-dependent exploration (gSDE, as SB3 has it) for a Gaussian
    /// policy: the noise is the policy's last hidden features times an exploration matrix
    /// that the sampler holds fixed over a fragment, so exploration is smooth in time and
    /// scaled by the state; `log_std_init` then initialises a `latent x dim` matrix.
    pub sde: bool,
    /// How long a gSDE exploration matrix is held: a `fragment` (SB3's default of one
    /// rollout) or a whole `episode`, which explores like a perturbed policy per episode.
    pub sde_hold: SdeHold,
}

/// How long the sampler holds a gSDE exploration matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SdeHold {
    /// Drawn anew for each env at every fragment start.
    #[default]
    Fragment,
    /// Drawn anew for an env when its episode ends.
    Episode,
}

impl NetworkConfig {
    /// Standard normals per env in a gSDE exploration matrix (`latent x dim`); 0 without
    /// gSDE or for a categorical head.
    pub fn sde_noise_len(&self, obs_dim: usize, head: Head) -> usize {
        match head {
            Head::Gaussian { dim } if self.sde => {
                self.policy_hidden.last().copied().unwrap_or(obs_dim) * dim
            }
            _ => 0,
        }
    }
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            policy_hidden: vec![64, 64],
            value_hidden: vec![64, 64],
            activation: Activation::Tanh,
            log_std_init: 0.0,
            ortho_init: true,
            sde: false,
            sde_hold: SdeHold::Fragment,
        }
    }
}

/// Which distribution the policy outputs parameterise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Head {
    /// Logits over `n` actions; an action is one f32 holding the index.
    Categorical { n: usize },
    /// Means of `dim` independent Gaussians; log-stds are free parameters.
    Gaussian { dim: usize },
}

impl Head {
    /// Values per action.
    pub fn action_dim(self) -> usize {
        match self {
            Head::Categorical { .. } => 1,
            Head::Gaussian { dim } => dim,
        }
    }

    /// Policy-network outputs: logits, or the Gaussian's means.
    pub(crate) fn outputs(self) -> usize {
        match self {
            Head::Categorical { n } => n,
            Head::Gaussian { dim } => dim,
        }
    }
}
