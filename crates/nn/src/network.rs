//! The network's architecture as a run config states it, and the head it ends in.

use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::cnn::CnnArch;
use crate::conv::ImageShape;

/// Network architecture, from the run config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// What encodes image observations before the policy and value networks (`auto`: a
    /// CNN per image, NatureCNN from 36 pixels a side, the MinAtar encoder below; left out
    /// of the config, and so of its hash, when `auto`). Vector observations have none.
    #[serde(skip_serializing_if = "Encoder::is_auto")]
    pub encoder: Encoder,
    /// Hidden layer widths of the policy network (after the encoder, if there is one).
    pub policy_hidden: Vec<usize>,
    /// Hidden layer widths of the value network (after the encoder, if there is one).
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

/// The encoder of image observations, as `network.encoder` names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoder {
    /// A CNN per image, chosen by its size ([`CnnArch::for_image`]).
    #[default]
    Auto,
    /// No encoder: images are flattened into the MLP as their raw values.
    Mlp,
    /// NatureCNN for every image.
    NatureCnn,
    /// The MinAtar agent's small CNN for every image.
    MinatarCnn,
}

impl Encoder {
    /// The configuration name (`auto`, `mlp`, `nature_cnn`, `minatar_cnn`).
    pub fn name(self) -> &'static str {
        match self {
            Encoder::Auto => "auto",
            Encoder::Mlp => "mlp",
            Encoder::NatureCnn => "nature_cnn",
            Encoder::MinatarCnn => "minatar_cnn",
        }
    }

    /// Whether images go into the MLP flat ([`Encoder::Mlp`]).
    pub fn is_flat(self) -> bool {
        self == Encoder::Mlp
    }

    /// Whether this is the default, [`Encoder::Auto`].
    pub fn is_auto(&self) -> bool {
        *self == Encoder::Auto
    }

    /// The CNN an image of `shape` gets, or `None` when images go into the MLP flat.
    pub fn arch_for(self, shape: ImageShape) -> Option<CnnArch> {
        match self {
            Encoder::Auto => Some(CnnArch::for_image(shape)),
            Encoder::Mlp => None,
            Encoder::NatureCnn => Some(CnnArch::NatureCnn),
            Encoder::MinatarCnn => Some(CnnArch::MinatarCnn),
        }
    }
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
    /// gSDE or for a categorical head. `input` is what the policy network takes: the
    /// observation's width, or the encoder's features.
    pub fn sde_noise_len(&self, input: usize, head: Head) -> usize {
        match head {
            Head::Gaussian { dim } if self.sde => {
                self.policy_hidden.last().copied().unwrap_or(input) * dim
            }
            _ => 0,
        }
    }
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            encoder: Encoder::Auto,
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
