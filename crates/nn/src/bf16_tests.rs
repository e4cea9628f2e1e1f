//! Checks of the bfloat16 products: rounding, packing, and every entry point on both
//! paths against the rounded reference and the instruction's arithmetic.

use super::*;

fn values(len: usize, seed: f32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as f32 + seed) * 0.618).sin() * 3.0)
        .collect()
}

/// The product of the operands rounded to bfloat16, in float64.
fn reference(a: View<'_>, b: View<'_>) -> Vec<f64> {
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    let round = |x: f32| f64::from(from_bf16(to_bf16(x)));
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| round(a.at(i, p)) * round(b.at(p, j))).sum();
        }
    }
    c
}

#[test]
fn rounding_is_to_nearest_even_and_keeps_specials() {
    assert_eq!(to_bf16(1.0), 0x3f80);
    assert_eq!(from_bf16(to_bf16(255.0)), 255.0); // bytes are exact
                                                  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even 1.
    assert_eq!(from_bf16(to_bf16(1.0 + 1.0 / 256.0)), 1.0);
    assert_eq!(from_bf16(to_bf16(1.0 + 3.0 / 256.0)), 1.0 + 4.0 / 256.0);
    assert_eq!(from_bf16(to_bf16(-2.5)), -2.5);
    assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
    assert_eq!(from_bf16(to_bf16(f32::INFINITY)), f32::INFINITY);
}

/// The vectorised rounding and interleaving give the scalar rounding's bits, ties and
/// all, past the last whole vector too.
#[test]
fn vector_rounding_equals_the_scalar_one() {
    // Below float32's normal range, inside a vector: flushed to zero of its sign.
    let mut src: Vec<f32> = vec![1e-39, -1e-39];
    src.extend(values(70, 0.9));
    // Exact ties below and above an even and an odd last kept bit.
    src.extend([
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        -1.0 - 1.0 / 256.0,
        1e30,
        -0.0,
    ]);
    src.extend([1e-39, -1e-39, 3.0]); // and in the tail
    assert_eq!((to_bf16(1e-39), to_bf16(-1e-39)), (0, 0x8000));
    let scalar: Vec<u32> = src.chunks_exact(2).map(|p| pair(p[0], p[1])).collect();
    let mut rounded = vec![0; src.len() / 2];
    round_into(&src, &mut rounded);
    assert_eq!(rounded, scalar);
    let (even, odd) = src.split_at(38);
    let mut woven = vec![0; 37];
    interleave(&even[..37], &odd[..37], &mut woven);
    let want: Vec<u32> = (0..37).map(|c| pair(even[c], odd[c])).collect();
    assert_eq!(woven, want);
}

/// Runs `f` as a CPU without the instruction would.
fn without_instruction<R>(f: impl FnOnce() -> R) -> R {
    WITHOUT_INSTRUCTION.with(|w| w.set(true));
    let r = f();
    WITHOUT_INSTRUCTION.with(|w| w.set(false));
    r
}

/// Every shape the kernels split differently (rows past a block, columns past a
/// vector or a tile, an odd inner dimension, transposed views, filters packed from their
/// transpose) gives the rounded reference's sums on every path; with the instruction,
/// every entry point equals the plain loop of its arithmetic bit for bit, and on the AMX
/// tiles (where the CPU has them) every entry point gives the same bits.
#[test]
fn matches_the_rounded_reference_and_the_portable_loop() {
    for &(m, k, n) in &[
        (1, 1, 1),
        (7, 5, 3),
        (6, 64, 64),
        (13, 37, 70),
        (20, 256, 32),
        (9, 2, 17),
        (32, 40, 48),
        (45, 70, 40),
        (64, 96, 64),
    ] {
        let a = values(m * k, 0.3);
        let b = values(k * n, 1.7);
        // A^T stored row-major (k x m), B^T (n x k).
        let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let want = reference(View::new(&a, m, k), View::new(&b, k, n));
        let close = |got: &[f32]| {
            for (g, w) in got.iter().zip(&want) {
                let tolerance = 1e-5 * (k as f64) * 9.0;
                assert!(
                    (f64::from(*g) - 0.5 - w).abs() < tolerance,
                    "{m}x{k}x{n}: {g} vs {w}"
                );
            }
        };
        let every_entry = || {
            let mut results = Vec::new();
            for rhs in [View::new(&b, k, n), View::new(&bt, n, k).t()] {
                let mut packed = PackedRhs::default();
                packed.pack(rhs);
                for lhs in [View::new(&a, m, k), View::new(&at, k, m).t()] {
                    let mut out = vec![0.5; m * n];
                    matmul_bf16(&mut out, lhs, &packed, true);
                    results.push(out);
                }
            }
            let mut tn = vec![0.5; m * n];
            matmul_bf16_tn(&mut tn, View::new(&at, k, m), View::new(&b, k, n), true);
            results.push(tn);
            results
        };
        for out in without_instruction(every_entry) {
            close(&out);
        }
        let mut packed = PackedRhs::default();
        packed.pack(View::new(&b, k, n));
        let mut slow = vec![0.5; m * n];
        let mut lhs_packed = Vec::new();
        portable(
            &mut slow,
            &pack_lhs(View::new(&a, m, k), &mut lhs_packed),
            &packed,
            true,
        );
        close(&slow);
        if accelerated() {
            for out in amx::without_tiles(every_entry) {
                assert_eq!(out, slow, "{m}x{k}x{n}");
            }
        }
        if accelerated() && amx::available() {
            // The tiles sum a tile's pairs in an order of their own: close to the
            // reference, and every entry point the same bits (one packing, one order).
            let on_tiles = every_entry();
            for out in &on_tiles {
                close(out);
                assert_eq!(out, &on_tiles[0], "{m}x{k}x{n} on the tiles");
            }
        }
    }
}

