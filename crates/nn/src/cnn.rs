//! Convolutional encoders for image observations: the layers of a named architecture,
//! their forward pass from `u8` or `f32` pixels to a feature vector, and a hand-written
//! backward pass, all on the current rayon pool.
//!
//! Parameters live in one flat vector, as in [`crate::Mlp`]: per convolution the weights
//! (one row of `kernel * kernel * in_channels` per filter, as PyTorch's `out x fan_in`, the
//! row ordered kernel row, kernel column, channel) then the biases; then the fully
//! connected layer's weights (`flat x features`, the flat input in channels-last order) and
//! biases. Filters as rows make the weight gradient one product whose long inner dimension
//! (every output pixel of the batch) is contiguous in both operands. Every layer is followed by
//! a ReLU, the last one included, as in NatureCNN.

use rand::Rng;

use crate::activation::Activation;
use crate::bf16::{matmul_bf16, matmul_bf16_gathered, matmul_bf16_tn_gathered, PackedRhs};
pub use crate::cnn_arch::{CnnArch, ConvPrecision, ConvSpec};
pub use crate::cnn_gather::Pixels;
use crate::cnn_gather::{gather, gather_pairs, gather_row_pairs};
use crate::conv::{Conv2d, ImageShape};
use crate::init::{orthogonal, orthogonal_transposed};
use crate::kernels::{activation_backward, add_rows, bias_activation};
use crate::matmul::{add_partials, matmul, par_matmul, View};
use crate::params::{cut_mut, ParamBlocks};
use rayon::prelude::*;

/// What a byte pixel is divided by. The division is folded into the first layer instead
/// of done per pixel: its weights are divided before the forward product and its weight
/// gradient after the backward one (`x/255 . w == x . w/255`), so the pixels' patches are
/// plain conversions, which vectorise (a lookup or a division per pixel cost more than
/// the product with them).
const BYTE_SCALE: f32 = 255.0;

/// Images per parallel task in the forward pass, and per step of a backward task: fixed,
/// so results never depend on the thread count; few enough that their patches stay in
/// cache between gather and product.
const SAMPLES_PER_TASK: usize = 4;

/// Images per parallel task in the backward pass. Each task adds its weight gradient into
/// a partial of its own, and the partials are summed in task order: more images a task,
/// fewer partials to sum.
const BACKWARD_SAMPLES_PER_TASK: usize = 16;

/// A copy of the last forward pass's pixels: every layer's patches are gathered again in
/// the backward pass instead of being kept (they are the largest intermediates, every
/// value repeated up to (kernel / stride)^2 times: 105 MB for the first layer of 256
/// Atari frames, 71 MB for the two others).
#[derive(Clone, Debug, Default)]
enum KeptPixels {
    #[default]
    None,
    U8(Vec<u8>),
    F32(Vec<f32>),
}

impl KeptPixels {
    fn keep(&mut self, pixels: Pixels<'_>) {
        match (&mut *self, pixels) {
            (KeptPixels::U8(v), Pixels::U8(p)) => {
                v.clear();
                v.extend_from_slice(p);
            }
            (KeptPixels::F32(v), Pixels::F32(p)) => {
                v.clear();
                v.extend_from_slice(p);
            }
            (_, Pixels::U8(p)) => *self = KeptPixels::U8(p.to_vec()),
            (_, Pixels::F32(p)) => *self = KeptPixels::F32(p.to_vec()),
        }
    }

    fn view(&self) -> Pixels<'_> {
        match self {
            KeptPixels::U8(v) => Pixels::U8(v),
            KeptPixels::F32(v) => Pixels::F32(v),
            KeptPixels::None => Pixels::F32(&[]),
        }
    }
}

