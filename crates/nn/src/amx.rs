//! bfloat16 products on the AMX tiles (`tdpbf16ps`), for CPUs that have them (Intel's
//! Sapphire Rapids and later). One instruction multiplies a 16 x 32 bfloat16 tile by a
//! 32 x 16 one into 16 x 16 float32 sums: 8,192 products where `vdpbf16ps` makes 32, about
//! eight times its rate on the same core. The operands are the ones the bf16 module packs
//! for `vdpbf16ps` (pairs along the inner dimension, the right-hand side as pairs of its
//! rows), padded with zeros to whole tiles.
//!
//! Linux hands the tiles' 8 KB of register state to a process only when it asks
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); without that the first tile instruction is an
//! illegal instruction, so [`available`] asks once and answers no when refused. The
//! instructions are written as inline assembly: Rust's AMX intrinsics are not stable.

/// Rows of a tile (of the left-hand side and of the sums).
const TILE_ROWS: usize = 16;
/// Pairs of the inner dimension a tile spans (its 64 bytes a row).
pub(crate) const TILE_PAIRS: usize = 16;
/// Columns of the sums one tile covers.
const TILE_COLS: usize = 16;
/// Rows of the left-hand side one block computes: two tiles of them, so that every tile
/// of the right-hand side loaded serves both. The left-hand side is padded to a multiple.
pub(crate) const BLOCK_ROWS: usize = 2 * TILE_ROWS;

