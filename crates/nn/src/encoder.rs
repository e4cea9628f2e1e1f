//! The encoder shared by the policy and value networks when observations hold images: a
//! CNN per image, the observation's other values passed through, all concatenated into
//! one feature row per observation.
//!
//! An observation row stays one flat run of `f32` values (what the runtime moves); the
//! images inside it are channels-last spans at known offsets ([`ImageInput`]). Byte images
//! are handed to their CNN as `u8` (it scales them by 1/255 while gathering patches);
//! images already in [0, 1] as they are.

use std::ops::Range;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::cnn::{Cnn, CnnArch, CnnCache, ConvPrecision, ImageTooSmall, Pixels};
use crate::conv::ImageShape;
use crate::kernels::round_to_bytes;
use crate::params::ParamBlocks;

/// How an image's stored values map to the encoder's inputs in [0, 1].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PixelScale {
    /// Bytes 0..=255 (`uint8` images), divided by 255.
    Byte,
    /// Values already in [0, 1] (boolean images, float images), used as they are.
    Unit,
}

/// One image inside a flat observation row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageInput {
    /// Where the image starts in the row.
    pub offset: usize,
    /// Its channels-last shape.
    pub shape: ImageShape,
    /// How its values become [0, 1].
    pub scale: PixelScale,
}

/// One image's CNN with its place in the row, the parameters and the features.
struct ImageEncoder {
    input: ImageInput,
    cnn: Cnn,
    /// Where its parameters lie in the encoder's parameter vector.
    params: Range<usize>,
    /// Offset of its features in a feature row.
    column: usize,
    cache: CnnCache,
    /// The batch's pixels when they cannot be used in place.
    bytes: Vec<u8>,
    floats: Vec<f32>,
    /// Its columns of a feature gradient, contiguous.
    grad: Vec<f32>,
}

/// The encoder: a CNN per image, the rest of the row passed through.
pub(crate) struct SharedEncoder {
    obs_dim: usize,
    images: Vec<ImageEncoder>,
    /// Spans of the row outside every image, and where each lands in a feature row.
    passed: Vec<(Range<usize>, usize)>,
    features: usize,
    /// Image `i`'s CNN's tensors as `{i}.*`.
    layout: ParamBlocks,
    out: Vec<f32>,
}

impl SharedEncoder {
    /// The encoder of rows of `obs_dim` values holding `images` (ordered by offset, not
    /// overlapping, inside the row), each image through the CNN `arch_for` picks, its
    /// products in `precision`.
    ///
    /// # Errors
    /// [`ImageTooSmall`] when an image is too small for its architecture.
    ///
    /// # Panics
    /// When images overlap or leave the row.
    pub(crate) fn new(
        obs_dim: usize,
        images: &[ImageInput],
        arch_for: impl Fn(ImageShape) -> CnnArch,
        precision: ConvPrecision,
    ) -> Result<Self, ImageTooSmall> {
        let mut encoders = Vec::with_capacity(images.len());
        let mut passed = Vec::new();
        let mut layout = ParamBlocks::new();
        let (mut row, mut column) = (0, 0);
        for input in images {
            assert!(
                input.offset >= row && input.offset + input.shape.len() <= obs_dim,
                "images must be ordered, apart and inside the row"
            );
            if input.offset > row {
                passed.push((row..input.offset, column));
                column += input.offset - row;
            }
            let cnn = Cnn::new(arch_for(input.shape), input.shape)?.with_precision(precision);
            let width = cnn.features();
            let params = layout.push_blocks(&encoders.len().to_string(), cnn.layout());
            encoders.push(ImageEncoder {
                input: *input,
                cnn,
                params,
                column,
                cache: CnnCache::default(),
                bytes: Vec::new(),
                floats: Vec::new(),
                grad: Vec::new(),
            });
            row = input.offset + input.shape.len();
            column += width;
        }
        if row < obs_dim {
            passed.push((row..obs_dim, column));
            column += obs_dim - row;
        }
        Ok(SharedEncoder {
            obs_dim,
            images: encoders,
            passed,
            features: column,
            layout,
            out: Vec::new(),
        })
    }

    /// Width of a feature row.
    pub(crate) fn features(&self) -> usize {
        self.features
    }

