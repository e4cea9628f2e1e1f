//! A batch of observation rows as the model reads them for training: plain float rows, or
//! rows split as the experience buffer keeps them, the values inside images as bytes. An
//! image encoder reads split rows' bytes as they are (a minibatch of Atari frames is 7 MB
//! of bytes, where float rows would be 29 MB written, read and turned back into bytes).

use std::ops::Range;

/// Rows of observations.
#[derive(Clone, Copy, Debug)]
pub enum ObsBatch<'a> {
    /// Whole rows of floats.
    Floats(&'a [f32]),
    /// Rows split into floats and bytes.
    Split(SplitRows<'a>),
}

/// Rows split as the buffers keep them: each row's values outside `byte_spans` as floats
/// (in order), and those inside as bytes (whole numbers in 0..=255, in order).
#[derive(Clone, Copy, Debug)]
pub struct SplitRows<'a> {
    /// Values per row.
    pub dim: usize,
    /// Where a row's byte values lie: ordered, apart, inside the row, none empty.
    pub byte_spans: &'a [Range<usize>],
    /// `rows x (dim - byte width)`: the values outside the byte spans.
    pub floats: &'a [f32],
    /// `rows x byte width`: the values inside the byte spans.
    pub bytes: &'a [u8],
}

impl SplitRows<'_> {
    /// Byte values per row.
    pub fn byte_width(&self) -> usize {
        self.byte_spans.iter().map(ExactSizeIterator::len).sum()
    }

    /// Number of rows.
    ///
    /// # Panics
    /// When the spans leave the row or the two blocks do not hold the same whole rows.
    pub fn rows(&self) -> usize {
        let bw = self.byte_width();
        assert!(
            self.byte_spans.iter().all(|s| s.end <= self.dim) && bw <= self.dim,
            "byte spans inside the row"
        );
        let fw = self.dim - bw;
        let rows = self
            .floats
            .len()
            .checked_div(fw)
            .or_else(|| self.bytes.len().checked_div(bw))
            .unwrap_or(0);
        assert!(
            self.floats.len() == rows * fw && self.bytes.len() == rows * bw,
            "split rows: {} floats and {} bytes are not whole rows of {fw} and {bw}",
            self.floats.len(),
            self.bytes.len()
        );
        rows
    }

    /// The rows as whole float rows, appended to `out`.
    pub fn extend_floats(&self, out: &mut Vec<f32>) {
        let (rows, bw) = (self.rows(), self.byte_width());
        let fw = self.dim - bw;
        out.reserve(rows * self.dim);
        for r in 0..rows {
            let (floats, bytes) = (
                &self.floats[r * fw..(r + 1) * fw],
                &self.bytes[r * bw..(r + 1) * bw],
            );
            let (mut f, mut b, mut at) = (0, 0, 0);
            for span in self.byte_spans {
                let before = span.start - at;
                out.extend_from_slice(&floats[f..f + before]);
                out.extend(bytes[b..b + span.len()].iter().map(|&v| f32::from(v)));
                (f, b, at) = (f + before, b + span.len(), span.end);
            }
            out.extend_from_slice(&floats[f..]);
        }
    }
}

impl<'a> ObsBatch<'a> {
    /// Number of rows of `dim` values.
    ///
    /// # Panics
    /// When the rows are not whole rows of `dim` values.
    pub fn rows(&self, dim: usize) -> usize {
        match self {
            ObsBatch::Floats(obs) => {
                assert!(
                    dim > 0 && obs.len().is_multiple_of(dim),
                    "observation batch length"
                );
                obs.len() / dim
            }
            ObsBatch::Split(split) => {
                assert_eq!(split.dim, dim, "split rows of another width");
                split.rows()
            }
        }
    }

    /// The rows as floats: the slice itself, or split rows converted into `scratch`.
    pub fn floats<'s>(&self, scratch: &'s mut Vec<f32>) -> &'s [f32]
    where
        'a: 's,
    {
        match *self {
            ObsBatch::Floats(obs) => obs,
            ObsBatch::Split(split) => {
                scratch.clear();
                split.extend_floats(scratch);
                scratch
            }
        }
    }
}

impl<'a> From<&'a [f32]> for ObsBatch<'a> {
    fn from(obs: &'a [f32]) -> Self {
        ObsBatch::Floats(obs)
    }
}

impl<'a> From<&'a Vec<f32>> for ObsBatch<'a> {
    fn from(obs: &'a Vec<f32>) -> Self {
        ObsBatch::Floats(obs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_rows_come_back_as_the_float_rows() {
        // Rows of 7: floats at 0, bytes at 1..3, floats at 3..5, bytes at 5..7.
        let spans = [1..3, 5..7];
        let floats = [0.5, -1.0, 2.0, 9.0, 8.0, 7.0];
        let bytes = [1, 2, 3, 4, 255, 0, 6, 7];
        let split = SplitRows {
            dim: 7,
            byte_spans: &spans,
            floats: &floats,
            bytes: &bytes,
        };
        assert_eq!((split.byte_width(), split.rows()), (4, 2));
        let mut out = vec![5.0];
        split.extend_floats(&mut out);
        assert_eq!(out.remove(0), 5.0, "appended after what was there");
        let want = [
            0.5, 1.0, 2.0, -1.0, 2.0, 3.0, 4.0, //
            9.0, 255.0, 0.0, 8.0, 7.0, 6.0, 7.0,
        ];
        assert_eq!(out, want);
        let batch = ObsBatch::Split(split);
        assert_eq!(batch.rows(7), 2);
        let mut scratch = Vec::new();
        assert_eq!(batch.floats(&mut scratch), &want);
        let dense = ObsBatch::from(&want[..]);
        assert_eq!((dense.rows(7), dense.floats(&mut scratch)), (2, &want[..]));
    }
}
