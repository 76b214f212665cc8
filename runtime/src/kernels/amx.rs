//! AMX levels of the int8 and bf16 GEMMs: `tdpbusd` (u8 × s8 → i32) and
//! `tdpbf16ps` (bf16 × bf16 → f32) on 16×16 tiles, for CPUs that report
//! `amx-tile` with `amx-int8` / `amx-bf16` (Sapphire Rapids and later).
//!
//! Tiles (palette 1, every one configured as 16 rows × 64 bytes): tmm0–3
//! hold a 32×32 block of C (tmm0 rows 0–15 × columns 0–15, tmm1 rows 0–15 ×
//! columns 16–31, tmm2 and tmm3 rows 16–31), tmm4–5 the two 16-row tiles of
//! A for one 64-byte depth step (64 u8 or 32 bf16 per row), tmm6–7 the two
//! B tiles for that step: 16 rows of the grouped packed B (`grouped.rs`),
//! i.e. 16 columns × 4 bytes — exactly the operand layout `tdpbusd` and
//! `tdpbf16ps` take, so B is read in place with stride 64. A is packed per
//! block row-major with its depth padded to whole tiles (`pack_a_rows`), and
//! packed B panels hold whole tiles of depth, so every tile load is full
//! and in bounds; the zero padding contributes nothing.
//!
//! The tile instructions go through `asm!` (their intrinsics are not stable
//! Rust). The driver (`grouped.rs`) runs `ldtilecfg` at the start of each
//! unit of work on a thread and `tilerelease` at its end, so no tile state
//! outlives a call. Linux hands out the tile data state only on request:
//! [`amx_int8_available`] asks once per process with
//! `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`; if that fails
//! (old kernel, other OS), AMX counts as absent and the other levels run.

use std::sync::OnceLock;

use super::KernelError;
use super::bf16::{Bf16Level, PackedBf16Ref, gemm_bf16_level};
use super::detect::{has_amx_bf16, has_amx_int8};
use super::int8::{Int8Level, PackedS8Ref, gemm_u8s8_level};

/// Whether AMX int8 or bf16 tiles can run in this process.
pub fn amx_available() -> bool {
    amx_int8_available() || amx_bf16_available()
}

/// The CPU reports AMX int8, its tile palette fits our configuration, and
/// the OS granted this process the tile state.
pub fn amx_int8_available() -> bool {
    has_amx_int8() && palette_fits() && permission()
}

/// As [`amx_int8_available`], for bf16 tiles.
pub fn amx_bf16_available() -> bool {
    has_amx_bf16() && palette_fits() && permission()
}

/// [`super::int8::gemm_u8s8`] on AMX tiles; refused when AMX int8 is
/// unavailable. B is the same packed layout as for every other level.
#[allow(clippy::too_many_arguments)]
pub fn gemm_u8s8_amx(
    m: usize,
    n: usize,
    k: usize,
    a: &[u8],
    lda: usize,
    a_zero_point: i32,
    b: PackedS8Ref<'_>,
    c: &mut [i32],
    ldc: usize,
) -> Result<(), KernelError> {
    gemm_u8s8_level(Int8Level::Amx, m, n, k, a, lda, a_zero_point, b, c, ldc)
}

/// [`super::bf16::gemm_bf16`] on AMX tiles; refused when AMX bf16 is
/// unavailable.
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16_amx(
    m: usize,
    n: usize,
    k: usize,
    a: &[u16],
    lda: usize,
    b: PackedBf16Ref<'_>,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), KernelError> {
    gemm_bf16_level(Bf16Level::Amx, m, n, k, a, lda, b, c, ldc)
}

