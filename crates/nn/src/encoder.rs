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
use crate::obs_batch::{ObsBatch, SplitRows};
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

/// Where a forward pass reads its rows from.
#[derive(Clone, Copy)]
enum Rows<'a> {
    Floats(&'a [f32]),
    /// Split rows whose byte spans are the images.
    Split(SplitRows<'a>),
}

impl ImageInput {
    /// The image's values in a row.
    fn span(&self) -> Range<usize> {
        self.offset..self.offset + self.shape.len()
    }
}

/// The pixels gathered into an image's own buffers.
fn image_pixels<'a>(bytes: &'a [u8], floats: &'a [f32], scale: PixelScale) -> Pixels<'a> {
    match scale {
        PixelScale::Byte => Pixels::U8(bytes),
        PixelScale::Unit => Pixels::F32(floats),
    }
}

impl ImageEncoder {
    /// This image's pixels in rows of `dim` values: in place when the rows hold them as
    /// they are (`Some`), else gathered into its own buffers (`None`; read them with
    /// [`image_pixels`]). `byte_offset`: where its bytes start in a split row's bytes.
    fn pixels<'a>(&mut self, rows: Rows<'a>, byte_offset: usize, dim: usize) -> Option<Pixels<'a>> {
        let len = self.input.shape.len();
        match (rows, self.input.scale) {
            (Rows::Split(split), scale) => {
                let bw = split.byte_width();
                if bw == len && scale == PixelScale::Byte {
                    return Some(Pixels::U8(split.bytes));
                }
                let rows = split
                    .bytes
                    .chunks_exact(bw)
                    .map(|row| &row[byte_offset..][..len]);
                match scale {
                    PixelScale::Byte => {
                        self.bytes.clear();
                        rows.for_each(|row| self.bytes.extend_from_slice(row));
                    }
                    PixelScale::Unit => {
                        self.floats.clear();
                        rows.for_each(|row| self.floats.extend(row.iter().map(|&v| f32::from(v))));
                    }
                }
                None
            }
            (Rows::Floats(obs), PixelScale::Unit) if len == dim => Some(Pixels::F32(obs)),
            (Rows::Floats(obs), scale) => {
                let rows = obs.chunks_exact(dim).map(|row| &row[self.input.span()]);
                match scale {
                    // Stored as exact integers: the cast loses nothing (and saturates).
                    PixelScale::Byte => {
                        self.bytes.resize(obs.len() / dim * len, 0);
                        for (bytes, row) in self.bytes.chunks_exact_mut(len).zip(rows) {
                            round_to_bytes(row, bytes);
                        }
                    }
                    PixelScale::Unit => {
                        self.floats.clear();
                        rows.for_each(|row| self.floats.extend_from_slice(row));
                    }
                }
                None
            }
        }
    }
}

/// The encoder: a CNN per image, the rest of the row passed through.
pub(crate) struct SharedEncoder {
    obs_dim: usize,
    images: Vec<ImageEncoder>,
    /// Spans of the row outside every image, and where each lands in a feature row.
    passed: Vec<(Range<usize>, usize)>,
    features: usize,
    /// Split rows made floats, for an encoder that cannot read them in place.
    scratch: Vec<f32>,
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
            scratch: Vec::new(),
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
    /// Split rows whose byte spans are this encoder's images, in order, are read as they
    /// are: their bytes are the pixels (for rows of one image, the block itself, which the
    /// CNN keeps a copy of for its backward pass), their floats the values passed through.
    ///
    /// # Panics
    /// When `params` or `obs` have the wrong length.
    pub(crate) fn forward(&mut self, params: &[f32], obs: ObsBatch<'_>, batch: usize) -> &[f32] {
        assert_eq!(params.len(), self.num_params(), "encoder parameter length");
        assert_eq!(obs.rows(self.obs_dim), batch, "observation batch length");
        let width = self.features;
        if batch == 0 {
            self.out.clear();
            return &self.out;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let rows = match obs {
            ObsBatch::Split(split) if self.images_are(split.byte_spans) => Rows::Split(split),
            other => Rows::Floats(other.floats(&mut scratch)),
        };
        self.out.resize(batch * width, 0.0);
        let mut byte_offset = 0;
        for image in &mut self.images {
            let pixels = image.pixels(rows, byte_offset, self.obs_dim);
            byte_offset += image.input.shape.len();
            let ImageEncoder {
                cnn,
                cache,
                params: cnn_params,
                column,
                ..
            } = image;
            let cnn_params = &params[cnn_params.clone()];
            let features = match pixels {
                Some(pixels) => cnn.forward(cnn_params, pixels, batch, cache),
                None => {
                    let pixels = image_pixels(&image.bytes, &image.floats, image.input.scale);
                    cnn.forward(cnn_params, pixels, batch, cache)
                }
            };
            let f = cnn.features();
            for (out, feat) in self
                .out
                .chunks_exact_mut(width)
                .zip(features.chunks_exact(f))
            {
                out[*column..*column + f].copy_from_slice(feat);
            }
        }
        let mut float_offset = 0;
        for (span, column) in &self.passed {
            let len = span.len();
            for (r, out) in self.out.chunks_exact_mut(width).enumerate() {
                let values = match rows {
                    Rows::Floats(obs) => &obs[r * self.obs_dim..][span.clone()],
                    Rows::Split(split) => {
                        let fw = split.dim - split.byte_width();
                        &split.floats[r * fw + float_offset..][..len]
                    }
                };
                out[*column..*column + len].copy_from_slice(values);
            }
            float_offset += len;
        }
        self.scratch = scratch;
        &self.out
    }

    /// Whether `byte_spans` are exactly this encoder's images, in order.
    fn images_are(&self, byte_spans: &[Range<usize>]) -> bool {
        byte_spans.len() == self.images.len()
            && self
                .images
                .iter()
                .zip(byte_spans)
                .all(|(image, span)| image.input.span() == *span)
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
                let precision = match image.cnn.precision() {
                    ConvPrecision::F32 => String::new(),
                    p => format!(" ({})", p.name()),
                };
                format!(
                    "{}{precision} on {}x{}x{}",
                    image.cnn.arch().name(),
                    s.height,
                    s.width,
                    s.channels
                )
            })
            .collect()
    }
}
