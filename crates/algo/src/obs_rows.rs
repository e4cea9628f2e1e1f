//! Observation rows as the buffers keep them: the values inside images as bytes, a quarter
//! of their size as floats, everything else as `f32`. Rows go in as `f32` and come out as
//! `f32` or, for training, as they are kept ([`ObsRows::batch`]), which an image encoder
//! reads without turning bytes into floats and back.
//!
//! Image values are whole numbers in 0..=255 (bytes, or booleans as 0 and 1): stored as
//! bytes they come back exactly.

use std::ops::Range;

use strata_nn::{round_to_bytes, ObsBatch, SplitRows};

/// Rows of `dim` observation values, the values in `byte_spans` stored as bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObsRows {
    dim: usize,
    /// Parts of a row stored as bytes: ordered, apart, inside the row.
    byte_spans: Vec<Range<usize>>,
    /// Parts stored as floats: the rest of the row.
    float_spans: Vec<Range<usize>>,
    float_width: usize,
    byte_width: usize,
    floats: Vec<f32>,
    bytes: Vec<u8>,
}

impl ObsRows {
    /// `rows` zeroed rows of `dim` values, the values in `byte_spans` kept as bytes.
    ///
    /// # Panics
    /// When the spans are not ordered, apart and inside the row.
    pub fn new(rows: usize, dim: usize, byte_spans: &[Range<usize>]) -> Self {
        let mut float_spans = Vec::new();
        let mut at = 0;
        for span in byte_spans {
            assert!(
                span.start >= at && span.end <= dim && span.start <= span.end,
                "byte spans must be ordered, apart and inside the row"
            );
            if span.start > at {
                float_spans.push(at..span.start);
            }
            at = span.end;
        }
        if at < dim {
            float_spans.push(at..dim);
        }
        let byte_width: usize = byte_spans.iter().map(ExactSizeIterator::len).sum();
        let float_width = dim - byte_width;
        ObsRows {
            dim,
            byte_spans: byte_spans
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect(),
            float_spans,
            float_width,
            byte_width,
            floats: vec![0.0; rows * float_width],
            bytes: vec![0; rows * byte_width],
        }
    }

    /// `rows` zeroed rows of `dim` floats.
    pub fn dense(rows: usize, dim: usize) -> Self {
        Self::new(rows, dim, &[])
    }

    /// The parts of a row kept as bytes.
    pub fn byte_spans(&self) -> &[Range<usize>] {
        &self.byte_spans
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.floats
            .len()
            .checked_div(self.float_width)
            .or_else(|| self.bytes.len().checked_div(self.byte_width))
            .unwrap_or(0)
    }

    /// The rows as one `f32` slice, when nothing is kept as bytes.
    pub fn as_dense(&self) -> Option<&[f32]> {
        self.byte_spans.is_empty().then_some(&self.floats[..])
    }

    /// Bytes the rows take.
    pub fn memory_bytes(&self) -> usize {
        self.floats.len() * 4 + self.bytes.len()
    }

    /// The two stores, for moving rows between processes: the float part
    /// (`rows x (dim - bytes)`) and the byte part (`rows x bytes`).
    pub fn parts(&self) -> (&[f32], &[u8]) {
        (&self.floats, &self.bytes)
    }

    /// The two stores, to fill from [`ObsRows::parts`] of rows with the same layout.
    pub fn parts_mut(&mut self) -> (&mut [f32], &mut [u8]) {
        (&mut self.floats, &mut self.bytes)
    }

    /// Overwrites whole rows from `row` on with `values` (`k * dim` floats).
    ///
    /// # Panics
    /// When `values` is not whole rows or they do not fit.
    pub fn write(&mut self, row: usize, values: &[f32]) {
        let k = self.whole_rows(values);
        let (fw, bw) = (self.float_width, self.byte_width);
        let floats = &mut self.floats[row * fw..(row + k) * fw];
        let bytes = &mut self.bytes[row * bw..(row + k) * bw];
        for (r, src) in values.chunks_exact(self.dim).enumerate() {
            Self::pack(
                (&self.float_spans, &self.byte_spans),
                src,
                &mut floats[r * fw..(r + 1) * fw],
                &mut bytes[r * bw..(r + 1) * bw],
            );
        }
    }

    /// Appends whole rows (`k * dim` floats).
    ///
    /// # Panics
    /// When `values` is not whole rows.
    pub fn push(&mut self, values: &[f32]) {
        let k = self.whole_rows(values);
        let row = self.rows();
        self.floats.resize((row + k) * self.float_width, 0.0);
        self.bytes.resize((row + k) * self.byte_width, 0);
        self.write(row, values);
    }

    /// Removes every row.
    pub fn clear(&mut self) {
        self.floats.clear();
        self.bytes.clear();
    }

    /// Rows `rows` as floats, appended to `out`.
    ///
    /// # Panics
    /// When the rows are out of range.
    pub fn extend_into(&self, rows: Range<usize>, out: &mut Vec<f32>) {
        match self.batch(rows) {
            ObsBatch::Floats(floats) => out.extend_from_slice(floats),
            ObsBatch::Split(split) => split.extend_floats(out),
        }
    }

    /// Replaces these rows with rows `rows` of `src`, in order, in `src`'s layout: a
    /// minibatch gathered as the buffer keeps it (bytes stay bytes).
    ///
    /// # Panics
    /// When a row is out of range.
    pub fn gather_rows_from(&mut self, src: &ObsRows, rows: impl IntoIterator<Item = usize>) {
        if self.dim != src.dim || self.byte_spans != src.byte_spans {
            *self = ObsRows::new(0, src.dim, &src.byte_spans);
        }
        self.clear();
        let (fw, bw) = (self.float_width, self.byte_width);
        for row in rows {
            self.floats
                .extend_from_slice(&src.floats[row * fw..(row + 1) * fw]);
            self.bytes
                .extend_from_slice(&src.bytes[row * bw..(row + 1) * bw]);
        }
    }

