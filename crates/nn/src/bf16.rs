//! Products with bfloat16 operands and float32 sums, for the convolutions' large products
//! (`network.conv_precision = "bf16"`). Each operand is rounded to bfloat16 (float32's
//! exponent with 8 significant bits, to nearest even) as it is packed; the products of two
//! bfloat16 values are exact in float32, and they are summed in float32. Weights,
//! gradients and Adam's moments stay float32: only the products' inputs lose bits.
//!
//! Where the CPU has AVX-512 BF16, `vdpbf16ps` makes 32 products a cycle where fused
//! float32 multiply-adds make 16. Elsewhere the rounded operands are multiplied as float32
//! (the same products, summed in `gemm`'s order), about as fast as float32 itself. As
//! with `gemm`, a product's last bits depend on the kernel path; on one machine and path
//! a run is reproducible.
//!
//! The instruction takes its operands in pairs along the inner dimension: output lane
//! `j` gains `a[2j+1] * b[2j+1]`, then `a[2j] * b[2j]`. So the left-hand side is packed as
//! rows of pairs (`u32`: the even element low, the odd one high) and the right-hand side as
//! pairs of its rows, 16 columns a vector.

use crate::amx::{self, BLOCK_ROWS, TILE_PAIRS};
use crate::kernel_path::KernelPath;
use crate::matmul::{matmul, View};

/// Columns of the right-hand side one vector covers.
const LANES: usize = 16;
/// Rows of the left-hand side one register block computes (each right-hand load serves
/// all of them).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const ROWS: usize = 6;
/// Vectors of columns one register block keeps (`ROWS * BLOCKS` accumulators).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const BLOCKS: usize = 4;

/// `x` rounded to the nearest bfloat16, ties to even (a NaN stays a NaN), a value below
/// float32's normal range flushed to zero of its sign, as `vcvtneps2bf16` does.
#[inline(always)]
pub(crate) fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    if x.is_nan() {
        ((bits >> 16) | 0x40) as u16
    } else if bits & 0x7f80_0000 == 0 {
        ((bits >> 16) & 0x8000) as u16
    } else {
        rounded as u16
    }
}

/// The float32 value of a bfloat16.
#[inline(always)]
pub(crate) fn from_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Two bfloat16 values as the instruction reads a pair: `even` low, `odd` high.
#[inline(always)]
fn pair(even: f32, odd: f32) -> u32 {
    u32::from(to_bf16(even)) | (u32::from(to_bf16(odd)) << 16)
}

#[cfg(test)]
thread_local! {
    /// Set by tests to run this thread's products as a CPU without the instruction would.
    static WITHOUT_INSTRUCTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Which kernel runs bfloat16 products here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Kernel {
    /// The AMX tiles (`tdpbf16ps`).
    Tiles,
    /// AVX-512 BF16's `vdpbf16ps`.
    Vector,
    /// Float32 `gemm` on the rounded operands.
    Float32,
}

impl Bf16Kernel {
    /// What it is, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            Bf16Kernel::Tiles => "AMX tiles (tdpbf16ps)",
            Bf16Kernel::Vector => "vdpbf16ps (AVX-512 BF16)",
            Bf16Kernel::Float32 => {
                "no bfloat16 instructions on this kernel path: the rounded operands through float32 products"
            }
        }
    }
}

/// The kernel the [`crate::kernel_path()`] gives bfloat16 products.
pub fn kernel() -> Bf16Kernel {
    if accelerated() && amx::available() {
        Bf16Kernel::Tiles
    } else if accelerated() {
        Bf16Kernel::Vector
    } else {
        Bf16Kernel::Float32
    }
}

/// Whether the kernel path has AVX-512 BF16 (`vdpbf16ps`), which packs the operands
/// (and, without the AMX tiles, multiplies them); without it they go through float32
/// products on the rounded operands.
pub fn accelerated() -> bool {
    #[cfg(test)]
    if WITHOUT_INSTRUCTION.with(std::cell::Cell::get) {
        return false;
    }
    cfg!(target_arch = "x86_64") && crate::kernel_path::kernel_path() >= KernelPath::Avx512Bf16
}

