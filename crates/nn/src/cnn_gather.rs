//! Gathering a convolution's patches from a batch of images, a few images at a time: as
//! float rows, as bfloat16 pairs for a packed left-hand side, or as pairs of rows for a
//! packed right-hand side (the weight gradient's), bytes unscaled (see the CNN's
//! `BYTE_SCALE`), and the pixels they are gathered from.

use crate::bf16::{byte_interleave, byte_pairs, float_interleave, float_pairs};
use crate::conv::Conv2d;

/// Pixels of a batch of channels-last images.
#[derive(Clone, Copy, Debug)]
pub enum Pixels<'a> {
    /// Bytes, scaled by 1/255 as they are gathered (they stay bytes until then).
    U8(&'a [u8]),
    /// Floats, used as they are (images already in [0, 1], or a layer's output).
    F32(&'a [f32]),
}

impl Pixels<'_> {
    /// Values in the batch.
    pub(crate) fn len(&self) -> usize {
        match self {
            Pixels::U8(p) => p.len(),
            Pixels::F32(p) => p.len(),
        }
    }
}

/// Gathers the patches of `images` (whole images of `conv`'s input) into `out`, bytes
/// unscaled (the CNN folds the 1/255 into its first layer's weights).
pub(crate) fn gather(
    conv: &Conv2d,
    pixels: Pixels<'_>,
    images: std::ops::Range<usize>,
    out: &mut [f32],
) {
    let span = images.start * conv.input.len()..images.end * conv.input.len();
    match pixels {
        Pixels::U8(px) => conv.im2col(&px[span], f32::from, out),
        Pixels::F32(px) => conv.im2col(&px[span], |v| v, out),
    }
}

/// Gathers the patches of `images` as bfloat16 pairs into a packed left-hand side (row
/// `r` at `rows[r * row_step..]`), bytes unscaled as in [`gather`] (and exact: every byte
/// is a bfloat16). The layer's kernel rows must be even ([`Conv2d::pairs_gatherable`]).
pub(crate) fn gather_pairs(
    conv: &Conv2d,
    pixels: Pixels<'_>,
    images: std::ops::Range<usize>,
    rows: &mut [u32],
    row_step: usize,
) -> usize {
    let span = images.start * conv.input.len()..images.end * conv.input.len();
    match pixels {
        Pixels::U8(px) => conv.im2col_pairs(&px[span], byte_pairs, rows, row_step),
        Pixels::F32(px) => conv.im2col_pairs(&px[span], float_pairs, rows, row_step),
    }
}

/// Gathers the patches of `images` as pairs of patch rows into a packed right-hand side
/// ([`Conv2d::im2col_row_pairs`]), bytes unscaled as in [`gather`].
pub(crate) fn gather_row_pairs(
    conv: &Conv2d,
    pixels: Pixels<'_>,
    images: std::ops::Range<usize>,
    pairs: &mut [u32],
    stride: usize,
) -> usize {
    let span = images.start * conv.input.len()..images.end * conv.input.len();
    match pixels {
        Pixels::U8(px) => conv.im2col_row_pairs(&px[span], byte_interleave, pairs, stride),
        Pixels::F32(px) => conv.im2col_row_pairs(&px[span], float_interleave, pairs, stride),
    }
}