/// A layer's filters as its backward products read them: float32 as stored, or packed for
/// bfloat16 products (`None` for the first layer, whose input gets no gradient: its one
/// product, the weight gradient, packs its operands per step).
#[derive(Clone, Copy)]
enum Filters<'a> {
    F32(&'a [f32]),
    Bf16(Option<&'a PackedRhs>),
}

/// One convolution's backward pass, a few images at a time, so that each group's patches
/// are gathered again, multiplied and scattered back while they are in cache (the patch
/// matrices of a whole batch, each value repeated up to (kernel / stride)^2 times, are
/// never kept). `dy` is d loss / d the layer's output `y` (after its ReLU), taken through
/// the ReLU here, in place. `parts` holds one block per task of
/// [`BACKWARD_SAMPLES_PER_TASK`] images, laid out as the layer's parameters: the task's
/// dY^T P (`out_channels x patch_len`), then its column sums of dY (the biases'
/// gradient). `d_input`, when given, is overwritten with d loss / d input.
fn conv_backward(
    conv: &Conv2d,
    input: Pixels<'_>,
    y: &[f32],
    dy: &mut [f32],
    filters: Filters<'_>,
    parts: &mut [f32],
    d_input: Option<&mut [f32]>,
) {
    let (pl, oc, positions) = (conv.patch_len(), conv.out_channels, conv.positions());
    let image = conv.input.len();
    let task_rows = BACKWARD_SAMPLES_PER_TASK * positions * oc;
    let bytes = matches!(input, Pixels::U8(_));
    let task =
        |k: usize, part: &mut [f32], dy: &mut [f32], y: &[f32], mut d_in: Option<&mut [f32]>| {
            activation_backward(Activation::Relu, y, dy);
            let (part_w, part_b) = part.split_at_mut(pl * oc);
            part_b.fill(0.0);
            add_rows(dy, part_b);
            let first = k * BACKWARD_SAMPLES_PER_TASK;
            let step = SAMPLES_PER_TASK * positions * oc;
            for (j, dy) in dy.chunks(step).enumerate() {
                let n = dy.len() / oc;
                let images =
                    first + j * SAMPLES_PER_TASK..first + j * SAMPLES_PER_TASK + n / positions;
                // bfloat16 patches are gathered straight into the packed pairs of rows.
                let floats = if matches!(filters, Filters::F32(_)) {
                    n * pl
                } else {
                    0
                };
                let scratch = floats + if d_in.is_some() { n * pl } else { 0 };
                with_scratch(scratch, |scratch| {
                    let (p, dp) = scratch.split_at_mut(floats);
                    // dW += dY^T P (filters as rows).
                    let dy_rows = View::new(dy, n, oc);
                    match filters {
                        Filters::Bf16(_) => {
                            let fill = |packed: &mut PackedRhs| {
                                packed.gathered((n, pl), |pairs, stride| {
                                    gather_row_pairs(conv, input, images.clone(), pairs, stride)
                                });
                            };
                            matmul_bf16_tn_gathered(part_w, dy_rows, fill, j > 0);
                        }
                        Filters::F32(_) => {
                            gather(conv, input, images.clone(), p);
                            matmul(part_w, dy_rows.t(), View::new(p, n, pl), j > 0);
                        }
                    }
                    if let Some(d_in) = d_in.as_deref_mut() {
                        let dy = View::new(dy, n, oc);
                        match filters {
                            Filters::Bf16(Some(w)) => matmul_bf16(dp, dy, w, false),
                            Filters::Bf16(None) => {
                                unreachable!("an input gradient needs packed filters")
                            }
                            Filters::F32(w) => matmul(dp, dy, View::new(w, oc, pl), false),
                        }
                        let local = (images.start - first) * image..(images.end - first) * image;
                        conv.col2im(dp, &mut d_in[local]);
                    }
                });
            }
            if bytes {
                part_w.iter_mut().for_each(|v| *v /= BYTE_SCALE);
            }
        };
    let tasks = dy.len().div_ceil(task_rows);
    let mut d_chunks: Vec<Option<&mut [f32]>> = match d_input {
        Some(d) => d
            .chunks_mut(BACKWARD_SAMPLES_PER_TASK * image)
            .map(Some)
            .collect(),
        None => (0..tasks).map(|_| None).collect(),
    };
    parts
        .par_chunks_mut((pl + 1) * oc)
        .zip(dy.par_chunks_mut(task_rows))
        .zip(y.par_chunks(task_rows))
        .zip(d_chunks.par_iter_mut())
        .enumerate()
        .for_each(|(k, (((part, dy), y), d_in))| task(k, part, dy, y, d_in.as_deref_mut()));
}

thread_local! {
    /// Each thread's buffer for the patches (and, backward, their gradients) of a few
    /// images.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's scratch buffer, sized to `len`.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| {
        let mut buf = cell.borrow_mut();
        if buf.len() < len {
            buf.resize(len, 0.0);
        }
        f(&mut buf[..len])
    })
}

/// A convolutional encoder's shape: the layers of a [`CnnArch`] on a given image size.
#[derive(Clone, Debug, PartialEq)]
pub struct Cnn {
    arch: CnnArch,
    convs: Vec<Conv2d>,
    flat: usize,
    /// Per convolution `conv{l}.weight` (`out x fan_in`) and `conv{l}.bias`, then
    /// `fc.weight` (`flat x features`) and `fc.bias`: layer `i`'s are tensors `2i`, `2i+1`.
    layout: ParamBlocks,
    precision: ConvPrecision,
}

