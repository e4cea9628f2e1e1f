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
use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::conv::{Conv2d, ImageShape};
use crate::init::{orthogonal, orthogonal_transposed};
use crate::kernels::{activation_backward, add_rows, bias_activation};
use crate::matmul::{add_partials, matmul, par_matmul, par_matmul_tn, View};
use rayon::prelude::*;

/// `v / 255` for every byte, looked up while gathering patches (a division per pixel
/// costs more than the gather itself).
static BYTE_TO_UNIT: [f32; 256] = {
    let mut table = [0.0; 256];
    let mut v = 0;
    while v < 256 {
        table[v] = v as f32 / 255.0;
        v += 1;
    }
    table
};

/// Images per parallel task in the forward pass: fixed, so results never depend on the
/// thread count; few enough that a task's patches stay in cache between gather and product.
const SAMPLES_PER_TASK: usize = 4;

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

/// Pixels of a batch of channels-last images.
#[derive(Clone, Copy, Debug)]
pub enum Pixels<'a> {
    /// Bytes, scaled by 1/255 as they are gathered (they stay bytes until then).
    U8(&'a [u8]),
    /// Floats, used as they are (images already in [0, 1], or a layer's output).
    F32(&'a [f32]),
}

impl Pixels<'_> {
    fn len(&self) -> usize {
        match self {
            Pixels::U8(p) => p.len(),
            Pixels::F32(p) => p.len(),
        }
    }
}

/// A copy of the last forward pass's pixels: the first layer's patches are gathered again
/// in the backward pass instead of being kept (they are the largest intermediate, every
/// pixel repeated (kernel / stride)^2 times: 105 MB for 256 Atari frames).
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

/// Gathers the first layer's patches of `images` (whole images of `conv`'s input).
fn gather_first(
    conv: &Conv2d,
    pixels: Pixels<'_>,
    images: std::ops::Range<usize>,
    out: &mut [f32],
) {
    let span = images.start * conv.input.len()..images.end * conv.input.len();
    match pixels {
        Pixels::U8(px) => conv.im2col_into(&px[span], |v| BYTE_TO_UNIT[usize::from(v)], out),
        Pixels::F32(px) => conv.im2col_into(&px[span], |v| v, out),
    }
}

thread_local! {
    /// Each thread's buffer for the first layer's patches of one task's images.
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
    /// Offset of each convolution's weights in the flat parameter vector.
    offsets: Vec<usize>,
    flat: usize,
    fc_offset: usize,
    num_params: usize,
}

/// Per-batch intermediate values kept for the backward pass, grown on demand and reused.
#[derive(Clone, Debug, Default)]
pub struct CnnCache {
    /// Each convolution's patch matrix.
    patches: Vec<Vec<f32>>,
    /// Each convolution's output after its ReLU (channels-last).
    outputs: Vec<Vec<f32>>,
    features: Vec<f32>,
    grad_a: Vec<f32>,
    grad_b: Vec<f32>,
    partials: Vec<f32>,
    pixels: KeptPixels,
    batch: usize,
}