/// A `k x n` right-hand side rounded and packed: for each pair of rows, `n` rounded up
/// to whole vectors of pairs (the columns past `n` are zero, and an odd `k`'s last row
/// pairs with zeros).
#[derive(Clone, Debug, Default)]
pub(crate) struct PackedRhs {
    rows: usize,
    pairs: usize,
    cols: usize,
    data: Vec<u32>,
}

impl PackedRhs {
    /// Packs `rhs` into this buffer (its allocation is reused).
    pub(crate) fn pack(&mut self, rhs: View<'_>) {
        let (k, n) = (rhs.rows(), rhs.cols());
        let stride = self.size(k, n);
        if stride == 0 {
            return;
        }
        if let Some(columns) = rhs.t().row_major() {
            // A transposed row-major matrix (the filters for the forward product): each
            // column's pairs are one contiguous run, rounded as such, then transposed.
            let mut pairs = Vec::with_capacity(self.pairs);
            for (c, column) in columns.chunks_exact(k.max(1)).enumerate().take(n) {
                round_pairs(column, &mut pairs);
                for (p, v) in pairs.iter().enumerate() {
                    self.data[p * stride + c] = *v;
                }
            }
            return;
        }
        let rows = rhs.row_major();
        for (p, out) in self
            .data
            .chunks_exact_mut(stride)
            .take(self.pairs)
            .enumerate()
        {
            let (even, odd) = (2 * p, 2 * p + 1);
            match rows {
                Some(data) if odd < k => {
                    interleave(&data[even * n..][..n], &data[odd * n..][..n], &mut out[..n]);
                }
                _ => {
                    for (c, o) in out[..n].iter_mut().enumerate() {
                        let b = if odd < k { rhs.at(odd, c) } else { 0.0 };
                        *o = pair(rhs.at(even, c), b);
                    }
                }
            }
        }
    }

    /// Sizes the buffer for a `k x n` right-hand side and zeroes what no packing writes:
    /// the columns past `n` and the pair rows up to whole tiles (which the AMX tiles read
    /// and the other paths skip), not the whole buffer (a weight gradient's patches are
    /// megabytes). Returns the stride between pair rows.
    fn size(&mut self, k: usize, n: usize) -> usize {
        (self.rows, self.pairs, self.cols) = (k, k.div_ceil(2), n);
        let stride = padded(n);
        let len = self.pairs.next_multiple_of(TILE_PAIRS) * stride;
        if self.data.len() < len {
            self.data.resize(len, 0);
        }
        self.data.truncate(len);
        if stride > n {
            for row in self.data.chunks_exact_mut(stride) {
                row[n..].fill(0);
            }
        }
        self.data[self.pairs * stride..].fill(0);
        stride
    }

    /// A `k x n` right-hand side that `fill(pairs, stride)` writes straight into the
    /// packed layout: every pair of pair row `p` (rows `2p` and `2p + 1` interleaved, an
    /// odd `k`'s last row with zeros) at `pairs[p * stride..]`, `n` of them. `fill`
    /// returns the rows it covered, which must be `k`.
    ///
    /// # Panics
    /// When `fill` covered other than `k` rows.
    pub(crate) fn gathered(
        &mut self,
        (k, n): (usize, usize),
        fill: impl FnOnce(&mut [u32], usize) -> usize,
    ) {
        let stride = self.size(k, n);
        assert_eq!(fill(&mut self.data, stride), k, "rows gathered");
    }

    /// Rows (the inner dimension).
    fn rows(&self) -> usize {
        self.rows
    }
}

/// `values` rounded into pairs (`out`, replacing what it held), an odd last value paired
/// with zero.
fn round_pairs(values: &[f32], out: &mut Vec<u32>) {
    let whole = values.len() - values.len() % 2;
    out.clear();
    out.resize(values.len().div_ceil(2), 0);
    round_into(&values[..whole], &mut out[..whole / 2]);
    if whole < values.len() {
        out[whole / 2] = pair(values[whole], 0.0);
    }
}

/// Columns rounded up to whole vectors.
fn padded(n: usize) -> usize {
    n.div_ceil(LANES) * LANES
}

/// `out[c] = (even[c], odd[c])` rounded, for two rows of a right-hand side.
fn interleave(even: &[f32], odd: &[f32], out: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        // SAFETY: the features were just detected.
        return unsafe { x86::interleave(even, odd, out) };
    }
    for ((o, a), b) in out.iter_mut().zip(even).zip(odd) {
        *o = pair(*a, *b);
    }
}

