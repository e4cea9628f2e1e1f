//! A safe, bounds-checked wrapper over `gemm`'s float32 kernels for row-major matrices,
//! run on the chosen [`KernelPath`]: `gemm`'s blocked driver (`gemm-common`) with the
//! AVX-512, AVX2/FMA, NEON or scalar micro-kernels of `gemm-f32`. `gemm` itself picks its
//! kernel from the CPU alone; calling its driver here makes every path forceable, with the
//! same blocking and so the same sums as `gemm` on that kernel.

use gemm_common::gemm::gemm_basic_generic;
use gemm_common::Parallelism;

use crate::kernel_path::{kernel_path, KernelPath};

/// A strided view of an `rows x cols` matrix inside a slice.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
}

impl<'a> View<'a> {
    /// A row-major `rows x cols` matrix.
    pub(crate) fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        View {
            data,
            rows,
            cols,
            row_stride: cols as isize,
            col_stride: 1,
        }
    }

    /// The transpose of this view (no copy).
    pub(crate) fn t(self) -> Self {
        View {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }

    /// Rows of the matrix.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the matrix.
    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// The value at row `r`, column `c`.
    ///
    /// # Panics
    /// When the position lies outside the slice.
    #[inline(always)]
    pub(crate) fn at(&self, r: usize, c: usize) -> f32 {
        self.data[(r as isize * self.row_stride + c as isize * self.col_stride) as usize]
    }

    /// The matrix's values when it is stored row-major without gaps.
    pub(crate) fn row_major(&self) -> Option<&'a [f32]> {
        (self.col_stride == 1 && self.row_stride == self.cols as isize)
            .then(|| &self.data[..self.rows * self.cols])
    }

    fn check(&self) {
        if self.rows > 0 && self.cols > 0 {
            let last = (self.rows - 1) as isize * self.row_stride
                + (self.cols - 1) as isize * self.col_stride;
            assert!(
                (last as usize) < self.data.len(),
                "matrix view out of bounds"
            );
        }
    }
}

/// `dst (m x n, row-major) = [dst +] lhs (m x k) * rhs (k x n)`.
///
/// # Panics
/// When the shapes disagree or a view exceeds its slice.
pub(crate) fn matmul(dst: &mut [f32], lhs: View<'_>, rhs: View<'_>, accumulate: bool) {
    product(dst, lhs, rhs, accumulate, Parallelism::None);
}

fn product(
    dst: &mut [f32],
    lhs: View<'_>,
    rhs: View<'_>,
    accumulate: bool,
    parallelism: Parallelism,
) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert_eq!(rhs.rows, k, "inner dimensions differ");
    assert!(dst.len() >= m * n, "destination too small");
    lhs.check();
    rhs.check();
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    let operands = Operands {
        m,
        n,
        k,
        dst: dst.as_mut_ptr(),
        dst_strides: (1, n as isize),
        read_dst: accumulate,
        lhs: (lhs.data.as_ptr(), lhs.col_stride, lhs.row_stride),
        rhs: (rhs.data.as_ptr(), rhs.col_stride, rhs.row_stride),
    };
    // SAFETY: every view was checked to lie inside its slice and `dst` holds m*n values;
    // `dst` is a unique borrow, so it aliases neither input.
    unsafe { operands.run(kernel_path(), parallelism) }
}

/// A product's operands as `gemm` takes them: sizes, pointers, (column, row) strides.
struct Operands {
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_strides: (isize, isize),
    read_dst: bool,
    lhs: (*const f32, isize, isize),
    rhs: (*const f32, isize, isize),
}

/// Calls `gemm`'s driver with the micro-kernels of one instruction set: `$simd` the
/// driver's SIMD token, `$kernels` the micro-kernel module, `$lanes` its vector width.
macro_rules! on_kernels {
    ($o:expr, $parallelism:expr, $simd:ty, $kernels:path, $lanes:expr) => {{
        use gemm_common::simd::MixedSimd;
        use $kernels as kernels;
        let o = $o;
        let simd = <$simd as MixedSimd<f32, f32, f32, f32>>::try_new()
            .expect("the kernel path was checked against the CPU");
        gemm_basic_generic::<
            _,
            f32,
            { $lanes },
            { kernels::MR_DIV_N * $lanes },
            { kernels::NR },
            { kernels::MR_DIV_N },
            { kernels::H_M },
            { kernels::H_N },
        >(
            simd,
            o.m,
            o.n,
            o.k,
            o.dst,
            o.dst_strides.0,
            o.dst_strides.1,
            o.read_dst,
            o.lhs.0,
            o.lhs.1,
            o.lhs.2,
            o.rhs.0,
            o.rhs.1,
            o.rhs.2,
            1.0,
            1.0,
            false,
            false,
            false,
            |a, b, c| a * b + c,
            &kernels::UKR,
            &kernels::H_UKR,
            false,
            $parallelism,
        )
    }};
}