/// Per-batch intermediate values kept for the backward pass, grown on demand and reused.
#[derive(Clone, Debug, Default)]
pub struct CnnCache {
    /// Each convolution's output after its ReLU (channels-last).
    outputs: Vec<Vec<f32>>,
    features: Vec<f32>,
    grad_a: Vec<f32>,
    grad_b: Vec<f32>,
    partials: Vec<f32>,
    /// The first layer's weights divided by [`BYTE_SCALE`], for byte pixels.
    first_weights: Vec<f32>,
    pixels: KeptPixels,
    batch: usize,
}

impl CnnCache {
    /// The features of the last forward pass (`batch x features`).
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// Convolution `layer`'s output after its ReLU in the last forward pass
    /// (`batch x positions x channels`, channels-last): which units the ReLUs let through.
    ///
    /// # Panics
    /// When the encoder has no such layer or no forward pass ran.
    pub fn layer_output(&self, layer: usize) -> &[f32] {
        &self.outputs[layer]
    }

    /// Bytes this cache holds (its buffers' capacities): a batch's working memory.
    pub fn bytes(&self) -> usize {
        let floats = |v: &Vec<f32>| v.capacity() * 4;
        let pixels = match &self.pixels {
            KeptPixels::None => 0,
            KeptPixels::U8(v) => v.capacity(),
            KeptPixels::F32(v) => v.capacity() * 4,
        };
        self.outputs.iter().map(floats).sum::<usize>()
            + [
                &self.features,
                &self.grad_a,
                &self.grad_b,
                &self.partials,
                &self.first_weights,
            ]
            .into_iter()
            .map(floats)
            .sum::<usize>()
            + pixels
    }
}

/// Why an encoder cannot be built on an image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {arch} encoder cannot take a {height}x{width} image: its layer {layer} needs at \
     least {kernel} pixels a side (use `minatar_cnn` for small images)"
)]
pub struct ImageTooSmall {
    /// The architecture's name.
    pub arch: &'static str,
    /// Image height.
    pub height: usize,
    /// Image width.
    pub width: usize,
    /// The first layer that does not fit (1-based).
    pub layer: usize,
    /// Its kernel side.
    pub kernel: usize,
}

impl Cnn {
    /// `arch` on images of `input`'s shape.
    ///
    /// # Errors
    /// [`ImageTooSmall`] when a layer's kernel does not fit what reaches it.
    pub fn new(arch: CnnArch, input: ImageShape) -> Result<Self, ImageTooSmall> {
        let mut convs = Vec::new();
        let mut layout = ParamBlocks::new();
        let mut shape = input;
        for (l, spec) in arch.convs().iter().enumerate() {
            let conv = Conv2d {
                input: shape,
                out_channels: spec.out_channels,
                kernel: spec.kernel,
                stride: spec.stride,
            };
            shape = conv.output().ok_or(ImageTooSmall {
                arch: arch.name(),
                height: input.height,
                width: input.width,
                layer: l + 1,
                kernel: spec.kernel,
            })?;
            layout.push(
                format!("conv{l}.weight"),
                &[conv.out_channels, conv.patch_len()],
            );
            layout.push(format!("conv{l}.bias"), &[conv.out_channels]);
            convs.push(conv);
        }
        let flat = shape.len();
        layout.push("fc.weight", &[flat, arch.features()]);
        layout.push("fc.bias", &[arch.features()]);
        Ok(Cnn {
            arch,
            convs,
            flat,
            layout,
            precision: ConvPrecision::F32,
        })
    }

