//! 2-D convolution as `im2col` + matrix product, over channels-last (NHWC) images.
//!
//! A convolution without padding turns each output pixel's receptive field into one row of
//! a patch matrix (`batch * out_h * out_w` rows of `kernel * kernel * in_channels` values,
//! ordered kernel row, kernel column, channel). The layer is then one matrix product with
//! the filters (`out_channels` rows of `patch_len`), and its output is again channels-last, ready
//! for the next layer without a transpose. The backward pass is the two transposed
//! products and a scatter-add of the patch gradients back onto the image (`col2im`).

/// Height, width and channels of one channels-last image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImageShape {
    /// Rows of pixels.
    pub height: usize,
    /// Pixels per row.
    pub width: usize,
    /// Values per pixel.
    pub channels: usize,
}

impl ImageShape {
    /// Values in one image.
    pub fn len(&self) -> usize {
        self.height * self.width * self.channels
    }

    /// Whether the image holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The geometry of one convolution layer (square kernel, no padding, no dilation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    /// Input image shape.
    pub input: ImageShape,
    /// Output channels (filters).
    pub out_channels: usize,
    /// Kernel side.
    pub kernel: usize,
    /// Step between receptive fields.
    pub stride: usize,
}

impl Conv2d {
    /// The output image's shape, or `None` when the kernel does not fit the input.
    pub fn output(&self) -> Option<ImageShape> {
        let (h, w, k, s) = (
            self.input.height,
            self.input.width,
            self.kernel,
            self.stride,
        );
        if k == 0 || s == 0 || h < k || w < k {
            return None;
        }
        Some(ImageShape {
            height: (h - k) / s + 1,
            width: (w - k) / s + 1,
            channels: self.out_channels,
        })
    }

    fn out_shape(&self) -> ImageShape {
        self.output().expect("kernel larger than the image")
    }

    /// Values in one patch row: `kernel * kernel * in_channels`.
    pub fn patch_len(&self) -> usize {
        self.kernel * self.kernel * self.input.channels
    }

    /// Output pixels (patch rows) per sample.
    pub fn positions(&self) -> usize {
        let out = self.out_shape();
        out.height * out.width
    }

    /// Weights then biases.
    pub fn num_params(&self) -> usize {
        self.patch_len() * self.out_channels + self.out_channels
    }

    /// Fills `patches` (`positions` rows of [`Conv2d::patch_len`] per image) from as many
    /// channels-last images as `images` holds, converting each value with `to_f32` (so
    /// `u8` pixels become floats here, not in a separate pass). Callers run it on a few
    /// images at a time, so that the patches are used while they are in cache.
    ///
    /// # Panics
    /// When `patches` is not sized for `images`.
    pub fn im2col<T: Copy>(&self, images: &[T], to_f32: impl Fn(T) -> f32, patches: &mut [f32]) {
        let image = self.input.len();
        let per_sample = self.positions() * self.patch_len();
        assert_eq!(
            patches.len() * image,
            images.len() * per_sample,
            "patch rows for the images"
        );
        let run = self.run();
        for (rows, img) in patches.chunks_mut(per_sample).zip(images.chunks(image)) {
            for (d, start) in rows.chunks_exact_mut(run).zip(self.run_starts()) {
                for (d, v) in d.iter_mut().zip(&img[start..start + run]) {
                    *d = to_f32(*v);
                }
            }
        }
    }

