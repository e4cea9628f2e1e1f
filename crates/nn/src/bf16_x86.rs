//! The AVX-512 BF16 side of [`super`]: vectorised rounding and interleaving, bytes to
//! bfloat16 pairs, and the `vdpbf16ps` kernel (6 rows x 4 vectors of float32 sums in
//! registers).
use super::{padded, PackedLhs, PackedRhs, BLOCKS, LANES, ROWS};
use std::arch::x86_64::*;

/// Rounds 16 floats to bfloat16 (to nearest even, denormals flushed, as
/// [`super::to_bf16`]).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn round16(p: *const f32) -> __m256i {
    std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(p)))
}

/// `out[c] = (even[c], odd[c])`, 16 columns a step.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn interleave(even: &[f32], odd: &[f32], out: &mut [u32]) {
    let n = out.len();
    assert!(even.len() >= n && odd.len() >= n);
    // Lanes 0..16 of the concatenation hold the even row, 16..32 the odd one.
    let order = _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
        19, 3, 18, 2, 17, 1, 16, 0,
    );
    let mut c = 0;
    while c + LANES <= n {
        let both = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(round16(even.as_ptr().add(c))),
            round16(odd.as_ptr().add(c)),
        );
        let pairs = _mm512_permutexvar_epi16(order, both);
        _mm512_storeu_si512(out.as_mut_ptr().add(c).cast(), pairs);
        c += LANES;
    }
    for c in c..n {
        out[c] = super::pair(even[c], odd[c]);
    }
}

/// `out[c] = (even[c], odd[c])` for two rows of bytes, 16 columns a step.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn byte_interleave(even: &[u8], odd: &[u8], out: &mut [u32]) {
    let n = out.len();
    assert!(even.len() >= n && odd.len() >= n);
    // A byte's bfloat16 is its float's high half: in the high half of a lane already.
    let floats = |p: *const u8| {
        _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
            p.cast(),
        ))))
    };
    let mut c = 0;
    while c + LANES <= n {
        let low = _mm512_srli_epi32::<16>(floats(even.as_ptr().add(c)));
        let high = _mm512_and_si512(floats(odd.as_ptr().add(c)), _mm512_set1_epi32(-65536));
        _mm512_storeu_si512(out.as_mut_ptr().add(c).cast(), _mm512_or_si512(low, high));
        c += LANES;
    }
    for c in c..n {
        let bf = |b: u8| f32::from(b).to_bits() >> 16;
        out[c] = bf(even[c]) | (bf(odd[c]) << 16);
    }
}

/// Bytes to bfloat16 pairs, 32 bytes a step (each byte converted to a float, whose
/// high half is its bfloat16).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn byte_pairs(src: &[u8], out: &mut [u32]) {
    assert_eq!(src.len(), 2 * out.len());
    let half = |p: *const u8| {
        let floats = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())));
        _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(_mm512_castps_si512(floats)))
    };
    let mut i = 0;
    while i + 2 * LANES <= src.len() {
        let p = src.as_ptr().add(i);
        let pairs = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(half(p)), half(p.add(16)));
        _mm512_storeu_si512(out.as_mut_ptr().add(i / 2).cast(), pairs);
        i += 2 * LANES;
    }
    while i < src.len() {
        let bf = |b: u8| f32::from(b).to_bits() >> 16;
        out[i / 2] = bf(src[i]) | (bf(src[i + 1]) << 16);
        i += 2;
    }
}

/// `src` rounded value by value into `out`, 16 values a step.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn round_into(src: &[f32], out: &mut [u32]) {
    assert_eq!(src.len(), 2 * out.len());
    let mut i = 0;
    while i + LANES <= src.len() {
        _mm256_storeu_si256(
            out.as_mut_ptr().add(i / 2).cast(),
            round16(src.as_ptr().add(i)),
        );
        i += LANES;
    }
    while i < src.len() {
        out[i / 2] = super::pair(src[i], src[i + 1]);
        i += 2;
    }
}