    /// This encoder with its convolutions' products in `precision`.
    pub fn with_precision(mut self, precision: ConvPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// The convolutions' products' precision.
    pub fn precision(&self) -> ConvPrecision {
        self.precision
    }

    /// A layer's filters (`oc x pl`) packed for bfloat16 products when this encoder takes
    /// them, as the forward pass reads them (`transposed`) or as the backward pass does.
    fn packed_filters(&self, w: &[f32], conv: &Conv2d, transposed: bool) -> Option<PackedRhs> {
        (self.precision == ConvPrecision::Bf16).then(|| {
            let w = View::new(w, conv.out_channels, conv.patch_len());
            let mut packed = PackedRhs::default();
            packed.pack(if transposed { w.t() } else { w });
            packed
        })
    }

    /// The architecture.
    pub fn arch(&self) -> CnnArch {
        self.arch
    }

    /// The input image's shape.
    pub fn input(&self) -> ImageShape {
        self.convs[0].input
    }

    /// The convolution layers, input first.
    pub fn convs(&self) -> &[Conv2d] {
        &self.convs
    }

    /// Values entering the fully connected layer (the last convolution's output, flat).
    pub fn flat_size(&self) -> usize {
        self.flat
    }

    /// Width of the output features.
    pub fn features(&self) -> usize {
        self.arch.features()
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        self.layout.len()
    }

    /// Where each layer's weights and biases lie, and their names.
    pub fn layout(&self) -> &ParamBlocks {
        &self.layout
    }

    /// Layer `i`'s weights and biases (`i` = the number of convolutions: the fully
    /// connected layer).
    fn layer<'p>(&self, params: &'p [f32], i: usize) -> (&'p [f32], &'p [f32]) {
        (
            self.layout.get(params, 2 * i),
            self.layout.get(params, 2 * i + 1),
        )
    }

    /// Where layer `i`'s weights and, right after them, its biases lie.
    fn layer_span(&self, i: usize) -> std::ops::Range<usize> {
        self.layout.range(2 * i).start..self.layout.range(2 * i + 1).end
    }

    /// Orthogonal weights with `gain` (torch's `orthogonal_` on each layer's `out x fan_in`
    /// matrix, as SB3 and CleanRL initialise NatureCNN with gain sqrt 2), zero biases.
    pub fn init_orthogonal<R: Rng + ?Sized>(&self, gain: f32, rng: &mut R) -> Vec<f32> {
        let mut params = vec![0.0; self.num_params()];
        for (l, conv) in self.convs.iter().enumerate() {
            let (fan_in, fan_out) = (conv.patch_len(), conv.out_channels);
            params[self.layout.range(2 * l)]
                .copy_from_slice(&orthogonal(fan_out, fan_in, gain, rng));
        }
        // The fully connected layer is stored `in x out`, torch's transpose.
        let fc = self.layout.range(2 * self.convs.len());
        let (fan_in, fan_out) = (self.flat, self.features());
        orthogonal_transposed(&mut params[fc], (fan_in, fan_out), gain, rng);
        params
    }

    /// PyTorch's default initialisation of `Conv2d` and `Linear`: every weight and bias
    /// uniform in `+-1 / sqrt(fan_in)` (what SB3's CNN policies start from with
    /// `ortho_init=False`).
    pub fn init_uniform<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<f32> {
        let mut params = vec![0.0; self.num_params()];
        let fan_ins = self.convs.iter().map(Conv2d::patch_len);
        for (layer, fan_in) in fan_ins.chain([self.flat]).enumerate() {
            let bound = 1.0 / (fan_in as f32).sqrt();
            for tensor in [2 * layer, 2 * layer + 1] {
                for p in &mut params[self.layout.range(tensor)] {
                    *p = rng.random_range(-bound..bound);
                }
            }
        }
        params
    }