    /// As [`Conv2d::im2col`], but each patch row written as bfloat16 pairs straight into a
    /// packed left-hand side (row `r` at `patches[r * row_step..]`, its
    /// [`Conv2d::patch_len`]` / 2` pairs), `to_pairs` rounding one kernel row of values
    /// into pairs: no float patches in between. Only for an even kernel row
    /// ([`Conv2d::pairs_gatherable`]), so that no pair straddles two of them.
    ///
    /// # Panics
    /// When the kernel row is odd, a row step cannot hold a patch row, or `patches` is
    /// too small for `images`. Returns the patch rows written.
    pub fn im2col_pairs<T: Copy>(
        &self,
        images: &[T],
        to_pairs: impl Fn(&[T], &mut [u32]),
        patches: &mut [u32],
        row_step: usize,
    ) -> usize {
        assert!(self.pairs_gatherable(), "an odd kernel row straddles pairs");
        let (image, positions, run) = (self.input.len(), self.positions(), self.run());
        let rows = images.len() / image * positions;
        assert!(
            row_step >= self.patch_len() / 2,
            "row step shorter than a patch row"
        );
        assert!(
            patches.len() >= rows * row_step,
            "patch rows for the images"
        );
        let mut row = 0;
        for img in images.chunks_exact(image) {
            let mut starts = self.run_starts();
            for _ in 0..positions {
                let out = &mut patches[row * row_step..];
                for j in 0..self.kernel {
                    let start = starts.next().expect("a run per kernel row");
                    to_pairs(&img[start..start + run], &mut out[j * run / 2..][..run / 2]);
                }
                row += 1;
            }
        }
        rows
    }

    /// The patches of `images` packed as pairs of patch rows (bfloat16's right-hand side
    /// of a weight gradient, [`crate::bf16`]): pair row `p` holds rows `2p` and `2p + 1`
    /// interleaved by `interleave(even, odd, out)` one kernel row at a time, at
    /// `pairs[p * stride..]`; an odd last row is paired with zeros. No float patches in
    /// between.
    ///
    /// # Panics
    /// When a stride cannot hold a patch row, or `pairs` is too small for `images`.
    /// Returns the patch rows covered.
    pub fn im2col_row_pairs<T: Copy + Default>(
        &self,
        images: &[T],
        interleave: impl Fn(&[T], &[T], &mut [u32]),
        pairs: &mut [u32],
        stride: usize,
    ) -> usize {
        let (image, positions, run) = (self.input.len(), self.positions(), self.run());
        let rows = images.len() / image * positions;
        assert!(
            stride >= self.patch_len(),
            "stride shorter than a patch row"
        );
        assert!(
            pairs.len() >= rows.div_ceil(2) * stride,
            "pair rows for the images"
        );
        let zeros = vec![T::default(); run];
        let kernel_row = |r: usize, ky: usize| {
            let start = image * (r / positions) + self.run_start(r % positions, ky);
            &images[start..start + run]
        };
        for p in 0..rows.div_ceil(2) {
            let out = &mut pairs[p * stride..];
            for ky in 0..self.kernel {
                let odd = if 2 * p + 1 < rows {
                    kernel_row(2 * p + 1, ky)
                } else {
                    &zeros[..]
                };
                interleave(kernel_row(2 * p, ky), odd, &mut out[ky * run..][..run]);
            }
        }
        rows
    }

    /// Where kernel row `ky` of output position `position`'s patch starts in its image.
    fn run_start(&self, position: usize, ky: usize) -> usize {
        let out = self.out_shape();
        let (oy, ox) = (position / out.width, position % out.width);
        ((oy * self.stride + ky) * self.input.width + ox * self.stride) * self.input.channels
    }

    /// Whether [`Conv2d::im2col_pairs`] can gather this layer's patches: its kernel rows
    /// hold an even number of values.
    pub fn pairs_gatherable(&self) -> bool {
        self.run().is_multiple_of(2)
    }

    /// Values in one kernel row of a patch: `kernel` pixels of `in_channels` contiguous
    /// values, contiguous in the image too.
    fn run(&self) -> usize {
        self.kernel * self.input.channels
    }