    /// Number of parameters (all the CNNs').
    pub(crate) fn num_params(&self) -> usize {
        self.layout.len()
    }

    /// Where each CNN's parameters lie, and their names (`{image}.conv0.weight`, ...:
    /// PyTorch's shapes, the fully connected weights `flat x features`).
    pub(crate) fn layout(&self) -> &ParamBlocks {
        &self.layout
    }

    /// Initial parameters: each CNN orthogonal with gain sqrt 2 (`orthogonal`, as SB3 and
    /// CleanRL do), else PyTorch's default (as SB3 with `ortho_init=False`).
    pub(crate) fn init<R: Rng + ?Sized>(&self, orthogonal: bool, rng: &mut R) -> Vec<f32> {
        let mut params = Vec::with_capacity(self.num_params());
        for image in &self.images {
            params.extend(if orthogonal {
                image.cnn.init_orthogonal(2f32.sqrt(), rng)
            } else {
                image.cnn.init_uniform(rng)
            });
        }
        params
    }

    /// Encodes `batch` rows of `obs`; returns the feature rows (`batch x features`).
    ///
    /// # Panics
    /// When `params` or `obs` have the wrong length.
    pub(crate) fn forward(&mut self, params: &[f32], obs: &[f32], batch: usize) -> &[f32] {
        assert_eq!(params.len(), self.num_params(), "encoder parameter length");
        assert_eq!(obs.len(), batch * self.obs_dim, "observation batch length");
        let (obs_dim, width) = (self.obs_dim, self.features);
        self.out.resize(batch * width, 0.0);
        for image in &mut self.images {
            let span = image.input.offset..image.input.offset + image.input.shape.len();
            let whole = span.len() == obs_dim;
            let rows = obs.chunks_exact(obs_dim).map(|row| &row[span.clone()]);
            let pixels = match image.input.scale {
                PixelScale::Byte => {
                    // Stored as exact integers: the cast loses nothing (and saturates).
                    let len = span.len();
                    image.bytes.resize(batch * len, 0);
                    for (bytes, row) in image.bytes.chunks_exact_mut(len).zip(rows) {
                        round_to_bytes(row, bytes);
                    }
                    Pixels::U8(&image.bytes)
                }
                PixelScale::Unit if whole => Pixels::F32(obs),
                PixelScale::Unit => {
                    image.floats.clear();
                    image.floats.extend(rows.flatten());
                    Pixels::F32(&image.floats)
                }
            };
            let p = &params[image.params.clone()];
            let features = image.cnn.forward(p, pixels, batch, &mut image.cache);
            let f = image.cnn.features();
            for (out, feat) in self
                .out
                .chunks_exact_mut(width)
                .zip(features.chunks_exact(f))
            {
                out[image.column..image.column + f].copy_from_slice(feat);
            }
        }
        for (span, column) in &self.passed {
            for (out, row) in self
                .out
                .chunks_exact_mut(width)
                .zip(obs.chunks_exact(obs_dim))
            {
                out[*column..*column + span.len()].copy_from_slice(&row[span.clone()]);
            }
        }
        &self.out
    }

    /// Back-propagates `grad_features` (d loss / d features of the last forward pass) into
    /// the CNNs, *adding* d loss / d params into `grads`.
    ///
    /// # Panics
    /// When lengths disagree with the last forward pass.
    pub(crate) fn backward(&mut self, params: &[f32], grad_features: &[f32], grads: &mut [f32]) {
        assert_eq!(grads.len(), self.num_params(), "encoder gradient length");
        let width = self.features;
        for image in &mut self.images {
            let f = image.cnn.features();
            image.grad.clear();
            image.grad.extend(
                grad_features
                    .chunks_exact(width)
                    .flat_map(|row| &row[image.column..image.column + f]),
            );
            image.cnn.backward(
                &params[image.params.clone()],
                &mut image.cache,
                &image.grad,
                &mut grads[image.params.clone()],
            );
        }
    }

    /// What each image gets, for people: `nature_cnn on 84x84x4`.
    pub(crate) fn describe(&self) -> Vec<String> {
        self.images
            .iter()
            .map(|image| {
                let s = image.input.shape;
                format!(
                    "{} on {}x{}x{}",
                    image.cnn.arch().name(),
                    s.height,
                    s.width,
                    s.channels
                )
            })
            .collect()
    }
}