/// Blocks of [`ROWS`] rows by [`BLOCKS`] vectors of columns, the rest in smaller
/// blocks; the last vector of a row is stored under a mask.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn product(
    dst: &mut [f32],
    lhs: &PackedLhs<'_>,
    rhs: &PackedRhs,
    accumulate: bool,
) {
    let m = lhs.rows;
    let vectors = padded(rhs.cols) / LANES;
    let mut row = 0;
    while row < m {
        let rows = (m - row).min(ROWS);
        let mut v = 0;
        while v < vectors {
            let blocks = (vectors - v).min(BLOCKS);
            let at = Block {
                row,
                vector: v,
                accumulate,
            };
            match (rows, blocks) {
                (6, 4) => block::<6, 4>(dst, lhs, rhs, at),
                (6, 3) => block::<6, 3>(dst, lhs, rhs, at),
                (6, 2) => block::<6, 2>(dst, lhs, rhs, at),
                (6, 1) => block::<6, 1>(dst, lhs, rhs, at),
                (r, 4) => per_row::<4>(dst, lhs, rhs, at, r),
                (r, 3) => per_row::<3>(dst, lhs, rhs, at, r),
                (r, 2) => per_row::<2>(dst, lhs, rhs, at, r),
                (r, _) => per_row::<1>(dst, lhs, rhs, at, r),
            }
            v += blocks;
        }
        row += rows;
    }
}

/// Where a register block starts.
#[derive(Clone, Copy)]
struct Block {
    row: usize,
    vector: usize,
    accumulate: bool,
}

/// Rows left over (fewer than [`ROWS`]), one at a time.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn per_row<const B: usize>(
    dst: &mut [f32],
    lhs: &PackedLhs<'_>,
    rhs: &PackedRhs,
    at: Block,
    rows: usize,
) {
    for r in 0..rows {
        block::<1, B>(
            dst,
            lhs,
            rhs,
            Block {
                row: at.row + r,
                ..at
            },
        );
    }
}

#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn block<const R: usize, const B: usize>(
    dst: &mut [f32],
    lhs: &PackedLhs<'_>,
    rhs: &PackedRhs,
    at: Block,
) {
    let n = rhs.cols;
    let stride = padded(n);
    let mut acc = [[_mm512_setzero_ps(); B]; R];
    let (row_step, pair_step) = (lhs.row_step, lhs.pair_step);
    let mut a = lhs.data.as_ptr().add(at.row * row_step);
    let mut b = rhs.data.as_ptr().add(at.vector * LANES);
    for _ in 0..lhs.pairs {
        let mut vb = [_mm512_setzero_si512(); B];
        for (j, v) in vb.iter_mut().enumerate() {
            *v = _mm512_loadu_si512(b.add(j * LANES).cast());
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let va = _mm512_set1_epi32(*a.add(r * row_step) as i32);
            for (j, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_dpbf16_ps(*acc, cast(va), cast(vb[j]));
            }
        }
        // Past the last pair these point beyond the data, unread: `wrapping_add`.
        a = a.wrapping_add(pair_step);
        b = b.wrapping_add(stride);
    }
    for (r, acc) in acc.iter().enumerate() {
        let out = dst.as_mut_ptr().add((at.row + r) * n);
        for (j, acc) in acc.iter().enumerate() {
            let col = (at.vector + j) * LANES;
            let left = n - col;
            let mask: __mmask16 = if left >= LANES {
                0xffff
            } else {
                (1u16 << left) - 1
            };
            let mut sum = *acc;
            if at.accumulate {
                sum = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out.add(col)), sum);
            }
            _mm512_mask_storeu_ps(out.add(col), mask, sum);
        }
    }
}

#[inline(always)]
fn cast(v: __m512i) -> __m512bh {
    // SAFETY: both are 512 bits of plain data.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
}