impl CnnCache {
    /// The features of the last forward pass (`batch x features`).
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// Bytes this cache holds (its buffers' capacities): a batch's working memory.
    pub fn bytes(&self) -> usize {
        let floats = |v: &Vec<f32>| v.capacity() * 4;
        let pixels = match &self.pixels {
            KeptPixels::None => 0,
            KeptPixels::U8(v) => v.capacity(),
            KeptPixels::F32(v) => v.capacity() * 4,
        };
        self.patches
            .iter()
            .chain(&self.outputs)
            .map(floats)
            .sum::<usize>()
            + [&self.features, &self.grad_a, &self.grad_b, &self.partials]
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
        let mut offsets = Vec::new();
        let (mut shape, mut n) = (input, 0);
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
            offsets.push(n);
            n += conv.num_params();
            convs.push(conv);
        }
        let flat = shape.len();
        let fc_offset = n;
        n += flat * arch.features() + arch.features();
        Ok(Cnn {
            arch,
            convs,
            offsets,
            flat,
            fc_offset,
            num_params: n,
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
        self.num_params
    }

    /// Offset of convolution `l`'s weights (its biases follow them).
    pub fn conv_offset(&self, l: usize) -> usize {
        self.offsets[l]
    }

    /// Offset of the fully connected layer's weights (its biases follow them).
    pub fn fc_offset(&self) -> usize {
        self.fc_offset
    }

    /// Orthogonal weights with `gain` (torch's `orthogonal_` on each layer's `out x fan_in`
    /// matrix, as SB3 and CleanRL initialise NatureCNN with gain sqrt 2), zero biases.
    pub fn init_orthogonal<R: Rng + ?Sized>(&self, gain: f32, rng: &mut R) -> Vec<f32> {
        let mut params = vec![0.0; self.num_params];
        for (conv, &offset) in self.convs.iter().zip(&self.offsets) {
            let (fan_in, fan_out) = (conv.patch_len(), conv.out_channels);
            params[offset..offset + fan_in * fan_out]
                .copy_from_slice(&orthogonal(fan_out, fan_in, gain, rng));
        }
        // The fully connected layer is stored `in x out`, torch's transpose.
        let (fan_in, fan_out, offset) = (self.flat, self.features(), self.fc_offset);
        orthogonal_transposed(&mut params[offset..], (fan_in, fan_out), gain, rng);
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
        assert_eq!(params.len(), self.num_params, "parameter vector length");
        assert_eq!(pixels.len(), batch * self.input().len(), "pixel count");
        let layers = self.convs.len();
        cache.patches.resize_with(layers, Vec::new);
        cache.outputs.resize_with(layers, Vec::new);
        cache.batch = batch;
        cache.pixels.keep(pixels);
        for (l, conv) in self.convs.iter().enumerate() {
            let (pl, oc) = (conv.patch_len(), conv.out_channels);
            let (w, b) = self.layer(params, self.offsets[l], pl, oc);
            let (done, rest) = cache.outputs.split_at_mut(l);
            let y = &mut rest[0];
            y.resize(batch * conv.positions() * oc, 0.0);
            // Gather a few images' patches and multiply them while they are in cache.
            let rows = SAMPLES_PER_TASK * conv.positions();
            let multiply = |p: &[f32], y: &mut [f32]| {
                let n = p.len() / pl;
                matmul(y, View::new(p, n, pl), View::new(w, oc, pl).t(), false);
                bias_activation(y, b, Some(Activation::Relu));
            };
            if l == 0 {
                y.par_chunks_mut(rows * oc).enumerate().for_each(|(k, y)| {
                    let n = y.len() / oc;
                    let images = k * SAMPLES_PER_TASK..k * SAMPLES_PER_TASK + n / conv.positions();
                    with_scratch(n * pl, |p| {
                        gather_first(conv, pixels, images, p);
                        multiply(p, y);
                    });
                });
                continue;
            }
            let patches = &mut cache.patches[l];
            patches.resize(batch * conv.positions() * pl, 0.0);
            let image = conv.input.len() * SAMPLES_PER_TASK;
            let input = &done[l - 1];
            patches
                .par_chunks_mut(rows * pl)
                .zip(y.par_chunks_mut(rows * oc))
                .enumerate()
                .for_each(|(k, (p, y))| {
                    let span = k * image..(k * image + image).min(input.len());
                    conv.im2col_into(&input[span], |v| v, p);
                    multiply(p, y);
                });
        }
        let features = self.features();
        let (w, b) = self.layer(params, self.fc_offset, self.flat, features);
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
        assert_eq!(grads.len(), self.num_params, "gradient vector length");
        let CnnCache {
            patches,
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
            let (gw, gb) = grads[self.fc_offset..self.fc_offset + (self.flat + 1) * features]
                .split_at_mut(self.flat * features);
            par_matmul(
                gw,
                View::new(&outputs[last], batch, self.flat).t(),
                View::new(grad_a, batch, features),
                true,
            );
            add_rows(grad_a, gb);
        }
        let (w, _) = self.layer(params, self.fc_offset, self.flat, features);
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
            activation_backward(Activation::Relu, &outputs[l], grad_a);
            let (rows, pl, oc) = (
                batch * conv.positions(),
                conv.patch_len(),
                conv.out_channels,
            );
            let off = self.offsets[l];
            let (gw, gb) = grads[off..off + (pl + 1) * oc].split_at_mut(pl * oc);
            add_rows(grad_a, gb);
            // dW += dY^T P (filters as rows).
            if l == 0 {
                // The pixels' patches again, a task's images at a time, each task's
                // product a partial added in task order.
                let rows = SAMPLES_PER_TASK * conv.positions();
                let tasks = batch.div_ceil(SAMPLES_PER_TASK);
                partials.resize(tasks * oc * pl, 0.0);
                let dy = &grad_a[..];
                partials[..tasks * oc * pl]
                    .par_chunks_mut(oc * pl)
                    .enumerate()
                    .for_each(|(k, part)| {
                        let dy = &dy[k * rows * oc..((k + 1) * rows * oc).min(dy.len())];
                        let n = dy.len() / oc;
                        let images =
                            k * SAMPLES_PER_TASK..k * SAMPLES_PER_TASK + n / conv.positions();
                        with_scratch(n * pl, |p| {
                            gather_first(conv, pixels.view(), images, p);
                            matmul(part, View::new(dy, n, oc).t(), View::new(p, n, pl), false);
                        });
                    });
                add_partials(gw, &partials[..tasks * oc * pl]);
                break;
            }
            par_matmul_tn(gw, grad_a, &patches[l], (rows, oc, pl), partials);
            let (w, _) = self.layer(params, off, pl, oc);
            grad_b.resize(rows * pl, 0.0);
            par_matmul(
                grad_b,
                View::new(grad_a, rows, oc),
                View::new(w, oc, pl),
                false,
            );
            grad_a.resize(batch * conv.input.len(), 0.0);
            conv.col2im(grad_b, batch, grad_a);
        }
    }