#[cfg(test)]
thread_local! {
    /// Set by tests to run this thread's products as a CPU without the tiles would.
    static WITHOUT_TILES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` on this thread as a CPU without the tiles would (tests of the other paths).
#[cfg(test)]
pub(crate) fn without_tiles<R>(f: impl FnOnce() -> R) -> R {
    WITHOUT_TILES.with(|w| w.set(true));
    let r = f();
    WITHOUT_TILES.with(|w| w.set(false));
    r
}

/// The environment variable that keeps bfloat16 products off the tiles (any value): for
/// comparing the kernels, or a host whose signal stacks cannot hold the tiles' state.
pub const NO_TILES_VAR: &str = "STRATA_NO_AMX";

/// Whether bfloat16 products run on the AMX tiles: the kernel path is
/// [`KernelPath::Amx`](crate::KernelPath::Amx) and Linux granted the tiles (asked here,
/// the first time; refused, the products run on `vdpbf16ps`).
pub(crate) fn available() -> bool {
    #[cfg(test)]
    if WITHOUT_TILES.with(std::cell::Cell::get) {
        return false;
    }
    crate::kernel_path::kernel_path() == crate::kernel_path::KernelPath::Amx && tiles_granted()
}

/// Whether the CPU has AMX-TILE and AMX-BF16 and [`NO_TILES_VAR`] is unset (CPUID only:
/// nothing is asked of the OS).
pub(crate) fn tiles_present() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // SAFETY: CPUID has no memory effects.
        std::env::var_os(NO_TILES_VAR).is_none() && unsafe { x86::has_tiles() }
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

/// Whether this process may use the tiles: [`tiles_present`], and the kernel granted
/// this process their state (asked once).
fn tiles_granted() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static GRANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *GRANTED.get_or_init(|| {
            // SAFETY: CPUID has no memory effects. The request changes the process for
            // good: signal frames grow by the tiles' 8 KB, and Linux then refuses a
            // `sigaltstack` too small for them (Rust's own are sized for it).
            tiles_present() && unsafe { x86::request_tile_state() }
        })
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

/// `dst (m x n, row-major) = [dst +] a * b` on the tiles, where `a` holds `m` rows of
/// `pairs` bfloat16 pairs (row `r` at `a[r * a_stride..]`, padded with zero rows to a
/// multiple of [`BLOCK_ROWS`]) and `b` holds `pairs` rows of pairs of `n` columns (row `p`
/// at `b[p * b_stride..]`, `b_stride` a multiple of 16 covering `n`, zeros past it).
/// `pairs` is a multiple of [`TILE_PAIRS`] (zero pairs past the real inner dimension on
/// both sides).
///
/// # Panics
/// When a size does not hold, or [`available`] is false.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product(
    dst: &mut [f32],
    (m, n): (usize, usize),
    a: &[u32],
    a_stride: usize,
    b: &[u32],
    b_stride: usize,
    pairs: usize,
    accumulate: bool,
) {
    assert!(available(), "AMX tiles are not available");
    assert!(pairs.is_multiple_of(TILE_PAIRS), "pairs in whole tiles");
    assert!(a_stride >= pairs && b_stride >= n && b_stride.is_multiple_of(TILE_COLS));
    assert!(
        a.len() >= m.div_ceil(BLOCK_ROWS) * BLOCK_ROWS * a_stride,
        "left-hand side size"
    );
    assert!(b.len() >= pairs * b_stride, "right-hand side size");
    assert!(dst.len() >= m * n, "destination too small");
    if m == 0 || n == 0 {
        return;
    }
    if pairs == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    let _ = accumulate;
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    // SAFETY: the tiles were granted (`available`), every tile read lies inside `a` and `b`
    // as just checked, and stores go to `dst` only inside its `m x n`.
    unsafe {
        x86::product(dst, (m, n), (a, a_stride), (b, b_stride), pairs, accumulate);
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86 {
    use super::{BLOCK_ROWS, TILE_COLS, TILE_PAIRS, TILE_ROWS};
    use std::arch::asm;

    /// CPUID leaf 7: AMX-BF16 (EDX bit 22) and AMX-TILE (EDX bit 24).
    pub(super) unsafe fn has_tiles() -> bool {
        if std::arch::x86_64::__cpuid(0).eax < 7 {
            return false;
        }
        let leaf = std::arch::x86_64::__cpuid_count(7, 0);
        leaf.edx & (1 << 22) != 0 && leaf.edx & (1 << 24) != 0
    }

    /// Asks Linux for the tiles' register state (`ARCH_REQ_XCOMP_PERM` for
    /// `XFEATURE_XTILEDATA`); true when granted.
    pub(super) unsafe fn request_tile_state() -> bool {
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let ret: i64;
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
        ret == 0
    }

    /// The tile configuration: palette 1, eight tiles of 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct TileConfig([u8; 64]);

    impl TileConfig {
        fn full() -> Self {
            let mut bytes = [0; 64];
            bytes[0] = 1;
            for t in 0..8 {
                bytes[16 + 2 * t] = 64;
                bytes[48 + t] = TILE_ROWS as u8;
            }
            TileConfig(bytes)
        }
    }

    /// One block's sums: tile `tmm(2i + j)` holds rows `16 i..` and columns `16 j..`.
    /// Tiles wholly inside `dst` are loaded from and stored to it (accumulating, the
    /// products are added to `dst`'s values); the others start from zero and go through
    /// `spill`, of which only the part inside `dst` is added or written back. Both are
    /// fixed by the shape, so a product's bits are too.
    ///
    /// The tile registers are named in the assembly without being declared clobbered:
    /// Rust has no register class for them and never allocates them, so their values
    /// live from one `asm!` block to the next within [`product`].
    struct Block<'a> {
        dst: *mut f32,
        n: usize,
        row: usize,
        col: usize,
        rows_left: usize,
        cols_left: usize,
        accumulate: bool,
        spill: &'a mut [f32; TILE_ROWS * TILE_COLS],
    }

    impl Block<'_> {
        /// Valid rows and columns of tile `(i, j)`.
        fn extent(&self, i: usize, j: usize) -> (usize, usize) {
            let rows = self.rows_left.saturating_sub(i * TILE_ROWS).min(TILE_ROWS);
            let cols = self.cols_left.saturating_sub(j * TILE_COLS).min(TILE_COLS);
            (rows, cols)
        }

        fn at(&self, i: usize, j: usize) -> *mut f32 {
            self.dst
                .wrapping_add((self.row + i * TILE_ROWS) * self.n + self.col + j * TILE_COLS)
        }

        unsafe fn start(&mut self, i: usize, j: usize) {
            let whole = self.extent(i, j) == (TILE_ROWS, TILE_COLS);
            let t = 2 * i + j;
            if whole && self.accumulate {
                let (ptr, stride) = (self.at(i, j), self.n * 4);
                match t {
                    0 => {
                        asm!("tileloadd tmm0, [{p} + {s}*1]", p = in(reg) ptr, s = in(reg) stride, options(nostack))
                    }
                    1 => {
                        asm!("tileloadd tmm1, [{p} + {s}*1]", p = in(reg) ptr, s = in(reg) stride, options(nostack))
                    }
                    2 => {
                        asm!("tileloadd tmm2, [{p} + {s}*1]", p = in(reg) ptr, s = in(reg) stride, options(nostack))
                    }
                    _ => {
                        asm!("tileloadd tmm3, [{p} + {s}*1]", p = in(reg) ptr, s = in(reg) stride, options(nostack))
                    }
                }
            } else {
                match t {
                    0 => asm!("tilezero tmm0", options(nostack, nomem)),
                    1 => asm!("tilezero tmm1", options(nostack, nomem)),
                    2 => asm!("tilezero tmm2", options(nostack, nomem)),
                    _ => asm!("tilezero tmm3", options(nostack, nomem)),
                }
            }
        }

        unsafe fn finish(&mut self, i: usize, j: usize) {
            let (rows, cols) = self.extent(i, j);
            if rows == 0 || cols == 0 {
                return;
            }
            let t = 2 * i + j;
            let whole = (rows, cols) == (TILE_ROWS, TILE_COLS);
            let (ptr, stride) = if whole {
                (self.at(i, j), self.n * 4)
            } else {
                (self.spill.as_mut_ptr(), TILE_COLS * 4)
            };
            match t {
                0 => {
                    asm!("tilestored [{p} + {s}*1], tmm0", p = in(reg) ptr, s = in(reg) stride, options(nostack))
                }
                1 => {
                    asm!("tilestored [{p} + {s}*1], tmm1", p = in(reg) ptr, s = in(reg) stride, options(nostack))
                }
                2 => {
                    asm!("tilestored [{p} + {s}*1], tmm2", p = in(reg) ptr, s = in(reg) stride, options(nostack))
                }
                _ => {
                    asm!("tilestored [{p} + {s}*1], tmm3", p = in(reg) ptr, s = in(reg) stride, options(nostack))
                }
            }
            if whole {
                return;
            }
            for r in 0..rows {
                let out = std::slice::from_raw_parts_mut(self.at(i, j).add(r * self.n), cols);
                let sums = &self.spill[r * TILE_COLS..][..cols];
                if self.accumulate {
                    out.iter_mut().zip(sums).for_each(|(o, s)| *o += s);
                } else {
                    out.copy_from_slice(sums);
                }
            }
        }
    }

    pub(super) unsafe fn product(
        dst: &mut [f32],
        (m, n): (usize, usize),
        (a, a_stride): (&[u32], usize),
        (b, b_stride): (&[u32], usize),
        pairs: usize,
        accumulate: bool,
    ) {
        let config = TileConfig::full();
        asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
        let mut spill = [0.0f32; TILE_ROWS * TILE_COLS];
        let (sa, sb) = (a_stride * 4, b_stride * 4);
        for row in (0..m).step_by(BLOCK_ROWS) {
            for col in (0..n).step_by(2 * TILE_COLS) {
                let mut block = Block {
                    dst: dst.as_mut_ptr(),
                    n,
                    row,
                    col,
                    rows_left: m - row,
                    cols_left: n - col,
                    accumulate,
                    spill: &mut spill,
                };
                let two_cols = n - col > TILE_COLS;
                let a0 = a.as_ptr().add(row * a_stride);
                let a1 = a0.add(TILE_ROWS * a_stride);
                let b0 = b.as_ptr().add(col);
                for (i, j) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                    if j == 0 || two_cols {
                        block.start(i, j);
                    }
                }
                for p in (0..pairs).step_by(TILE_PAIRS) {
                    let (a0, a1, b0) = (a0.add(p), a1.add(p), b0.add(p * b_stride));
                    if two_cols {
                        asm!(
                            "tileloadd tmm4, [{a0} + {sa}*1]",
                            "tileloadd tmm5, [{a1} + {sa}*1]",
                            "tileloadd tmm6, [{b0} + {sb}*1]",
                            "tileloadd tmm7, [{b1} + {sb}*1]",
                            "tdpbf16ps tmm0, tmm4, tmm6",
                            "tdpbf16ps tmm1, tmm4, tmm7",
                            "tdpbf16ps tmm2, tmm5, tmm6",
                            "tdpbf16ps tmm3, tmm5, tmm7",
                            a0 = in(reg) a0, a1 = in(reg) a1, sa = in(reg) sa,
                            b0 = in(reg) b0, b1 = in(reg) b0.add(TILE_COLS), sb = in(reg) sb,
                            options(nostack, readonly),
                        );
                    } else {
                        asm!(
                            "tileloadd tmm4, [{a0} + {sa}*1]",
                            "tileloadd tmm5, [{a1} + {sa}*1]",
                            "tileloadd tmm6, [{b0} + {sb}*1]",
                            "tdpbf16ps tmm0, tmm4, tmm6",
                            "tdpbf16ps tmm2, tmm5, tmm6",
                            a0 = in(reg) a0, a1 = in(reg) a1, sa = in(reg) sa,
                            b0 = in(reg) b0, sb = in(reg) sb,
                            options(nostack, readonly),
                        );
                    }
                }
                for (i, j) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                    if j == 0 || two_cols {
                        block.finish(i, j);
                    }
                }
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}
