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
    let (tall, short) = (rows.max(cols), rows.min(cols));
    let mut q: Vec<f64> = (0..tall * short)
        .map(|_| rng.sample(StandardNormal))
        .collect();
    for j in 0..short {
        for p in 0..j {
            let dot: f64 = (0..tall).map(|i| q[i * short + j] * q[i * short + p]).sum();
            for i in 0..tall {
                q[i * short + j] -= dot * q[i * short + p];
            }
        }
        let norm = (0..tall)
            .map(|i| q[i * short + j].powi(2))
            .sum::<f64>()
            .sqrt();
        for i in 0..tall {
            q[i * short + j] /= norm;
        }
    }
    let mut out = vec![0.0_f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let v = if rows >= cols {
                q[r * short + c]
            } else {
                q[c * short + r]
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
