//! A safe, bounds-checked wrapper over the `gemm` crate for row-major f32 matrices.

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
    product(dst, lhs, rhs, accumulate, gemm::Parallelism::None);
}

fn product(
    dst: &mut [f32],
    lhs: View<'_>,
    rhs: View<'_>,
    accumulate: bool,
    parallelism: gemm::Parallelism,
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
    // SAFETY: every view was checked to lie inside its slice and `dst` holds m*n values;
    // `dst` is a unique borrow, so it aliases neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride,
            lhs.row_stride,
            rhs.data.as_ptr(),
            rhs.col_stride,
            rhs.row_stride,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// [`matmul`] on the current rayon pool (the learner's threads), for the large products
/// of convolution layers. `gemm` splits the destination among threads but sums along the
/// inner dimension in the same order, so the result equals [`matmul`]'s bit for bit.
///
/// # Panics
/// As [`matmul`].
pub(crate) fn par_matmul(dst: &mut [f32], lhs: View<'_>, rhs: View<'_>, accumulate: bool) {
    product(dst, lhs, rhs, accumulate, gemm::Parallelism::Rayon(0));
}

/// Inner-dimension rows per partial product in [`par_matmul_tn`]: fixed, so the result
/// never depends on the thread count.
const ROWS_PER_PARTIAL: usize = 2048;

/// `dst (m x n) += lhs^T rhs` for a tall `lhs` (`rows x m`) and `rhs` (`rows x n`), both
/// row-major: the weight gradient of a layer seen by every output pixel of a batch, whose
/// long inner dimension leaves `gemm` too small an output to share among threads. The
/// rows are split into fixed chunks whose partial products run in parallel (in
/// `partials`, grown on demand and reused) and are added in chunk order.
///
/// # Panics
/// When the lengths disagree.
pub(crate) fn par_matmul_tn(
    dst: &mut [f32],
    lhs: &[f32],
    rhs: &[f32],
    (rows, m, n): (usize, usize, usize),
    partials: &mut Vec<f32>,
) {
    use rayon::prelude::*;
    assert_eq!(lhs.len(), rows * m, "left operand length");
    assert_eq!(rhs.len(), rows * n, "right operand length");
    assert_eq!(dst.len(), m * n, "destination length");
    let chunks = rows.div_ceil(ROWS_PER_PARTIAL);
    if chunks <= 1 {
        return par_matmul(
            dst,
            View::new(lhs, rows, m).t(),
            View::new(rhs, rows, n),
            true,
        );
    }
    partials.resize(chunks * m * n, 0.0);
    partials
        .par_chunks_mut(m * n)
        .enumerate()
        .for_each(|(c, partial)| {
            let start = c * ROWS_PER_PARTIAL;
            let len = ROWS_PER_PARTIAL.min(rows - start);
            matmul(
                partial,
                View::new(&lhs[start * m..(start + len) * m], len, m).t(),
                View::new(&rhs[start * n..(start + len) * n], len, n),
                false,
            );
        });
    add_partials(dst, &partials[..chunks * m * n]);
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

    #[test]
    fn chunked_transposed_product_matches_the_naive_one_on_any_pool() {
        let (rows, m, n) = (2 * ROWS_PER_PARTIAL + 77, 5, 9);
        let a: Vec<f32> = (0..rows * m).map(|i| (i as f32 * 0.013).sin()).collect();
        let b: Vec<f32> = (0..rows * n).map(|i| (i as f32 * 0.029).cos()).collect();
        let mut at = vec![0.0; m * rows];
        for r in 0..rows {
            for i in 0..m {
                at[i * rows + r] = a[r * m + i];
            }
        }
        let want = naive(&at, &b, m, rows, n);
        let mut results = Vec::new();
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut dst = vec![1.0; m * n];
            pool.install(|| par_matmul_tn(&mut dst, &a, &b, (rows, m, n), &mut Vec::new()));
            for (x, y) in dst.iter().zip(&want) {
                assert!((x - (y + 1.0)).abs() < 1e-2, "{x} vs {}", y + 1.0);
            }
            results.push(dst);
        }
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "depends on the thread count"
        );
    }
}