/// Rounds `src` into `out` value by value (`out` as bfloat16 values, two a `u32`).
fn round_into(src: &[f32], out: &mut [u32]) {
    debug_assert_eq!(src.len(), 2 * out.len());
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        // SAFETY: the features were just detected.
        return unsafe { x86::round_into(src, out) };
    }
    for (o, p) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = pair(p[0], p[1]);
    }
}

/// A left-hand side packed as pairs along its inner dimension: the pair `p` of row `r`
/// at `data[r * row_step + p * pair_step]`.
struct PackedLhs<'a> {
    data: &'a [u32],
    rows: usize,
    pairs: usize,
    row_step: usize,
    pair_step: usize,
}

/// Sizes `out` for `m` rows of `pairs` pairs as the AMX tiles read them (each row padded
/// with zero pairs to whole tiles, the rows with zero rows to whole blocks; the other
/// paths read only the real pairs) and zeroes the padding; the real pairs are left to the
/// caller to write (not zeroed first: a minibatch's patches are megabytes). Returns the
/// row step.
fn size_rows(out: &mut Vec<u32>, m: usize, pairs: usize) -> usize {
    let row_step = pairs.next_multiple_of(TILE_PAIRS);
    let len = m.next_multiple_of(BLOCK_ROWS) * row_step;
    if out.len() < len {
        out.resize(len, 0);
    }
    if row_step > pairs {
        for row in out[..m * row_step].chunks_exact_mut(row_step) {
            row[pairs..].fill(0);
        }
    }
    out[m * row_step..len].fill(0);
    row_step
}

/// Packs a `m x k` left-hand side as rows of pairs into `out` (see [`size_rows`]).
fn pack_lhs<'a>(lhs: View<'_>, out: &'a mut Vec<u32>) -> PackedLhs<'a> {
    let (m, k) = (lhs.rows(), lhs.cols());
    let pairs = k.div_ceil(2);
    let row_step = size_rows(out, m, pairs);
    let mut odd_row = Vec::new();
    for (r, row) in out.chunks_exact_mut(row_step.max(1)).enumerate().take(m) {
        let row = &mut row[..pairs];
        match lhs.row_major() {
            Some(data) if k % 2 == 0 => round_into(&data[r * k..][..k], row),
            Some(data) => {
                round_pairs(&data[r * k..][..k], &mut odd_row);
                row.copy_from_slice(&odd_row);
            }
            _ => {
                for (p, o) in row.iter_mut().enumerate() {
                    let odd = if 2 * p + 1 < k {
                        lhs.at(r, 2 * p + 1)
                    } else {
                        0.0
                    };
                    *o = pair(lhs.at(r, 2 * p), odd);
                }
            }
        }
    }
    PackedLhs {
        data: out,
        rows: m,
        pairs,
        row_step,
        pair_step: 1,
    }
}

/// Bytes as bfloat16 pairs (exact: every byte value is a bfloat16; `src.len() == 2 *
/// out.len()`).
pub(crate) fn byte_pairs(src: &[u8], out: &mut [u32]) {
    debug_assert_eq!(src.len(), 2 * out.len());
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        // SAFETY: the features were just detected.
        return unsafe { x86::byte_pairs(src, out) };
    }
    for (o, p) in out.iter_mut().zip(src.chunks_exact(2)) {
        let half = |b: u8| f32::from(b).to_bits() >> 16;
        *o = half(p[0]) | (half(p[1]) << 16);
    }
}

/// `out[c] = (even[c], odd[c])` for two rows of bytes, as bfloat16 (exact).
pub(crate) fn byte_interleave(even: &[u8], odd: &[u8], out: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        // SAFETY: the features were just detected.
        return unsafe { x86::byte_interleave(even, odd, out) };
    }
    for ((o, a), b) in out.iter_mut().zip(even).zip(odd) {
        let half = |b: u8| f32::from(b).to_bits() >> 16;
        *o = half(*a) | (half(*b) << 16);
    }
}

/// `out[c] = (even[c], odd[c])` for two rows of floats, rounded to bfloat16.
pub(crate) fn float_interleave(even: &[f32], odd: &[f32], out: &mut [u32]) {
    interleave(even, odd, out);
}