    fn layer<'p>(
        &self,
        params: &'p [f32],
        offset: usize,
        fan_in: usize,
        fan_out: usize,
    ) -> (&'p [f32], &'p [f32]) {
        let (w, rest) = params[offset..].split_at(fan_in * fan_out);
        (w, &rest[..fan_out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    fn shape(height: usize, width: usize, channels: usize) -> ImageShape {
        ImageShape {
            height,
            width,
            channels,
        }
    }

    #[test]
    fn the_default_encoder_follows_the_image_size() {
        assert_eq!(CnnArch::for_image(shape(84, 84, 4)), CnnArch::NatureCnn);
        assert_eq!(CnnArch::for_image(shape(36, 40, 3)), CnnArch::NatureCnn);
        assert_eq!(CnnArch::for_image(shape(10, 10, 7)), CnnArch::MinatarCnn);
        assert_eq!(CnnArch::for_image(shape(84, 35, 1)), CnnArch::MinatarCnn);
        // NatureCNN on 84x84x4: 3136 flat values, 1.68M parameters as in SB3.
        let nature = Cnn::new(CnnArch::NatureCnn, shape(84, 84, 4)).unwrap();
        assert_eq!(nature.flat_size(), 3136);
        assert_eq!(nature.num_params(), 1_684_128);
        let err = Cnn::new(CnnArch::NatureCnn, shape(30, 84, 4)).unwrap_err();
        assert!(err.to_string().contains("30x84"), "{err}");
        assert_eq!(
            Cnn::new(CnnArch::MinatarCnn, shape(10, 10, 4))
                .unwrap()
                .num_params(),
            16 * 36 + 16 + 1024 * 128 + 128
        );
    }

    /// A small three-layer encoder built like NatureCNN, for gradient checks.
    fn small_nature() -> Cnn {
        Cnn::new(CnnArch::NatureCnn, shape(36, 37, 2)).unwrap()
    }

    #[test]
    fn gradients_match_finite_differences() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(4);
        let cnn = small_nature();
        let mut params = cnn.init_orthogonal(2f32.sqrt(), &mut rng);
        for p in params.iter_mut() {
            *p += rng.random_range(-0.02..0.02); // non-zero biases too
        }
        let batch = SAMPLES_PER_TASK + 1; // two tasks, the second partial
        let pixels: Vec<u8> = (0..batch * cnn.input().len())
            .map(|_| rng.random_range(0..=255))
            .collect();
        let dl: Vec<f32> = (0..batch * cnn.features())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        // A ReLU network with a linear loss is multilinear in each parameter while no unit
        // changes sign, so a probe whose interval keeps every unit's sign must match
        // tightly; one whose interval crosses a kink is skipped (and counted).
        let signs = |cache: &CnnCache| -> Vec<bool> {
            let units = cache.outputs.iter().flatten().chain(&cache.features);
            units.map(|v| *v > 0.0).collect()
        };
        let loss = |params: &[f32], cache: &mut CnnCache| -> f64 {
            let y = cnn.forward(params, Pixels::U8(&pixels), batch, cache);
            y.iter()
                .zip(&dl)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum()
        };
        let mut cache = CnnCache::default();
        loss(&params, &mut cache);
        let base = signs(&cache);
        let mut grads = vec![0.0; cnn.num_params()];
        cnn.backward(&params, &mut cache, &dl, &mut grads);
        // Every layer's weights and biases, a sample of each.
        let mut probes = Vec::new();
        for (l, conv) in cnn.convs().iter().enumerate() {
            let off = cnn.conv_offset(l);
            let nw = conv.patch_len() * conv.out_channels;
            probes.extend((0..nw).step_by(nw / 40 + 1).map(|i| off + i));
            probes.extend((0..conv.out_channels).step_by(3).map(|i| off + nw + i));
        }
        let nw = cnn.flat_size() * cnn.features();
        probes.extend((0..nw).step_by(nw / 60 + 1).map(|i| cnn.fc_offset() + i));
        probes.extend(
            (0..cnn.features())
                .step_by(37)
                .map(|i| cnn.fc_offset() + nw + i),
        );
        let h = 1e-3_f32;
        let (mut checked, mut kinks) = (0, 0);
        let (mut up_cache, mut down_cache) = (CnnCache::default(), CnnCache::default());
        for &i in &probes {
            let orig = params[i];
            params[i] = orig + h;
            let up = loss(&params, &mut up_cache);
            params[i] = orig - h;
            let down = loss(&params, &mut down_cache);
            params[i] = orig;
            if signs(&up_cache) != base || signs(&down_cache) != base {
                kinks += 1;
                continue;
            }
            let numeric = (up - down) / (2.0 * f64::from(h));
            let analytic = f64::from(grads[i]);
            assert!(
                (numeric - analytic).abs() <= 2e-3 + 1e-2 * numeric.abs(),
                "param {i}: numeric {numeric} analytic {analytic}"
            );
            checked += 1;
        }
        assert!(
            checked * 2 > probes.len(),
            "{kinks} of {} probes hit a kink",
            probes.len()
        );
    }

    #[test]
    fn u8_and_scaled_f32_pixels_give_the_same_features() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(9);
        let cnn = Cnn::new(CnnArch::MinatarCnn, shape(10, 10, 4)).unwrap();
        let params = cnn.init_orthogonal(2f32.sqrt(), &mut rng);
        let bytes: Vec<u8> = (0..2 * 400).map(|i| (i * 7 % 256) as u8).collect();
        let floats: Vec<f32> = bytes.iter().map(|b| f32::from(*b) / 255.0).collect();
        let (mut a, mut b) = (CnnCache::default(), CnnCache::default());
        let fa = cnn.forward(&params, Pixels::U8(&bytes), 2, &mut a).to_vec();
        let fb = cnn.forward(&params, Pixels::F32(&floats), 2, &mut b);
        assert_eq!(fa, fb);
        assert!(fa.iter().any(|v| *v > 0.0));
    }
}