/// CPUID leaves 0x1D/0x1E: palette 1 exists with at least 8 tiles of 16
/// rows × 64 bytes, and the multiplier takes K = 16 dwords, N = 64 bytes.
#[cfg(target_arch = "x86_64")]
fn palette_fits() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    static FITS: OnceLock<bool> = OnceLock::new();
    *FITS.get_or_init(|| {
        if __cpuid(0).eax < 0x1E || __cpuid_count(0x1D, 0).eax < 1 {
            return false;
        }
        let p = __cpuid_count(0x1D, 1);
        let bytes_per_row = p.ebx & 0xFFFF;
        let max_names = p.ebx >> 16;
        let max_rows = p.ecx & 0xFFFF;
        let t = __cpuid_count(0x1E, 0).ebx;
        let (tmul_maxk, tmul_maxn) = (t & 0xFF, (t >> 8) & 0xFFFF);
        bytes_per_row >= 64 && max_names >= 8 && max_rows >= 16 && tmul_maxk >= 16 && tmul_maxn >= 64
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn palette_fits() -> bool {
    false
}

/// Asks Linux once for the AMX tile data state of this process.
fn permission() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(request_permission)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_permission() -> bool {
    const SYS_ARCH_PRCTL: isize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM) only changes this process's
    // permitted xsave features; it reads and writes no memory of ours. The
    // syscall clobbers rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn request_permission() -> bool {
    false
}

/// Rows of a C block (two tiles).
#[cfg(target_arch = "x86_64")]
const MR: usize = 32;

/// The int8 AMX level for the grouped driver.
#[cfg(target_arch = "x86_64")]
pub(super) fn int8_level() -> super::grouped::Level<u8> {
    super::grouped::Level {
        // B micro-panel 2 × 256 rows × 64 B = 32 KiB; A block 128 × 1 KiB.
        mr: MR,
        max_panels: 2,
        tiles: &[tile::<false, 1>, tile::<false, 2>],
        pack_a: super::grouped::pack_a_rows::<u8>,
        mc: 4 * MR,
        kc: 1024,
        nc: 4096,
        begin: Some(begin),
        end: Some(end),
    }
}

/// The bf16 AMX level for the grouped driver.
#[cfg(target_arch = "x86_64")]
pub(super) fn bf16_level() -> super::grouped::Level<u16> {
    super::grouped::Level {
        // Same bytes as int8: 512 bf16 = 1 KiB of depth per row.
        mr: MR,
        max_panels: 2,
        tiles: &[tile::<true, 1>, tile::<true, 2>],
        pack_a: super::grouped::pack_a_rows::<u16>,
        mc: 4 * MR,
        kc: 512,
        nc: 4096,
        begin: Some(begin),
        end: Some(end),
    }
}

/// The 64-byte tile configuration: palette 1, start row 0, tiles 0–7 of
/// 16 rows × 64 bytes (`colsb` u16 at bytes 16.., `rows` u8 at bytes 48..),
/// every reserved byte zero (`ldtilecfg` faults otherwise).
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

#[cfg(target_arch = "x86_64")]
static CONFIG: TileConfig = TileConfig(config_bytes());

#[cfg(target_arch = "x86_64")]
const fn config_bytes() -> [u8; 64] {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64; // colsb, little-endian u16
        c[48 + t] = 16; // rows
        t += 1;
    }
    c
}

/// # Safety
/// AMX is available (`amx_int8_available` or `amx_bf16_available`).
#[cfg(target_arch = "x86_64")]
unsafe fn begin() {
    // SAFETY: the caller guarantees AMX and the permission; CONFIG is a
    // valid palette-1 configuration.
    unsafe {
        std::arch::asm!(
            "ldtilecfg [{cfg}]",
            cfg = in(reg) CONFIG.0.as_ptr(),
            options(nostack, readonly),
        );
    }
}

/// # Safety
/// As for [`begin`].
#[cfg(target_arch = "x86_64")]
unsafe fn end() {
    // SAFETY: the caller guarantees AMX.
    unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
}