impl Operands {
    /// `dst = [dst +] lhs * rhs` with `path`'s micro-kernels.
    ///
    /// # Safety
    /// Every operand's strided extent lies inside its allocation, `dst` aliases neither
    /// input, and `path` is one this CPU executes ([`KernelPath::supported`]).
    unsafe fn run(self, path: KernelPath, parallelism: Parallelism) {
        // As `gemm::gemm` does: its micro-kernels write columns, so a destination whose
        // rows are contiguous is computed as the transposed product.
        let o = if self.dst_strides.0.abs() < self.dst_strides.1.abs() {
            Operands {
                m: self.n,
                n: self.m,
                dst_strides: (self.dst_strides.1, self.dst_strides.0),
                lhs: (self.rhs.0, self.rhs.2, self.rhs.1),
                rhs: (self.lhs.0, self.lhs.2, self.lhs.1),
                ..self
            }
        } else {
            self
        };
        debug_assert!(o.dst_strides.0 >= 0 && o.dst_strides.1 >= 0 && o.lhs.1 >= 0);
        match path {
            #[cfg(target_arch = "x86_64")]
            KernelPath::Amx | KernelPath::Avx512Bf16 | KernelPath::Avx512 => on_kernels!(
                o,
                parallelism,
                gemm_common::simd::V4,
                gemm_f32::microkernel::avx512f::f32,
                16
            ),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => on_kernels!(
                o,
                parallelism,
                gemm_common::simd::V3,
                gemm_f32::microkernel::fma::f32,
                8
            ),
            #[cfg(target_arch = "aarch64")]
            KernelPath::Neon => on_kernels!(
                o,
                parallelism,
                gemm_common::simd::Scalar,
                gemm_f32::microkernel::neon::f32,
                4
            ),
            _ => on_kernels!(
                o,
                parallelism,
                gemm_common::simd::Scalar,
                gemm_f32::microkernel::scalar::f32,
                1
            ),
        }
    }
}

/// [`matmul`] on the current rayon pool (the learner's threads), for the large products
/// of convolution layers. `gemm` splits the destination among threads but sums along the
/// inner dimension in the same order, so the result equals [`matmul`]'s bit for bit.
///
/// # Panics
/// As [`matmul`].
pub(crate) fn par_matmul(dst: &mut [f32], lhs: View<'_>, rhs: View<'_>, accumulate: bool) {
    product(dst, lhs, rhs, accumulate, Parallelism::Rayon(0));
}

/// `dst += sum of the dst-sized blocks of partials`, in block order, in parallel over
/// `dst` (every value summed in the same order whatever the thread count).
///
/// # Panics
/// When `partials` is not a whole number of blocks.
pub(crate) fn add_partials(dst: &mut [f32], partials: &[f32]) {
    use rayon::prelude::*;
    const SPAN: usize = 1024;
    let len = dst.len();
    assert!(
        len > 0 && partials.len().is_multiple_of(len),
        "partial blocks"
    );
    dst.par_chunks_mut(SPAN).enumerate().for_each(|(b, block)| {
        for part in partials.chunks_exact(len) {
            for (d, p) in block.iter_mut().zip(&part[b * SPAN..]) {
                *d += p;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn matches_naive_product_including_transposed_views() {
        let (m, k, n) = (7, 5, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.71).cos()).collect();
        let mut c = vec![0.0; m * n];
        matmul(&mut c, View::new(&a, m, k), View::new(&b, k, n), false);
        let want = naive(&a, &b, m, k, n);
        for (x, y) in c.iter().zip(&want) {
            assert!((x - y).abs() < 1e-5);
        }
        // (A^T)^T B via a transposed view of A^T stored row-major.
        let mut at = vec![0.0; k * m];
        for i in 0..m {
            for p in 0..k {
                at[p * m + i] = a[i * k + p];
            }
        }
        let mut c2 = vec![1.0; m * n];
        matmul(&mut c2, View::new(&at, k, m).t(), View::new(&b, k, n), true);
        for (x, y) in c2.iter().zip(&want) {
            assert!((x - (y + 1.0)).abs() < 1e-5);
        }
    }

    #[test]
    fn parallel_product_equals_the_serial_one_bit_for_bit() {
        let (m, k, n) = (300, 37, 19);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.13).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.29).cos()).collect();
        let (mut serial, mut parallel) = (vec![0.5; m * n], vec![0.5; m * n]);
        matmul(&mut serial, View::new(&a, m, k), View::new(&b, k, n), true);
        par_matmul(
            &mut parallel,
            View::new(&a, m, k),
            View::new(&b, k, n),
            true,
        );
        assert_eq!(serial, parallel);
        // A transposed left side: (A^T)^T with A^T stored k x m.
        let mut at = vec![0.0; k * m];
        for i in 0..m {
            for p in 0..k {
                at[p * m + i] = a[i * k + p];
            }
        }
        let mut via_t = vec![0.0; m * n];
        par_matmul(
            &mut via_t,
            View::new(&at, k, m).t(),
            View::new(&b, k, n),
            false,
        );
        for (x, y) in via_t.iter().zip(&serial) {
            assert!((x - (y - 0.5)).abs() < 1e-4);
        }
    }
}