    /// Runs `batch` images through the encoder; returns the features (`batch x features`),
    /// keeping what [`Cnn::backward`] needs in `cache`.
    ///
    /// # Panics
    /// When `params` or `pixels` have the wrong length.
    pub fn forward<'c>(
        &self,
        params: &[f32],
        pixels: Pixels<'_>,
        batch: usize,
        cache: &'c mut CnnCache,
    ) -> &'c [f32] {
        assert_eq!(params.len(), self.num_params(), "parameter vector length");
        assert_eq!(pixels.len(), batch * self.input().len(), "pixel count");
        let layers = self.convs.len();
        cache.outputs.resize_with(layers, Vec::new);
        cache.batch = batch;
        cache.pixels.keep(pixels);
        for (l, conv) in self.convs.iter().enumerate() {
            let (pl, oc) = (conv.patch_len(), conv.out_channels);
            let (w, b) = self.layer(params, l);
            let (done, rest) = cache.outputs.split_at_mut(l);
            let (input, w) = match (l, pixels) {
                (0, Pixels::U8(_)) => {
                    let scaled = &mut cache.first_weights;
                    scaled.clear();
                    scaled.extend(w.iter().map(|v| v / BYTE_SCALE));
                    (pixels, &scaled[..])
                }
                (0, Pixels::F32(_)) => (pixels, w),
                _ => (Pixels::F32(&done[l - 1]), w),
            };
            let y = &mut rest[0];
            y.resize(batch * conv.positions() * oc, 0.0);
            let w_bf16 = self.packed_filters(w, conv, true);
            // Gather a few images' patches and multiply them while they are in cache.
            let rows = SAMPLES_PER_TASK * conv.positions();
            y.par_chunks_mut(rows * oc).enumerate().for_each(|(k, y)| {
                let n = y.len() / oc;
                let first = k * SAMPLES_PER_TASK;
                let images = first..first + n / conv.positions();
                match &w_bf16 {
                    // Patches gathered straight into bfloat16 pairs.
                    Some(w) if conv.pairs_gatherable() => {
                        let fill =
                            |rows: &mut [u32], step| gather_pairs(conv, input, images, rows, step);
                        matmul_bf16_gathered(y, (n, pl), fill, w, false);
                    }
                    _ => with_scratch(n * pl, |p| {
                        gather(conv, input, images, p);
                        let p = View::new(p, n, pl);
                        match &w_bf16 {
                            Some(w) => matmul_bf16(y, p, w, false),
                            None => matmul(y, p, View::new(w, oc, pl).t(), false),
                        }
                    }),
                }
                bias_activation(y, b, Some(Activation::Relu));
            });
        }
        let features = self.features();
        let (w, b) = self.layer(params, layers);
        cache.features.resize(batch * features, 0.0);
        par_matmul(
            &mut cache.features,
            View::new(&cache.outputs[layers - 1], batch, self.flat),
            View::new(w, self.flat, features),
            false,
        );
        bias_activation(&mut cache.features, b, Some(Activation::Relu));
        &cache.features
    }

    /// Back-propagates `grad_features` (d loss / d features of the last forward pass),
    /// *adding* d loss / d params into `grads`. The pixels get no gradient.
    ///
    /// # Panics
    /// When lengths disagree with the cached forward pass.
    pub fn backward(
        &self,
        params: &[f32],
        cache: &mut CnnCache,
        grad_features: &[f32],
        grads: &mut [f32],
    ) {
        let (batch, features) = (cache.batch, self.features());
        assert_eq!(
            grad_features.len(),
            batch * features,
            "feature-gradient length"
        );
        assert_eq!(grads.len(), self.num_params(), "gradient vector length");
        let CnnCache {
            outputs,
            features: out,
            grad_a,
            grad_b,
            partials,
            pixels,
            ..
        } = cache;
        grad_a.clear();
        grad_a.extend_from_slice(grad_features);
        activation_backward(Activation::Relu, out, grad_a);
        let last = self.convs.len() - 1;
        {
            // dW += X^T dY, db += column sums of dY.
            let fc = self.convs.len();
            let [gw, gb] = cut_mut(
                grads,
                [self.layout.range(2 * fc), self.layout.range(2 * fc + 1)],
            );
            par_matmul(
                gw,
                View::new(&outputs[last], batch, self.flat).t(),
                View::new(grad_a, batch, features),
                true,
            );
            add_rows(grad_a, gb);
        }
        let (w, _) = self.layer(params, self.convs.len());
        grad_b.resize(batch * self.flat, 0.0);
        par_matmul(
            grad_b,
            View::new(grad_a, batch, features),
            View::new(w, self.flat, features).t(),
            false,
        );
        std::mem::swap(grad_a, grad_b);
        for (l, conv) in self.convs.iter().enumerate().rev() {
            // grad_a: d loss / d (layer l's output after ReLU), channels-last.
            let (pl, oc) = (conv.patch_len(), conv.out_channels);
            let (w, _) = self.layer(params, l);
            // The layer's input: the pixels, or the previous layer's output, which gets
            // its gradient (the pixels do not).
            let input = match l {
                0 => pixels.view(),
                _ => Pixels::F32(&outputs[l - 1]),
            };
            let d_input = (l > 0).then(|| {
                grad_b.resize(batch * conv.input.len(), 0.0);
                &mut grad_b[..]
            });
            let block = (pl + 1) * oc;
            let tasks = batch.div_ceil(BACKWARD_SAMPLES_PER_TASK);
            partials.resize(tasks * block, 0.0);
            let parts = &mut partials[..tasks * block];
            let packed = (l > 0)
                .then(|| self.packed_filters(w, conv, false))
                .flatten();
            let filters = match self.precision {
                ConvPrecision::F32 => Filters::F32(w),
                ConvPrecision::Bf16 => Filters::Bf16(packed.as_ref()),
            };
            conv_backward(conv, input, &outputs[l], grad_a, filters, parts, d_input);
            add_partials(&mut grads[self.layer_span(l)], parts);
            if l == 0 {
                break;
            }
            std::mem::swap(grad_a, grad_b);
        }
    }
}

#[cfg(test)]
#[path = "cnn_tests.rs"]
mod tests;