/// Floats rounded to bfloat16 pairs (`src.len() == 2 * out.len()`).
pub(crate) fn float_pairs(src: &[f32], out: &mut [u32]) {
    round_into(src, out);
}

thread_local! {
    /// Each thread's packed left-hand side, and a right-hand side packed per call.
    static SCRATCH: std::cell::RefCell<(Vec<u32>, PackedRhs, PackedRhs)> =
        std::cell::RefCell::new(Default::default());
}

/// `dst (m x n, row-major) = [dst +] lhs (m x k) * rhs (k x n)`, the operands rounded
/// to bfloat16, the products summed in float32 (in the inner dimension's order, then
/// added to `dst` when `accumulate`).
///
/// # Panics
/// When the shapes disagree or `dst` is too small.
pub(crate) fn matmul_bf16(dst: &mut [f32], lhs: View<'_>, rhs: &PackedRhs, accumulate: bool) {
    assert_eq!(lhs.cols(), rhs.rows(), "inner dimensions differ");
    SCRATCH.with(|s| {
        let packed = &mut s.borrow_mut().0;
        product(dst, pack_lhs(lhs, packed), rhs, accumulate);
    });
}

/// `dst (m x n, row-major) = [dst +] lhs (m x k) * rhs (k x n)` as [`matmul_bf16`], for
/// a left-hand side that `fill(rows, row_step)` writes straight into this thread's packed
/// buffer as bfloat16 pairs (every pair of row `r`, `k / 2` of them, at `rows[r *
/// row_step..]`; `k` even), as a convolution's patches are gathered. `fill` returns the
/// rows it wrote, which must be `m`.
///
/// # Panics
/// When `k` is odd, `fill` wrote other than `m` rows, the shapes disagree or `dst` is
/// too small.
pub(crate) fn matmul_bf16_gathered(
    dst: &mut [f32],
    (m, k): (usize, usize),
    fill: impl FnOnce(&mut [u32], usize) -> usize,
    rhs: &PackedRhs,
    accumulate: bool,
) {
    assert!(
        k.is_multiple_of(2),
        "a gathered left-hand side comes in whole pairs"
    );
    assert_eq!(k, rhs.rows(), "inner dimensions differ");
    SCRATCH.with(|s| {
        let packed = &mut s.borrow_mut().0;
        let row_step = size_rows(packed, m, k / 2);
        assert_eq!(fill(packed, row_step), m, "rows gathered");
        let lhs = PackedLhs {
            data: packed,
            rows: m,
            pairs: k / 2,
            row_step,
            pair_step: 1,
        };
        product(dst, lhs, rhs, accumulate);
    });
}

/// `dst (m x n) = [dst +] lhs^T * rhs`, for `lhs` (`k x m`) and `rhs` (`k x n`) sharing
/// their rows (a weight gradient: the output gradients' transpose times the inputs), both
/// packed here, in this thread's scratch, as pairs of their rows.
///
/// (The convolutions gather their right-hand side themselves: the tests' entry point.)
///
/// # Panics
/// When the shapes disagree or `dst` is too small.
#[cfg(test)]
pub(crate) fn matmul_bf16_tn(dst: &mut [f32], lhs: View<'_>, rhs: View<'_>, accumulate: bool) {
    assert_eq!(lhs.rows(), rhs.rows(), "inner dimensions differ");
    matmul_bf16_tn_gathered(dst, lhs, |packed| packed.pack(rhs), accumulate);
}

/// As [`matmul_bf16_tn`], for a right-hand side that `fill` packs into this thread's
/// buffer itself ([`PackedRhs::gathered`]: a convolution's patches gathered straight
/// into pairs of rows).
///
/// # Panics
/// When the shapes disagree or `dst` is too small.
pub(crate) fn matmul_bf16_tn_gathered(
    dst: &mut [f32],
    lhs: View<'_>,
    fill: impl FnOnce(&mut PackedRhs),
    accumulate: bool,
) {
    SCRATCH.with(|s| {
        let (_, lhs_packed, rhs_packed) = &mut *s.borrow_mut();
        lhs_packed.pack(lhs);
        fill(rhs_packed);
        assert_eq!(lhs.rows(), rhs_packed.rows(), "inner dimensions differ");
        let lhs = PackedLhs {
            data: &lhs_packed.data,
            rows: lhs_packed.cols,
            pairs: lhs_packed.pairs,
            row_step: 1,
            pair_step: padded(lhs_packed.cols),
        };
        product(dst, lhs, rhs_packed, accumulate);
    });
}