#[test]
fn overwrites_without_accumulate_and_leaves_the_rest() {
    let (m, k, n) = (3, 4, 5);
    let (a, b) = (values(m * k, 0.0), values(k * n, 2.0));
    let mut packed = PackedRhs::default();
    packed.pack(View::new(&b, k, n));
    let mut dst = vec![9.0; m * n + 2];
    matmul_bf16(&mut dst, View::new(&a, m, k), &packed, false);
    let want = reference(View::new(&a, m, k), View::new(&b, k, n));
    for (d, w) in dst.iter().zip(&want) {
        assert!((f64::from(*d) - w).abs() < 1e-4);
    }
    assert_eq!(&dst[m * n..], &[9.0, 9.0]);
}

/// The instruction's arithmetic, one output at a time: per pair, the odd product then the
/// even one added to the float32 sum. The reference the kernel is tested against.
fn portable(dst: &mut [f32], lhs: &PackedLhs<'_>, rhs: &PackedRhs, accumulate: bool) {
    let (n, stride) = (rhs.cols, padded(rhs.cols));
    for r in 0..lhs.rows {
        for c in 0..n {
            let mut sum = 0.0f32;
            for p in 0..lhs.pairs {
                let a = lhs.data[r * lhs.row_step + p * lhs.pair_step];
                let b = rhs.data[p * stride + c];
                sum += from_bf16((a >> 16) as u16) * from_bf16((b >> 16) as u16);
                sum += from_bf16(a as u16) * from_bf16(b as u16);
            }
            let d = &mut dst[r * n + c];
            *d = if accumulate { *d + sum } else { sum };
        }
    }
}

/// Bytes and floats paired for a gathered left-hand side round as the packing does, and
/// the product of a gathered left-hand side equals the product of the same rows packed,
/// bit for bit, on whichever path this CPU takes.
#[test]
fn gathered_rows_equal_packed_rows() {
    // Every byte, past a whole vector's 32 too.
    let bytes: Vec<u8> = (0..=255).chain(7..=48).collect();
    let floats: Vec<f32> = bytes.iter().map(|b| f32::from(*b)).collect();
    let want: Vec<u32> = floats.chunks_exact(2).map(|p| pair(p[0], p[1])).collect();
    let mut from_bytes = vec![0; bytes.len() / 2];
    byte_pairs(&bytes, &mut from_bytes);
    assert_eq!(from_bytes, want);
    without_instruction(|| byte_pairs(&bytes, &mut from_bytes));
    assert_eq!(from_bytes, want);
    let (even, odd) = bytes.split_at(150);
    let want: Vec<u32> = (0..148)
        .map(|c| pair(f32::from(even[c]), f32::from(odd[c])))
        .collect();
    let mut woven = vec![0; 148];
    byte_interleave(even, odd, &mut woven);
    assert_eq!(woven, want);
    without_instruction(|| byte_interleave(even, odd, &mut woven));
    assert_eq!(woven, want);
    let (m, k, n) = (45, 70, 40);
    let (a, b) = (values(m * k, 0.3), values(k * n, 1.7));
    let mut packed = PackedRhs::default();
    packed.pack(View::new(&b, k, n));
    let mut want = vec![0.5; m * n];
    matmul_bf16(&mut want, View::new(&a, m, k), &packed, true);
    let mut got = vec![0.5; m * n];
    let fill = |rows: &mut [u32], step: usize| {
        for (r, row) in a.chunks_exact(k).enumerate() {
            float_pairs(row, &mut rows[r * step..][..k / 2]);
        }
        m
    };
    matmul_bf16_gathered(&mut got, (m, k), fill, &packed, true);
    assert_eq!(got, want);
}