    /// Where each run of a sample's patch rows starts in its image, in patch order (output
    /// row, output column, kernel row).
    fn run_starts(&self) -> impl Iterator<Item = usize> + '_ {
        let out = self.out_shape();
        let (k, s, c, w) = (
            self.kernel,
            self.stride,
            self.input.channels,
            self.input.width,
        );
        (0..out.height).flat_map(move |oy| {
            (0..out.width)
                .flat_map(move |ox| (0..k).map(move |ky| ((oy * s + ky) * w + ox * s) * c))
        })
    }

    /// Adds the patch gradients `d_patches` (laid out as [`Conv2d::im2col`]'s output) back
    /// onto the images they came from: `d_images` (overwritten, as many images as the
    /// patch rows cover) is d loss / d input.
    ///
    /// # Panics
    /// When `d_patches` is not sized for `d_images`.
    pub fn col2im(&self, d_patches: &[f32], d_images: &mut [f32]) {
        let image = self.input.len();
        let per_sample = self.positions() * self.patch_len();
        assert_eq!(
            d_patches.len() * image,
            d_images.len() * per_sample,
            "patch rows for the images"
        );
        let run = self.run();
        for (img, rows) in d_images.chunks_mut(image).zip(d_patches.chunks(per_sample)) {
            img.fill(0.0);
            for (g, start) in rows.chunks_exact(run).zip(self.run_starts()) {
                for (d, g) in img[start..start + run].iter_mut().zip(g) {
                    *d += g;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(h: usize, w: usize, c: usize, out: usize, k: usize, s: usize) -> Conv2d {
        Conv2d {
            input: ImageShape {
                height: h,
                width: w,
                channels: c,
            },
            out_channels: out,
            kernel: k,
            stride: s,
        }
    }

    #[test]
    fn output_shapes_follow_the_usual_formula() {
        // NatureCNN on 84 x 84: 20, 9, 7.
        let c1 = layer(84, 84, 4, 32, 8, 4);
        assert_eq!(c1.output().unwrap().height, 20);
        let c2 = layer(20, 20, 32, 64, 4, 2);
        assert_eq!(c2.output().unwrap().width, 9);
        let c3 = layer(9, 9, 64, 64, 3, 1);
        assert_eq!(c3.output().unwrap().height, 7);
        assert_eq!(layer(5, 7, 1, 1, 3, 2).output().unwrap().width, 3);
        assert!(layer(2, 9, 1, 1, 3, 1).output().is_none());
    }

    /// The patch matrix times any weights equals a direct convolution, and col2im is
    /// im2col's adjoint: `<im2col(x), g> == <x, col2im(g)>`.
    #[test]
    fn patches_match_a_direct_convolution_and_col2im_is_the_adjoint() {
        let conv = layer(7, 6, 3, 2, 3, 2);
        let batch = 11;
        let x: Vec<f32> = (0..batch * conv.input.len())
            .map(|i| ((i * 37) % 23) as f32 * 0.1 - 1.0)
            .collect();
        let mut patches = vec![0.0; batch * conv.positions() * conv.patch_len()];
        conv.im2col(&x, |v| v, &mut patches);
        let (pl, out) = (conv.patch_len(), conv.output().unwrap());
        let weight: Vec<f32> = (0..pl).map(|i| (i as f32 * 0.7).sin()).collect();
        for b in 0..batch {
            for oy in 0..out.height {
                for ox in 0..out.width {
                    let row = (b * out.height + oy) * out.width + ox;
                    let via_patches: f32 = (0..pl).map(|j| patches[row * pl + j] * weight[j]).sum();
                    let mut direct = 0.0;
                    for ky in 0..3 {
                        for kx in 0..3 {
                            for c in 0..3 {
                                let (y, xx) = (oy * 2 + ky, ox * 2 + kx);
                                let v = x[b * conv.input.len() + (y * 6 + xx) * 3 + c];
                                direct += v * weight[(ky * 3 + kx) * 3 + c];
                            }
                        }
                    }
                    assert!((via_patches - direct).abs() < 1e-5);
                }
            }
        }
        let g: Vec<f32> = (0..patches.len()).map(|i| (i as f32 * 0.3).cos()).collect();
        let mut back = vec![7.0; x.len()]; // overwritten, not added to
        conv.col2im(&g, &mut back);
        let lhs: f64 = patches.iter().zip(&g).map(|(a, b)| f64::from(a * b)).sum();
        let rhs: f64 = x.iter().zip(&back).map(|(a, b)| f64::from(a * b)).sum();
        assert!(
            (lhs - rhs).abs() < 1e-3 * lhs.abs().max(1.0),
            "{lhs} vs {rhs}"
        );
    }

    /// Gathering pairs straight from the images writes each patch row's values, paired as
    /// `to_pairs` pairs them, where a float patch row would have them; the padding past a
    /// row is left alone.
    #[test]
    fn pair_patches_are_the_float_patches_paired() {
        // NatureCNN's second layer in small: kernel rows of 2 x 4 values.
        let conv = layer(6, 5, 4, 3, 2, 2);
        assert!(conv.pairs_gatherable() && !layer(5, 5, 3, 1, 3, 1).pairs_gatherable());
        let batch = 3;
        let x: Vec<f32> = (0..batch * conv.input.len())
            .map(|i| i as f32 * 0.5)
            .collect();
        let pl = conv.patch_len();
        let mut patches = vec![0.0; batch * conv.positions() * pl];
        conv.im2col(&x, |v| v, &mut patches);
        let to_pairs = |src: &[f32], out: &mut [u32]| {
            for (o, p) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = (p[0] as u32) | ((p[1] as u32) << 16);
            }
        };
        let row_step = pl / 2 + 3;
        let mut pairs = vec![u32::MAX; batch * conv.positions() * row_step];
        let written = conv.im2col_pairs(&x, to_pairs, &mut pairs, row_step);
        assert_eq!(written, batch * conv.positions());
        for (r, row) in patches.chunks_exact(pl).enumerate() {
            let mut want = vec![0; pl / 2];
            to_pairs(row, &mut want);
            assert_eq!(pairs[r * row_step..][..pl / 2], want[..], "row {r}");
            assert!(pairs[r * row_step + pl / 2..][..3]
                .iter()
                .all(|v| *v == u32::MAX));
        }
    }

    /// Pairs of patch rows gathered from the images are the float patches' rows two by
    /// two, an odd last row paired with zeros, for layers whose patch rows straddle
    /// images and whose kernel rows are odd.
    #[test]
    fn row_pair_patches_are_the_float_patches_interleaved() {
        for conv in [layer(6, 5, 4, 3, 2, 2), layer(5, 5, 3, 2, 3, 1)] {
            let batch = 3;
            let x: Vec<f32> = (0..batch * conv.input.len()).map(|i| i as f32).collect();
            let (pl, rows) = (conv.patch_len(), batch * conv.positions());
            let mut patches = vec![0.0; rows * pl];
            conv.im2col(&x, |v| v, &mut patches);
            let interleave = |even: &[f32], odd: &[f32], out: &mut [u32]| {
                for ((o, a), b) in out.iter_mut().zip(even).zip(odd) {
                    *o = (*a as u32) | ((*b as u32) << 16);
                }
            };
            let stride = pl + 5;
            let mut pairs = vec![u32::MAX; rows.div_ceil(2) * stride];
            assert_eq!(
                conv.im2col_row_pairs(&x, interleave, &mut pairs, stride),
                rows
            );
            for p in 0..rows.div_ceil(2) {
                let even = &patches[2 * p * pl..][..pl];
                let zeros = vec![0.0; pl];
                let odd = patches
                    .get((2 * p + 1) * pl..(2 * p + 2) * pl)
                    .unwrap_or(&zeros);
                let mut want = vec![0; pl];
                interleave(even, odd, &mut want);
                assert_eq!(pairs[p * stride..][..pl], want[..], "pair row {p}");
            }
        }
    }

    #[test]
    fn u8_pixels_are_converted_while_gathering() {
        let conv = layer(2, 2, 1, 1, 2, 1);
        let mut patches = vec![0.0; 4];
        conv.im2col(&[0u8, 51, 102, 255], |v| f32::from(v) / 255.0, &mut patches);
        assert_eq!(patches, vec![0.0, 0.2, 0.4, 1.0]);
    }
}
