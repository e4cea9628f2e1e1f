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

    #[test]
    fn u8_pixels_are_converted_while_gathering() {
        let conv = layer(2, 2, 1, 1, 2, 1);
        let mut patches = vec![0.0; 4];
        conv.im2col(&[0u8, 51, 102, 255], |v| f32::from(v) / 255.0, &mut patches);
        assert_eq!(patches, vec![0.0, 0.2, 0.4, 1.0]);
    }
}
