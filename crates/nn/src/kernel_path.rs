//! Which vector unit runs the kernels: one choice for the whole process, made once.
//!
//! Every hot product and loop in this crate (float32 matrix products, the recurrent
//! cell's small products, bfloat16 convolution products, element-wise loops) is compiled
//! for several instruction sets and runs the one [`kernel_path`] names. By default that
//! is the fastest the CPU has; [`KERNEL_PATH_VAR`] (or [`force_kernel_path`]) forces
//! any other the CPU can execute, so one machine can run the tests, fixtures and
//! benchmarks of every path it supports.
//!
//! A path fixes which instructions compute, so it fixes the rounding of every sum: on
//! one machine and one path a run is reproducible to the bit; across paths results
//! agree to the precision of float32 (and of bfloat16 where a convolution's products
//! are rounded), not to the bit.

use std::sync::atomic::{AtomicU8, Ordering};
use thiserror::Error;

/// The environment variable that forces a kernel path (`auto`, or a name from
/// [`KernelPath::name`]): read once, the first time a kernel runs.
pub const KERNEL_PATH_VAR: &str = "STRATA_KERNEL_PATH";

/// A set of instructions the kernels run with, from the portable baseline up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KernelPath {
    /// The target's baseline only (SSE2 on x86-64): plain Rust, no fused multiply-add,
    /// `gemm`'s scalar micro-kernel.
    Portable,
    /// aarch64's Advanced SIMD: `gemm`'s NEON micro-kernel.
    Neon,
    /// AVX2 with fused multiply-add (x86-64-v3: Haswell, AMD Zen 1-3).
    Avx2,
    /// AVX-512F: 16-lane float32 products; bfloat16 products as rounded float32.
    Avx512,
    /// AVX-512 BF16 as well: `vdpbf16ps` for the convolutions' bfloat16 products.
    Avx512Bf16,
    /// AMX tiles (`tdpbf16ps`) for bfloat16 products, AVX-512 for the rest.
    Amx,
}

/// Every path, slowest first.
const ALL: [KernelPath; 6] = [
    KernelPath::Portable,
    KernelPath::Neon,
    KernelPath::Avx2,
    KernelPath::Avx512,
    KernelPath::Avx512Bf16,
    KernelPath::Amx,
];

/// A kernel path that cannot be used here.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KernelPathError {
    /// The name is none of the paths'.
    #[error(
        "{var}={given:?} names no kernel path: use auto or one this CPU supports: {supported}"
    )]
    Unknown {
        /// The variable read ([`KERNEL_PATH_VAR`]).
        var: &'static str,
        /// What it held.
        given: String,
        /// The paths this CPU supports, comma-separated.
        supported: String,
    },
    /// The CPU lacks what the path needs.
    #[error("kernel path `{path}` needs {needs}, which this CPU lacks; it supports {supported}")]
    Unsupported {
        /// The path asked for.
        path: &'static str,
        /// What it needs ([`KernelPath::needs`]).
        needs: &'static str,
        /// The paths this CPU supports, comma-separated.
        supported: String,
    },
    /// The AMX tiles were asked for while `STRATA_NO_AMX` keeps them off.
    #[error(
        "kernel path `amx` was asked for, but STRATA_NO_AMX is set, which keeps the tiles off; \
         this CPU supports {supported}"
    )]
    TilesOff {
        /// The paths this CPU supports, comma-separated.
        supported: String,
    },
}

