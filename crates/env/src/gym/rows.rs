//! How an observation row crosses the shared region: its values outside images as `f32`,
//! its image values as bytes (a quarter of the size, and no conversion to floats in
//! Python), joined back into one `f32` row on the Rust side.

use std::ops::Range;

/// The split of a row of `dim` values into float and byte parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RowSplit {
    dim: usize,
    floats: Vec<Range<usize>>,
    bytes: Vec<Range<usize>>,
    float_width: usize,
    byte_width: usize,
}

impl RowSplit {
    /// Rows of `dim` values whose values in `bytes` (ordered, apart: the images,
    /// [`crate::EnvSpec::image_ranges`]) cross as bytes.
    pub(crate) fn new(dim: usize, bytes: Vec<Range<usize>>) -> Self {
        let mut floats = Vec::new();
        let mut at = 0;
        for span in &bytes {
            if span.start > at {
                floats.push(at..span.start);
            }
            at = span.end;
        }
        if at < dim {
            floats.push(at..dim);
        }
        let byte_width = bytes.iter().map(ExactSizeIterator::len).sum();
        RowSplit {
            dim,
            floats,
            bytes,
            float_width: dim - byte_width,
            byte_width,
        }
    }

    /// Float values per row.
    pub(crate) fn float_width(&self) -> usize {
        self.float_width
    }

    /// Byte values per row.
    pub(crate) fn byte_width(&self) -> usize {
        self.byte_width
    }

    /// Joins rows' float parts (`k x float_width`) and byte parts (`k x byte_width`) into
    /// `out` (`k x dim`).
    pub(crate) fn join(&self, floats: &[f32], bytes: &[u8], out: &mut [f32]) {
        if self.byte_width == 0 {
            out.copy_from_slice(floats);
            return;
        }
        let rows = out.len() / self.dim.max(1);
        for r in 0..rows {
            let row = &mut out[r * self.dim..(r + 1) * self.dim];
            let mut at = r * self.float_width;
            for span in &self.floats {
                row[span.clone()].copy_from_slice(&floats[at..at + span.len()]);
                at += span.len();
            }
            let mut at = r * self.byte_width;
            for span in &self.bytes {
                for (v, b) in row[span.clone()]
                    .iter_mut()
                    .zip(&bytes[at..at + span.len()])
                {
                    *v = f32::from(*b);
                }
                at += span.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_joined_in_their_order() {
        // [2 values | a 2-value image | 1 value]
        let split = RowSplit::new(5, std::iter::once(2..4).collect());
        assert_eq!((split.float_width(), split.byte_width()), (3, 2));
        let mut out = vec![0.0; 10];
        split.join(&[0.5, -1.0, 7.0, 1.5, 2.5, 3.5], &[9, 255, 0, 1], &mut out);
        assert_eq!(out, [0.5, -1.0, 9.0, 255.0, 7.0, 1.5, 2.5, 0.0, 1.0, 3.5]);
    }
}
