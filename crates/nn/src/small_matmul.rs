//! Products with a few rows, as a recurrent cell makes at every step (a batch of envs
//! times the hidden weights): written out so the weights are read in place. `gemm` packs
//! its right-hand side on every call, which for an `8 x 64` by `64 x 256` product costs
//! as much as the product itself.
//!
//! Compiled three times, picked by the kernel path: AVX-512 with fused multiply-add, AVX2
//! with it, and the baseline without. As with `gemm`'s kernels, picked the same way, a
//! product's last bits depend on the path; on one machine and path a run is reproducible.

/// Rows of the left-hand side a block computes together (each right-hand load serves all).
const ROWS: usize = 4;
/// Columns a block keeps in registers.
const COLS: usize = 32;

/// `dst (m x n) = lhs (m x k) * rhs (k x n)`, all row-major; `n = rhs.len() / k`.
///
/// # Panics
/// When `dst` does not hold `m x n` values.
pub(crate) fn small_matmul(dst: &mut [f32], lhs: &[f32], rhs: &[f32], k: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn wide512(dst: &mut [f32], lhs: &[f32], rhs: &[f32], k: usize) {
            product::<true>(dst, lhs, rhs, k);
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn wide256(dst: &mut [f32], lhs: &[f32], rhs: &[f32], k: usize) {
            product::<true>(dst, lhs, rhs, k);
        }
        let path = crate::kernel_path::kernel_path();
        if path.avx512() {
            // SAFETY: the path was checked against the CPU when it was chosen.
            return unsafe { wide512(dst, lhs, rhs, k) };
        }
        if path.avx2() {
            // SAFETY: as above.
            return unsafe { wide256(dst, lhs, rhs, k) };
        }
    }
    product::<false>(dst, lhs, rhs, k);
}

/// `s + x * y`, fused where the build has it (`mul_add` without FMA is a library call).
#[inline(always)]
fn madd<const FUSED: bool>(s: f32, x: f32, y: f32) -> f32 {
    if FUSED {
        x.mul_add(y, s)
    } else {
        s + x * y
    }
}

#[inline(always)]
fn product<const FUSED: bool>(dst: &mut [f32], lhs: &[f32], rhs: &[f32], k: usize) {
    let n = rhs.len() / k;
    let m = lhs.len() / k;
    assert_eq!(dst.len(), m * n, "destination size");
    let full_cols = n - n % COLS;
    // Blocks of four rows, then the rows left over one at a time (acting on one env).
    let mut row = 0;
    while row + ROWS <= m {
        rows_block::<ROWS, FUSED>(dst, lhs, rhs, (k, n), row);
        row += ROWS;
    }
    while row < m {
        rows_block::<1, FUSED>(dst, lhs, rhs, (k, n), row);
        row += 1;
    }
    // The columns left over, one value at a time.
    for r in 0..m {
        for c in full_cols..n {
            let mut s = 0.0f32;
            for kk in 0..k {
                s = madd::<FUSED>(s, lhs[r * k + kk], rhs[kk * n + c]);
            }
            dst[r * n + c] = s;
        }
    }
}

/// Rows `row..row + R` of the product over the full blocks of columns.
#[inline(always)]
fn rows_block<const R: usize, const FUSED: bool>(
    dst: &mut [f32],
    lhs: &[f32],
    rhs: &[f32],
    (k, n): (usize, usize),
    row: usize,
) {
    let a = &lhs[row * k..(row + R) * k];
    let mut col = 0;
    while col + COLS <= n {
        let mut acc = [[0.0f32; COLS]; R];
        for kk in 0..k {
            let b: &[f32; COLS] = rhs[kk * n + col..kk * n + col + COLS]
                .try_into()
                .expect("a block of columns");
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let x = a[r * k + kk];
                for (s, &bv) in acc_r.iter_mut().zip(b) {
                    *s = madd::<FUSED>(*s, x, bv);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            dst[(row + r) * n + col..(row + r) * n + col + COLS].copy_from_slice(acc_r);
        }
        col += COLS;
    }
}

/// `rows x cols` row-major `src` transposed into `dst` (`cols x rows`).
pub(crate) fn transpose_into(dst: &mut Vec<f32>, src: &[f32], rows: usize, cols: usize) {
    dst.resize(rows * cols, 0.0);
    for (r, row) in src.chunks_exact(cols).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            dst[c * rows + r] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::{matmul, View};

    #[test]
    fn small_products_match_gemm() {
        // Shapes of a recurrent step (8 envs, 64 units, LSTM's 256 gates; its transpose
        // going back) and ragged ones that leave rows and columns over.
        for (m, k, n) in [
            (8, 64, 256),
            (8, 256, 64),
            (1, 64, 192),
            (6, 5, 37),
            (3, 17, 16),
        ] {
            let lhs: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
                .collect();
            let rhs: Vec<f32> = (0..k * n)
                .map(|i| ((i * 53 % 89) as f32 - 44.0) / 30.0)
                .collect();
            let mut want = vec![0.0; m * n];
            matmul(
                &mut want,
                View::new(&lhs, m, k),
                View::new(&rhs, k, n),
                false,
            );
            let mut got = vec![f32::NAN; m * n];
            small_matmul(&mut got, &lhs, &rhs, k);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{m}x{k}x{n}: {g} vs {w}"
                );
            }
            let mut t = Vec::new();
            transpose_into(&mut t, &rhs, k, n);
            for (i, v) in rhs.iter().enumerate() {
                assert_eq!(t[(i % n) * k + i / n], *v);
            }
        }
    }
}