impl KernelPath {
    /// Its name, as [`KERNEL_PATH_VAR`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Portable => "portable",
            KernelPath::Neon => "neon",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512 => "avx512",
            KernelPath::Avx512Bf16 => "avx512-bf16",
            KernelPath::Amx => "amx",
        }
    }

    /// What it needs from the CPU, in a few words.
    pub fn needs(self) -> &'static str {
        match self {
            KernelPath::Portable => "nothing beyond the target's baseline",
            KernelPath::Neon => "aarch64 with NEON",
            KernelPath::Avx2 => "x86-64 with AVX2 and FMA",
            KernelPath::Avx512 => "x86-64 with AVX-512F, AVX2 and FMA",
            KernelPath::Avx512Bf16 => "AVX-512F, AVX-512BW, AVX-512 BF16, AVX2 and FMA",
            KernelPath::Amx => "AVX-512 BF16, AMX-TILE and AMX-BF16, on Linux",
        }
    }

    /// The path a name gives, in any case (`None` for an unknown name).
    pub fn parse(name: &str) -> Option<KernelPath> {
        ALL.into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether this CPU can execute the path.
    pub fn supported(self) -> bool {
        match self {
            KernelPath::Portable => true,
            KernelPath::Neon => cpu::neon(),
            KernelPath::Avx2 => cpu::avx2(),
            KernelPath::Avx512 => cpu::avx512(),
            KernelPath::Avx512Bf16 => cpu::avx512_bf16(),
            // The tiles are asked for at the first tile product, not here: a process
            // that never multiplies in bfloat16 keeps its signal frames as they were.
            KernelPath::Amx => cpu::avx512_bf16() && crate::amx::tiles_present(),
        }
    }

    /// Every path this CPU can execute, slowest first.
    pub fn all_supported() -> Vec<KernelPath> {
        ALL.into_iter().filter(|p| p.supported()).collect()
    }

    /// [`KernelPath::all_supported`]'s names as a list for a message (`portable, avx2`).
    pub fn supported_names() -> String {
        KernelPath::all_supported()
            .into_iter()
            .map(KernelPath::name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The fastest path this CPU can execute.
    pub fn fastest() -> KernelPath {
        ALL.into_iter()
            .rev()
            .find(|p| p.supported())
            .unwrap_or(KernelPath::Portable)
    }

    /// The path [`KERNEL_PATH_VAR`] asks for (the fastest when unset, empty or `auto`).
    ///
    /// # Errors
    /// When it names no path, or one this CPU cannot execute.
    pub fn from_env() -> Result<KernelPath, KernelPathError> {
        let asked = match std::env::var_os(KERNEL_PATH_VAR) {
            None => return Ok(KernelPath::fastest()),
            Some(value) => value.to_string_lossy().trim().to_string(),
        };
        if asked.is_empty() || asked.eq_ignore_ascii_case("auto") {
            return Ok(KernelPath::fastest());
        }
        let path = KernelPath::parse(&asked).ok_or_else(|| KernelPathError::Unknown {
            var: KERNEL_PATH_VAR,
            given: asked.clone(),
            supported: KernelPath::supported_names(),
        })?;
        path.check()?;
        Ok(path)
    }

    fn check(self) -> Result<(), KernelPathError> {
        if self.supported() {
            Ok(())
        } else if self == KernelPath::Amx
            && cpu::avx512_bf16()
            && std::env::var_os(crate::amx::NO_TILES_VAR).is_some()
        {
            Err(KernelPathError::TilesOff {
                supported: KernelPath::supported_names(),
            })
        } else {
            Err(KernelPathError::Unsupported {
                path: self.name(),
                needs: self.needs(),
                supported: KernelPath::supported_names(),
            })
        }
    }

    /// Whether float32 products run with AVX-512 (16 lanes).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn avx512(self) -> bool {
        self >= KernelPath::Avx512
    }

    /// Whether float32 products and loops run with AVX2 and FMA (or wider).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn avx2(self) -> bool {
        self >= KernelPath::Avx2
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(code: u8) -> Option<KernelPath> {
        ALL.get(usize::from(code).checked_sub(1)?).copied()
    }
}

impl std::fmt::Display for KernelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The chosen path's code (0: not chosen yet).
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// The path every kernel runs: forced by [`force_kernel_path`], else read from
/// [`KERNEL_PATH_VAR`] the first time it is asked.
///
/// # Panics
/// When the variable names no path or one this CPU lacks: a program that sets it should
/// call [`select_kernel_path`] first and report the error (the `strata` binary does).
pub fn kernel_path() -> KernelPath {
    if let Some(path) = KernelPath::from_code(CHOSEN.load(Ordering::Relaxed)) {
        return path;
    }
    match select_kernel_path() {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}

/// Chooses the path from [`KERNEL_PATH_VAR`] if none is chosen yet, and returns the
/// chosen one.
///
/// # Errors
/// When the variable names no path or one this CPU lacks; nothing is chosen then.
pub fn select_kernel_path() -> Result<KernelPath, KernelPathError> {
    if let Some(path) = KernelPath::from_code(CHOSEN.load(Ordering::Relaxed)) {
        return Ok(path);
    }
    let path = KernelPath::from_env()?;
    // A racing thread may have chosen first: its choice stands.
    let _ = CHOSEN.compare_exchange(0, path.code(), Ordering::Relaxed, Ordering::Relaxed);
    Ok(KernelPath::from_code(CHOSEN.load(Ordering::Relaxed)).unwrap_or(path))
}

/// Makes every kernel run `path` from now on, whatever [`KERNEL_PATH_VAR`] says: for
/// tests and benchmarks that compare paths in one process. Switch only while no other
/// thread computes: a pass running meanwhile may mix the two paths.
///
/// # Errors
/// When this CPU cannot execute `path`; the chosen path is unchanged then.
pub fn force_kernel_path(path: KernelPath) -> Result<(), KernelPathError> {
    path.check()?;
    CHOSEN.store(path.code(), Ordering::Relaxed);
    Ok(())
}

/// What the CPU has, detected once (std caches it).
mod cpu {
    #[cfg(target_arch = "x86_64")]
    macro_rules! has {
        ($($f:tt),*) => { true $(&& std::arch::is_x86_feature_detected!($f))* };
    }

    // Each x86 level is what `gemm`'s SIMD token for it checks (SSE through AVX2 and FMA,
    // plus AVX-512F), so a path chosen here always gets its token in `matmul.rs`.
    #[cfg(target_arch = "x86_64")]
    fn token<S: gemm_common::simd::MixedSimd<f32, f32, f32, f32>>() -> bool {
        S::try_new().is_some()
    }

    pub(super) fn avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        return has!("avx2", "fma") && token::<gemm_common::simd::V3>();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    pub(super) fn avx512() -> bool {
        #[cfg(target_arch = "x86_64")]
        return avx2() && has!("avx512f") && token::<gemm_common::simd::V4>();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    pub(super) fn avx512_bf16() -> bool {
        #[cfg(target_arch = "x86_64")]
        return avx512() && has!("avx512bw", "avx512bf16");
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    pub(super) fn neon() -> bool {
        #[cfg(target_arch = "aarch64")]
        return std::arch::is_aarch64_feature_detected!("neon");
        #[cfg(not(target_arch = "aarch64"))]
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_codes_round_trip() {
        for path in ALL {
            assert_eq!(KernelPath::parse(path.name()), Some(path));
            assert_eq!(KernelPath::from_code(path.code()), Some(path));
        }
        assert_eq!(KernelPath::parse("avx-512"), None);
        assert_eq!(KernelPath::parse(" AVX2 "), Some(KernelPath::Avx2));
        assert_eq!(KernelPath::from_code(0), None);
    }

    #[test]
    fn the_portable_path_is_always_there_and_the_fastest_is_supported() {
        let supported = KernelPath::all_supported();
        assert_eq!(supported.first(), Some(&KernelPath::Portable));
        assert_eq!(supported.last(), Some(&KernelPath::fastest()));
        assert!(supported.windows(2).all(|w| w[0] < w[1]));
        // Wider x86 paths include the narrower ones.
        for w in supported.windows(2) {
            if w[1].avx2() {
                assert!(w[0] == KernelPath::Portable || w[0].avx2());
            }
        }
    }

    #[test]
    fn an_unsupported_path_is_refused_naming_what_it_needs() {
        let missing = ALL.into_iter().find(|p| !p.supported());
        // Neon on x86 or the x86 paths on aarch64: every machine lacks one.
        let missing = missing.expect("some path is foreign to this CPU");
        let err = force_kernel_path(missing).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(missing.name()) && text.contains("portable"),
            "{text}"
        );
    }
}