fn product(dst: &mut [f32], lhs: PackedLhs<'_>, rhs: &PackedRhs, accumulate: bool) {
    let (m, n) = (lhs.rows, rhs.cols);
    assert!(dst.len() >= m * n, "destination too small");
    assert_eq!(lhs.pairs, rhs.pairs, "inner dimensions differ");
    if m == 0 || n == 0 {
        return;
    }
    if lhs.pairs == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    let last = (m - 1) * lhs.row_step + (lhs.pairs - 1) * lhs.pair_step;
    assert!(last < lhs.data.len(), "left-hand side size");
    if kernel() == Bf16Kernel::Tiles {
        return on_tiles(dst, &lhs, rhs, accumulate);
    }
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        // SAFETY: the features were just detected; the sizes were checked above.
        unsafe { x86::product(dst, &lhs, rhs, accumulate) };
        return;
    }
    unpacked(dst, &lhs, rhs, accumulate);
}

thread_local! {
    /// Each thread's left-hand side laid out as rows of pairs for the tiles, when it came
    /// packed as pairs of rows (a weight gradient's output gradients).
    static TILE_ROWS_SCRATCH: std::cell::RefCell<Vec<u32>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// On the AMX tiles: the left-hand side as rows of pairs (transposed here when it came as
/// pairs of rows), both sides' zero padding read as whole tiles.
fn on_tiles(dst: &mut [f32], lhs: &PackedLhs<'_>, rhs: &PackedRhs, accumulate: bool) {
    let (m, n) = (lhs.rows, rhs.cols);
    let pairs = lhs.pairs.next_multiple_of(TILE_PAIRS);
    let (b, b_stride) = (&rhs.data[..], padded(n));
    if lhs.pair_step == 1 && lhs.row_step >= pairs {
        return amx::product(
            dst,
            (m, n),
            lhs.data,
            lhs.row_step,
            b,
            b_stride,
            pairs,
            accumulate,
        );
    }
    TILE_ROWS_SCRATCH.with(|scratch| {
        let rows = &mut *scratch.borrow_mut();
        rows.clear();
        rows.resize(m.next_multiple_of(BLOCK_ROWS) * pairs, 0);
        for (r, row) in rows.chunks_exact_mut(pairs).enumerate().take(m) {
            for (p, v) in row[..lhs.pairs].iter_mut().enumerate() {
                *v = lhs.data[r * lhs.row_step + p * lhs.pair_step];
            }
        }
        amx::product(dst, (m, n), rows, pairs, b, b_stride, pairs, accumulate);
    });
}

/// Without the instruction: the rounded operands unpacked to float32 and multiplied by
/// `gemm`, as fast as a float32 product. The products are the same (two bfloat16 values
/// multiply exactly in float32); only the order of the sums differs from the instruction's.
fn unpacked(dst: &mut [f32], lhs: &PackedLhs<'_>, rhs: &PackedRhs, accumulate: bool) {
    let (m, k, n) = (lhs.rows, 2 * lhs.pairs, rhs.cols);
    let stride = padded(n);
    let mut a = vec![0.0; m * k];
    for (r, row) in a.chunks_exact_mut(k).enumerate() {
        for (p, v) in row.chunks_exact_mut(2).enumerate() {
            let pair = lhs.data[r * lhs.row_step + p * lhs.pair_step];
            v[0] = from_bf16(pair as u16);
            v[1] = from_bf16((pair >> 16) as u16);
        }
    }
    let mut b = vec![0.0; k * n];
    for (p, rows) in b.chunks_exact_mut(2 * n).enumerate() {
        let (even, odd) = rows.split_at_mut(n);
        for (c, pair) in rhs.data[p * stride..][..n].iter().enumerate() {
            even[c] = from_bf16(*pair as u16);
            odd[c] = from_bf16((*pair >> 16) as u16);
        }
    }
    matmul(dst, View::new(&a, m, k), View::new(&b, k, n), accumulate);
}

#[cfg(target_arch = "x86_64")]
#[path = "bf16_x86.rs"]
mod x86;

#[cfg(test)]
#[path = "bf16_tests.rs"]
mod tests;