    /// Rows `rows` as the model reads them: plain floats when nothing is kept as bytes,
    /// else split (see [`ObsBatch`]).
    ///
    /// # Panics
    /// When the rows are out of range.
    pub fn batch(&self, rows: Range<usize>) -> ObsBatch<'_> {
        let (fw, bw) = (self.float_width, self.byte_width);
        if self.byte_spans.is_empty() {
            return ObsBatch::Floats(&self.floats[rows.start * fw..rows.end * fw]);
        }
        ObsBatch::Split(SplitRows {
            dim: self.dim,
            byte_spans: &self.byte_spans,
            floats: &self.floats[rows.start * fw..rows.end * fw],
            bytes: &self.bytes[rows.start * bw..rows.end * bw],
        })
    }

    /// Copies `count` rows of `src` from row `from` into rows `to..`.
    ///
    /// # Panics
    /// When the rows' widths differ or a range is out of bounds.
    pub fn copy_rows_from(&mut self, to: usize, src: &ObsRows, from: usize, count: usize) {
        assert_eq!(self.dim, src.dim, "observation widths differ");
        if self.byte_spans == src.byte_spans {
            let (fw, bw) = (self.float_width, self.byte_width);
            self.floats[to * fw..(to + count) * fw]
                .copy_from_slice(&src.floats[from * fw..(from + count) * fw]);
            self.bytes[to * bw..(to + count) * bw]
                .copy_from_slice(&src.bytes[from * bw..(from + count) * bw]);
        } else {
            let mut values = Vec::with_capacity(count * self.dim);
            src.extend_into(from..from + count, &mut values);
            self.write(to, &values);
        }
    }

    fn whole_rows(&self, values: &[f32]) -> usize {
        assert!(
            self.dim > 0 && values.len().is_multiple_of(self.dim),
            "{} values are not whole rows of {}",
            values.len(),
            self.dim
        );
        values.len() / self.dim
    }

    fn pack(
        (float_spans, byte_spans): (&[Range<usize>], &[Range<usize>]),
        src: &[f32],
        floats: &mut [f32],
        bytes: &mut [u8],
    ) {
        let mut at = 0;
        for span in float_spans {
            floats[at..at + span.len()].copy_from_slice(&src[span.clone()]);
            at += span.len();
        }
        let mut at = 0;
        for span in byte_spans {
            // Whole numbers in 0..=255: the conversion is exact (and saturates).
            round_to_bytes(&src[span.clone()], &mut bytes[at..at + span.len()]);
            at += span.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(k: usize) -> Vec<f32> {
        // [-1.5 k | 6 pixel values | 0.25 k]
        let mut r = vec![-1.5 * k as f32];
        r.extend((0..6).map(|i| ((k * 40 + i * 7) % 256) as f32));
        r.push(0.25 * k as f32);
        r
    }

    #[test]
    fn rows_come_back_exactly_and_images_take_a_byte_a_value() {
        let pixels = vec![1..7, 7..7];
        let mut rows = ObsRows::new(3, 8, &pixels);
        assert_eq!(rows.memory_bytes(), 3 * (2 * 4 + 6));
        assert!(rows.as_dense().is_none());
        let values: Vec<f32> = (0..3).flat_map(row).collect();
        rows.write(0, &values);
        let mut out = Vec::new();
        rows.extend_into(0..3, &mut out);
        assert_eq!(out, values);
        // Appending, and copying between stores of either layout.
        let mut grown = ObsRows::new(0, 8, &pixels);
        grown.push(&row(5));
        grown.push(&[row(6), row(7)].concat());
        assert_eq!(grown.rows(), 3);
        let mut dense = ObsRows::dense(4, 8);
        dense.copy_rows_from(1, &grown, 1, 2);
        assert_eq!(
            &dense.as_dense().unwrap()[8..24],
            &[row(6), row(7)].concat()[..]
        );
        rows.copy_rows_from(0, &dense, 2, 1);
        out.clear();
        rows.extend_into(0..1, &mut out);
        assert_eq!(out, row(7));
    }

    /// A minibatch gathered as kept reads back as the float rows it holds, split or dense.
    #[test]
    fn gathered_rows_read_as_the_model_reads_them() {
        let mut rows = ObsRows::new(3, 8, &[1..7, 8..8]);
        rows.write(0, &(0..3).flat_map(row).collect::<Vec<_>>());
        let mut minibatch = ObsRows::default();
        minibatch.gather_rows_from(&rows, [2, 0]);
        let batch = minibatch.batch(0..2);
        assert!(matches!(batch, ObsBatch::Split(_)));
        let mut floats = Vec::new();
        assert_eq!(batch.floats(&mut floats), &[row(2), row(0)].concat()[..]);
        assert_eq!(batch.rows(8), 2);
        let mut dense = ObsRows::dense(2, 8);
        dense.write(0, &[row(4), row(1)].concat());
        minibatch.gather_rows_from(&dense, [1]);
        assert!(matches!(minibatch.batch(0..1), ObsBatch::Floats(r) if r == &row(1)[..]));
    }

    #[test]
    fn dense_rows_are_plain_floats() {
        let mut rows = ObsRows::dense(2, 3);
        rows.write(1, &[1.0, 2.0, 3.0]);
        assert_eq!(rows.as_dense().unwrap(), &[0.0, 0.0, 0.0, 1.0, 2.0, 3.0]);
        assert_eq!(rows.memory_bytes(), 24);
    }
}
