//! The network's architecture as a run config states it.

use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::cnn::CnnArch;
use crate::cnn_arch::ConvPrecision;
use crate::conv::ImageShape;
use crate::head::Head;
use crate::recurrent::CellKind;

/// Network architecture, from the run config.
///
/// Keys added after config hashes were first published are left out of the serialised
/// form at their defaults (`skip_serializing_if`), so older configs keep their hashes; a
/// shown or saved config writes them all the same (the config crate's `to_table`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// What encodes image observations before the policy and value networks (`auto`: a
    /// CNN per image, NatureCNN from 36 pixels a side, the MinAtar encoder below; left out
    /// of the config hash when `auto`). Vector observations have none.
    #[serde(skip_serializing_if = "Encoder::is_auto")]
    pub encoder: Encoder,
    /// The convolutions' products: `f32`, or `bf16` operands with float32 sums (weights,
    /// gradients and Adam stay float32; fast where the CPU has AVX-512 BF16). Left out of
    /// the config hash when `f32`.
    #[serde(skip_serializing_if = "ConvPrecision::is_f32")]
    pub conv_precision: ConvPrecision,
    /// Hidden layer widths of the policy network (after the encoder, if there is one).
    pub policy_hidden: Vec<usize>,
    /// Hidden layer widths of the value network (after the encoder, if there is one).
    pub value_hidden: Vec<usize>,
    /// Hidden activation.
    pub activation: Activation,
    /// Initial log standard deviation of a Gaussian policy.
    pub log_std_init: f64,
    /// Orthogonal initialisation (gain sqrt 2 hidden, 0.01 policy head, 1 value head; an
    /// image encoder's CNNs gain sqrt 2, a recurrent core gain 1 with zero biases);
    /// otherwise the MLPs the same with gain 1 everywhere, and an encoder and a core
    /// PyTorch's default initialisation (uniform in +-1/sqrt(fan in)), as SB3 has them.
    pub ortho_init: bool,
    /// Generalised state-dependent exploration (gSDE, as SB3 has it) for a Gaussian
    /// policy: the noise is the policy's last hidden features times an exploration matrix
    /// that the sampler holds fixed over a fragment, so exploration is smooth in time and
    /// scaled by the state; `log_std_init` then initialises a `latent x dim` matrix.
    pub sde: bool,
    /// How long a gSDE exploration matrix is held: a `fragment` (SB3's default of one
    /// rollout) or a whole `episode`, which explores like a perturbed policy per episode.
    pub sde_hold: SdeHold,
    /// With gSDE, draw every env's exploration matrix anew every this many steps of its
    /// fragment (SB3's `sde_sample_freq`; 0: hold it as `sde_hold` says). Hashed when
    /// set.
    #[serde(skip_serializing_if = "is_zero")]
    pub sde_sample_freq: usize,
    /// A recurrent core between the encoder (or the observation) and the policy and value
    /// networks: `lstm`, `gru` or `none`. Left out of the config hash when `none`.
    #[serde(skip_serializing_if = "Core::is_none")]
    pub core: Core,
    /// Hidden units of each recurrent layer (hashed when not 64).
    #[serde(skip_serializing_if = "is_default_core_size")]
    pub core_size: usize,
    /// Stacked recurrent layers (hashed when not 1).
    #[serde(skip_serializing_if = "is_one")]
    pub core_layers: usize,
    /// Whether the policy and value networks read one core (as Sample Factory) instead of
    /// one each (as sb3-contrib's default); hashed when shared.
    #[serde(skip_serializing_if = "is_false")]
    pub core_shared: bool,
}

/// `network.core_size` unless set.
const DEFAULT_CORE_SIZE: usize = 64;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_default_core_size(size: &usize) -> bool {
    *size == DEFAULT_CORE_SIZE
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

fn is_false(b: &bool) -> bool {
    !*b
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

/// Which recurrent core sits before the policy and value networks (`network.core`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Core {
    /// None: a feed-forward policy.
    #[default]
    None,
    /// Long short-term memory.
    Lstm,
    /// Gated recurrent unit.
    Gru,
}

impl Core {
    /// Whether this is [`Core::None`].
    pub fn is_none(&self) -> bool {
        *self == Core::None
    }

    /// The cell, or `None` for a feed-forward policy.
    pub fn cell(self) -> Option<CellKind> {
        match self {
            Core::None => None,
            Core::Lstm => Some(CellKind::Lstm),
            Core::Gru => Some(CellKind::Gru),
        }
    }

    /// The configuration name (`none`, `lstm`, `gru`).
    pub fn name(self) -> &'static str {
        match self {
            Core::None => "none",
            Core::Lstm => "lstm",
            Core::Gru => "gru",
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
    /// Values of recurrent state per env (0 without a core): every layer's state (hidden,
    /// and an LSTM's cell) for the policy's core, and the value's unless shared.
    pub fn state_len(&self) -> usize {
        let per_layer = match self.core {
            Core::None => return 0,
            Core::Lstm => 2 * self.core_size,
            Core::Gru => self.core_size,
        };
        per_layer * self.core_layers.max(1) * if self.core_shared { 1 } else { 2 }
    }

    /// The recurrent core for people (`lstm of 64 units, 1 layer, one for the policy and
    /// one for the value`), or `None` without one.
    pub fn describe_core(&self) -> Option<String> {
        self.core.cell()?;
        Some(format!(
            "{} of {} units, {} layer{}, {}",
            self.core.name(),
            self.core_size,
            self.core_layers,
            if self.core_layers == 1 { "" } else { "s" },
            if self.core_shared {
                "shared by the policy and value networks"
            } else {
                "one for the policy and one for the value network"
            }
        ))
    }

    /// Standard normals per env in a gSDE exploration matrix (`latent x dim`); 0 without
    /// gSDE or for a categorical head. `input` is what the policy network takes: the
    /// observation's width, or the encoder's features.
    pub fn sde_noise_len(&self, input: usize, head: Head) -> usize {
        if self.sde {
            head.log_std_len(true, self.latent_width(input))
        } else {
            0
        }
    }

    /// What feeds the policy network's output layer on inputs of `input` values: its last
    /// hidden layer, or the input itself without one (gSDE's features).
    pub(crate) fn latent_width(&self, input: usize) -> usize {
        self.policy_hidden.last().copied().unwrap_or(input)
    }
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            encoder: Encoder::Auto,
            conv_precision: ConvPrecision::F32,
            policy_hidden: vec![64, 64],
            value_hidden: vec![64, 64],
            activation: Activation::Tanh,
            log_std_init: 0.0,
            ortho_init: true,
            sde: false,
            sde_hold: SdeHold::Fragment,
            sde_sample_freq: 0,
            core: Core::None,
            core_size: DEFAULT_CORE_SIZE,
            core_layers: 1,
            core_shared: false,
        }
    }
}