/// One depth step (16 groups) of a 32 × 16·NP block:
/// `tmm{0,2}(,1,3) += tmm{4,5} × tmm6(,7)`, with `$op` = `tdpbusd` (A
/// unsigned, B signed) or `tdpbf16ps`.
#[cfg(target_arch = "x86_64")]
macro_rules! step {
    ($op:literal, 1, $a0:expr, $a1:expr, $sa:expr, $b0:expr, $b1:expr) => {
        std::arch::asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            concat!($op, " tmm0, tmm4, tmm6"),
            concat!($op, " tmm2, tmm5, tmm6"),
            a0 = in(reg) $a0,
            a1 = in(reg) $a1,
            sa = in(reg) $sa,
            b0 = in(reg) $b0,
            sb = in(reg) 64usize,
            options(nostack, readonly),
        )
    };
    ($op:literal, 2, $a0:expr, $a1:expr, $sa:expr, $b0:expr, $b1:expr) => {
        std::arch::asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            concat!($op, " tmm0, tmm4, tmm6"),
            concat!($op, " tmm1, tmm4, tmm7"),
            concat!($op, " tmm2, tmm5, tmm6"),
            concat!($op, " tmm3, tmm5, tmm7"),
            a0 = in(reg) $a0,
            a1 = in(reg) $a1,
            sa = in(reg) $sa,
            b0 = in(reg) $b0,
            b1 = in(reg) $b1,
            sb = in(reg) 64usize,
            options(nostack, readonly),
        )
    };
}

/// A 32 × 16·NP block of C (i32 for int8, f32 for `BF16`) on tiles.
///
/// # Safety
/// AMX with the configuration of [`begin`] loaded on this thread; `t` as in
/// `grouped::Tile`, A packed by `pack_a_rows` with `mr = 32`, B panels
/// holding `16·ceil(groups/16)` rows from `t.b`.
#[cfg(target_arch = "x86_64")]
unsafe fn tile<const BF16: bool, const NP: usize>(t: &super::grouped::Tile) {
    use std::arch::asm;
    let steps = t.groups.div_ceil(16);
    // Row stride of packed A: whole tiles of depth (`pack_a_rows`).
    let sa = steps * 64;
    let ldc = t.ldc * 4;
    // SAFETY: forwarded from the caller; every tile load and store below
    // covers 16 rows × 64 bytes inside the buffers it names.
    unsafe {
        let c0 = t.c;
        let c1 = t.c.add(16 * t.ldc);
        let (lo, hi, ld) = if t.load_c {
            (c0.cast_const(), c1.cast_const(), ldc)
        } else {
            // Stride 0: every row of the tile is the 16 start values.
            (t.init, t.init, 0)
        };
        asm!(
            "tileloadd tmm0, [{lo} + {ld}*1]",
            "tileloadd tmm2, [{hi} + {ld}*1]",
            lo = in(reg) lo,
            hi = in(reg) hi,
            ld = in(reg) ld,
            options(nostack, readonly),
        );
        if NP == 2 {
            asm!(
                "tileloadd tmm1, [{lo} + {ld}*1]",
                "tileloadd tmm3, [{hi} + {ld}*1]",
                lo = in(reg) lo.add(16),
                hi = in(reg) hi.add(16),
                ld = in(reg) ld,
                options(nostack, readonly),
            );
        }
        let mut a = t.a;
        let mut b = t.b;
        for _ in 0..steps {
            // `b1` is past the last panel when NP = 1 (then unused).
            let (a1, b1) = (a.add(16 * sa), b.wrapping_add(t.bstride));
            match (BF16, NP) {
                (false, 1) => step!("tdpbusd", 1, a, a1, sa, b, b1),
                (false, _) => step!("tdpbusd", 2, a, a1, sa, b, b1),
                (true, 1) => step!("tdpbf16ps", 1, a, a1, sa, b, b1),
                (true, _) => step!("tdpbf16ps", 2, a, a1, sa, b, b1),
            }
            a = a.add(64);
            b = b.add(16 * 64);
        }
        asm!(
            "tilestored [{c0} + {ld}*1], tmm0",
            "tilestored [{c1} + {ld}*1], tmm2",
            c0 = in(reg) c0,
            c1 = in(reg) c1,
            ld = in(reg) ldc,
            options(nostack),
        );
        if NP == 2 {
            asm!(
                "tilestored [{c0} + {ld}*1], tmm1",
                "tilestored [{c1} + {ld}*1], tmm3",
                c0 = in(reg) c0.add(16),
                c1 = in(reg) c1.add(16),
                ld = in(reg) ldc,
                options(nostack),
            );
        }
    }
}
