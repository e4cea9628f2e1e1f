//! The named encoder architectures (NatureCNN, the MinAtar agent's): their convolutions,
//! their feature width, and which an image gets by default.

use serde::{Deserialize, Serialize};

use crate::conv::ImageShape;

/// A named encoder architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CnnArch {
    /// Mnih et al. (2015) as SB3's and CleanRL's `NatureCNN`: 32 8x8/4, 64 4x4/2, 64 3x3/1,
    /// a fully connected layer of 512.
    NatureCnn,
    /// The MinAtar reference agent's: one 16-channel 3x3/1 convolution, a fully connected
    /// layer of 128.
    MinatarCnn,
}

/// What the convolutions' products take as operands (`network.conv_precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvPrecision {
    /// Float32 throughout.
    #[default]
    F32,
    /// The convolutions' products take bfloat16 operands (rounded to nearest even) and sum
    /// in float32; weights, gradients and Adam stay float32. Twice the products a cycle
    /// where the CPU has AVX-512 BF16; about as fast as `f32` where it has not (the
    /// rounded operands multiplied as float32).
    Bf16,
}

impl ConvPrecision {
    /// The configuration name (`f32`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            ConvPrecision::F32 => "f32",
            ConvPrecision::Bf16 => "bf16",
        }
    }

    /// Whether this is the default, [`ConvPrecision::F32`].
    pub fn is_f32(&self) -> bool {
        *self == ConvPrecision::F32
    }
}

/// One convolution of an architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvSpec {
    /// Output channels.
    pub out_channels: usize,
    /// Kernel side.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
}

impl CnnArch {
    /// The smallest side NatureCNN accepts: its three layers need 36 pixels.
    pub const NATURE_MIN_SIDE: usize = 36;

    /// The default for an image: NatureCNN where both sides are at least
    /// [`CnnArch::NATURE_MIN_SIDE`], the small MinAtar encoder below that.
    pub fn for_image(shape: ImageShape) -> Self {
        if shape.height.min(shape.width) >= Self::NATURE_MIN_SIDE {
            CnnArch::NatureCnn
        } else {
            CnnArch::MinatarCnn
        }
    }

    /// The configuration name (`nature_cnn`, `minatar_cnn`).
    pub fn name(self) -> &'static str {
        match self {
            CnnArch::NatureCnn => "nature_cnn",
            CnnArch::MinatarCnn => "minatar_cnn",
        }
    }

    /// The convolutions, input first.
    pub fn convs(self) -> &'static [ConvSpec] {
        const fn c(out_channels: usize, kernel: usize, stride: usize) -> ConvSpec {
            ConvSpec {
                out_channels,
                kernel,
                stride,
            }
        }
        const NATURE: [ConvSpec; 3] = [c(32, 8, 4), c(64, 4, 2), c(64, 3, 1)];
        const MINATAR: [ConvSpec; 1] = [c(16, 3, 1)];
        match self {
            CnnArch::NatureCnn => &NATURE,
            CnnArch::MinatarCnn => &MINATAR,
        }
    }

    /// Width of the feature vector the encoder outputs.
    pub fn features(self) -> usize {
        match self {
            CnnArch::NatureCnn => 512,
            CnnArch::MinatarCnn => 128,
        }
    }
}
