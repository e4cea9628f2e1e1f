//! Orthogonal initialisation (Saxe et al.), as `torch.nn.init.orthogonal_` does it.

use rand::Rng;
use rand_distr::StandardNormal;

/// An orthogonal `fan_out x fan_in` matrix as PyTorch's `orthogonal_` makes it for a
/// layer's weights, written transposed (`fan_in x fan_out`, the layout Strata's matrix
/// products read) into `dst`.
pub(crate) fn orthogonal_transposed<R: Rng + ?Sized>(
    dst: &mut [f32],
    (fan_in, fan_out): (usize, usize),
    gain: f32,
    rng: &mut R,
) {
    let torch = orthogonal(fan_out, fan_in, gain, rng);
    for o in 0..fan_out {
        for i in 0..fan_in {
            dst[i * fan_out + o] = torch[o * fan_in + i];
        }
    }
}

/// An `rows x cols` row-major matrix with orthonormal rows (if `rows <= cols`) or columns,
/// scaled by `gain`.
pub(crate) fn orthogonal<R: Rng + ?Sized>(
    rows: usize,
    cols: usize,
    gain: f32,
    rng: &mut R,
) -> Vec<f32> {
    // Orthonormalise the columns of a tall Gaussian matrix by modified Gram-Schmidt (a QR
    // decomposition with R's diagonal made positive, so the result is Haar-distributed).
    // The matrix is drawn row by row, then held a column a slice: the sweeps run down
    // columns, and strided columns made NatureCNN's 3136 x 512 layer take seconds.
    let (tall, short) = (rows.max(cols), rows.min(cols));
    let drawn: Vec<f64> = (0..tall * short)
        .map(|_| rng.sample(StandardNormal))
        .collect();
    let mut columns: Vec<Vec<f64>> = (0..short)
        .map(|j| (0..tall).map(|i| drawn[i * short + j]).collect())
        .collect();
    for j in 0..short {
        let (done, rest) = columns.split_at_mut(j);
        let column = &mut rest[0];
        for previous in done.iter() {
            let dot: f64 = column.iter().zip(previous).map(|(a, b)| a * b).sum();
            for (a, b) in column.iter_mut().zip(previous) {
                *a -= dot * b;
            }
        }
        let norm = column.iter().map(|v| v.powi(2)).sum::<f64>().sqrt();
        for v in column.iter_mut() {
            *v /= norm;
        }
    }
    let mut out = vec![0.0_f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let v = if rows >= cols {
                columns[c][r]
            } else {
                columns[r][c]
            };
            out[r * cols + c] = gain * v as f32;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    #[test]
    fn rows_or_columns_are_orthonormal_times_gain() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        for (rows, cols) in [(4, 64), (64, 64), (64, 2)] {
            let w = orthogonal(rows, cols, 2.0, &mut rng);
            let (n, len, stride_item, stride_vec) = if rows <= cols {
                (rows, cols, 1, cols)
            } else {
                (cols, rows, cols, 1)
            };
            for a in 0..n {
                for b in 0..n {
                    let dot: f32 = (0..len)
                        .map(|i| {
                            w[a * stride_vec + i * stride_item]
                                * w[b * stride_vec + i * stride_item]
                        })
                        .sum();
                    let want = if a == b { 4.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-4, "{rows}x{cols} ({a},{b}): {dot}");
                }
            }
        }
    }
}
