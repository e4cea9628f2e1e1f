//! Where each parameter tensor lies in a flat parameter vector, and what it is called in a
//! checkpoint: the one place offsets, slices and tensor names are worked out.
//!
//! Every component (an MLP, a recurrent layer, a CNN) declares its tensors in order into a
//! [`ParamBlocks`]; a component made of others nests their blocks under a prefix
//! (`policy.0.weight`, `core.policy.0.weight_ih`, `encoder.0.conv1.bias`). The model's
//! parameters, gradients, Adam moments and checkpoint tensors all follow that one layout.

use std::ops::Range;

use crate::NamedTensor;

/// One tensor of a parameter vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSlot {
    /// Its name in a checkpoint.
    pub name: String,
    /// Its shape (PyTorch's, or the transpose where a component says so).
    pub shape: Vec<usize>,
    /// Where its values lie.
    pub range: Range<usize>,
}

/// The layout of a flat parameter vector: named tensors, each right after the previous.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamBlocks {
    slots: Vec<ParamSlot>,
    len: usize,
}

impl ParamBlocks {
    /// An empty layout.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a tensor of `shape`; returns where it lies.
    pub fn push(&mut self, name: impl Into<String>, shape: &[usize]) -> Range<usize> {
        let range = self.len..self.len + shape.iter().product::<usize>();
        self.len = range.end;
        self.slots.push(ParamSlot {
            name: name.into(),
            shape: shape.to_vec(),
            range: range.clone(),
        });
        range
    }

    /// Appends every tensor of `inner`, named `{prefix}.{name}`; returns the span they
    /// cover.
    pub fn push_blocks(&mut self, prefix: &str, inner: &ParamBlocks) -> Range<usize> {
        let start = self.len;
        for slot in &inner.slots {
            self.push(format!("{prefix}.{}", slot.name), &slot.shape);
        }
        start..self.len
    }

    /// Values in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tensors, in order.
    pub fn slots(&self) -> &[ParamSlot] {
        &self.slots
    }

    /// Where tensor `i` lies.
    pub fn range(&self, i: usize) -> Range<usize> {
        self.slots[i].range.clone()
    }

    /// Tensor `i`'s values in `params`.
    pub fn get<'p>(&self, params: &'p [f32], i: usize) -> &'p [f32] {
        &params[self.range(i)]
    }

    /// The tensors of `params` (laid out as here), named and shaped.
    ///
    /// # Panics
    /// When `params` is not this layout's length.
    pub fn tensors(&self, params: &[f32]) -> Vec<NamedTensor> {
        assert_eq!(params.len(), self.len, "parameter vector length");
        self.slots
            .iter()
            .map(|slot| NamedTensor {
                name: slot.name.clone(),
                shape: slot.shape.clone(),
                data: params[slot.range.clone()].to_vec(),
            })
            .collect()
    }
}

/// `values` cut into the given spans, which must follow each other in order (gaps are
/// skipped; an empty span gives an empty slice).
///
/// # Panics
/// When a span starts before the previous one ends or runs past the end.
pub fn cut<const N: usize>(values: &[f32], spans: [Range<usize>; N]) -> [&[f32]; N] {
    let mut at = 0;
    let mut rest = values;
    spans.map(|span| {
        assert!(span.start >= at, "spans must follow each other");
        let (part, after) = rest[span.start - at..].split_at(span.len());
        (rest, at) = (after, span.end);
        part
    })
}

/// [`cut`] for mutable values: disjoint mutable parts of one vector.
///
/// # Panics
/// As [`cut`].
pub fn cut_mut<const N: usize>(values: &mut [f32], spans: [Range<usize>; N]) -> [&mut [f32]; N] {
    let mut at = 0;
    let mut rest = values;
    spans.map(|span| {
        assert!(span.start >= at, "spans must follow each other");
        let (part, after) = std::mem::take(&mut rest)[span.start - at..].split_at_mut(span.len());
        (rest, at) = (after, span.end);
        part
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_follow_each_other_and_nest_under_a_prefix() {
        let mut layer = ParamBlocks::new();
        assert_eq!(layer.push("weight", &[2, 3]), 0..6);
        assert_eq!(layer.push("bias", &[3]), 6..9);
        let mut model = ParamBlocks::new();
        model.push("log_std", &[2]);
        assert_eq!(model.push_blocks("policy.0", &layer), 2..11);
        assert_eq!(model.len(), 11);
        let names: Vec<_> = model.slots().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["log_std", "policy.0.weight", "policy.0.bias"]);
        let params: Vec<f32> = (0..11).map(|v| v as f32).collect();
        let tensors = model.tensors(&params);
        assert_eq!(tensors[2].data, [8.0, 9.0, 10.0]);
        assert_eq!(tensors[1].shape, [2, 3]);
        assert_eq!(model.get(&params, 0), [0.0, 1.0]);
    }

    #[test]
    fn cut_hands_out_disjoint_parts_and_skips_gaps() {
        let mut values: Vec<f32> = (0..10).map(|v| v as f32).collect();
        let [a, b, c] = cut(&values, [0..2, 2..2, 5..10]);
        assert_eq!((a, b, c.len()), (&[0.0, 1.0][..], &[][..], 5));
        let [x, y] = cut_mut(&mut values, [1..3, 3..4]);
        x[0] = -1.0;
        y[0] = -3.0;
        assert_eq!(values[..4], [0.0, -1.0, 2.0, -3.0]);
    }

    #[test]
    #[should_panic(expected = "spans must follow each other")]
    fn spans_out_of_order_are_refused() {
        let values = [0.0; 4];
        let _ = cut(&values, [2..3, 0..1]);
    }
}
