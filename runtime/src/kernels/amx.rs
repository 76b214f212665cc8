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
        bytes_per_row >= 64
            && max_names >= 8
            && max_rows >= 16
            && tmul_maxk >= 16
            && tmul_maxn >= 64
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn palette_fits() -> bool {
    false
}

/// Why AMX cannot run in this process (for tests and benchmarks to print),
/// or `None` when int8 or bf16 tiles can.
pub fn amx_unavailable_reason() -> Option<String> {
    if !has_amx_int8() && !has_amx_bf16() {
        return Some(
            "the cpu reports no amx-int8 or amx-bf16, or the os does not enable tile state"
                .to_string(),
        );
    }
    if !palette_fits() {
        return Some("the cpu's tile palette is smaller than 8 tiles of 16x64 bytes".to_string());
    }
    match permission_result() {
        Ok(()) => None,
        Err(0) => Some("amx tiles are only enabled on linux".to_string()),
        Err(errno) => Some(format!(
            "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed with errno {errno}"
        )),
    }
}

/// Asks Linux once for the AMX tile data state of this process.
fn permission() -> bool {
    permission_result().is_ok()
}

fn permission_result() -> Result<(), i64> {
    static GRANTED: OnceLock<Result<(), i64>> = OnceLock::new();
    *GRANTED.get_or_init(request_permission)
}

/// `Err(errno)` when refused (`Err(0)`: not Linux; ENOSPC: a thread's sigaltstack is too small
/// for signal frames with tile data; EINVAL: the kernel predates AMX).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_permission() -> Result<(), i64> {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
    const XFEATURE_XTILEDATA: u64 = 18;
    let ret: i64;
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
    if ret == 0 { Ok(()) } else { Err(-ret) }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn request_permission() -> Result<(), i64> {
    Err(0)
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
pub(super) unsafe fn begin() {
    // SAFETY: the caller guarantees AMX and the permission; CONFIG is a
    // valid palette-1 configuration.
    unsafe {
        std::arch::asm!(
            "ldtilecfg [{cfg}]",
            cfg = in(reg) CONFIG.0.as_ptr(),
            options(nostack),
        );
    }
}

/// # Safety
/// As for [`begin`].
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn end() {
    // SAFETY: the caller guarantees AMX.
    unsafe { std::arch::asm!("tilerelease", options(nostack)) };
}

/// The tile instructions of the kernel, over tiles named by number (all
/// configured by [`begin`] as 16 rows × 64 bytes). [`Asm`] runs them; the
/// tests run the same kernel, pointer arithmetic included, on a software
/// model of the tiles (Intel's pseudocode), since the build machine has no
/// AMX.
#[cfg(target_arch = "x86_64")]
pub(super) trait TileOps {
    /// `tileloadd tmm{T}, [base + stride]`: row `r` from `base + r·stride`.
    ///
    /// # Safety
    /// 16 rows of 64 bytes readable there.
    unsafe fn load<const T: usize>(&mut self, base: *const u8, stride: usize);
    /// `tilestored [base + stride], tmm{T}`.
    ///
    /// # Safety
    /// 16 rows of 64 bytes writable there.
    unsafe fn store<const T: usize>(&mut self, base: *mut u8, stride: usize);
    /// `tilezero tmm{T}`.
    ///
    /// # Safety
    /// The tiles were configured by [`begin`] (real tiles).
    unsafe fn zero<const T: usize>(&mut self);
    /// `tdpbusd tmm{C}, tmm{A}, tmm{B}` (u8 A × s8 B → i32), or
    /// `tdpbf16ps` (bf16 pairs → f32) when `BF16`.
    ///
    /// # Safety
    /// The tiles were configured by [`begin`] (real tiles).
    unsafe fn dot<const BF16: bool, const C: usize, const A: usize, const B: usize>(&mut self);
}

/// The real tile instructions. Every block is volatile without memory
/// options, so the compiler keeps them in program order with respect to
/// each other and to every memory access (it knows nothing of tiles).
#[cfg(target_arch = "x86_64")]
pub(super) struct Asm;

#[cfg(target_arch = "x86_64")]
impl TileOps for Asm {
    unsafe fn load<const T: usize>(&mut self, base: *const u8, stride: usize) {
        // SAFETY: forwarded from the caller.
        unsafe {
            std::arch::asm!(
                "tileloadd tmm{t}, [{base} + {stride}*1]",
                t = const T,
                base = in(reg) base,
                stride = in(reg) stride,
                options(nostack),
            );
        }
    }
    unsafe fn store<const T: usize>(&mut self, base: *mut u8, stride: usize) {
        // SAFETY: forwarded from the caller.
        unsafe {
            std::arch::asm!(
                "tilestored [{base} + {stride}*1], tmm{t}",
                t = const T,
                base = in(reg) base,
                stride = in(reg) stride,
                options(nostack),
            );
        }
    }
    unsafe fn zero<const T: usize>(&mut self) {
        // SAFETY: forwarded from the caller.
        unsafe { std::arch::asm!("tilezero tmm{t}", t = const T, options(nostack)) };
    }
    unsafe fn dot<const BF16: bool, const C: usize, const A: usize, const B: usize>(&mut self) {
        // SAFETY: forwarded from the caller. Intel operand order: the
        // destination, then A (rows × depth; unsigned for tdpbusd), then
        // B (depth groups × columns; signed).
        unsafe {
            if BF16 {
                std::arch::asm!(
                    "tdpbf16ps tmm{c}, tmm{a}, tmm{b}",
                    c = const C, a = const A, b = const B,
                    options(nostack),
                );
            } else {
                std::arch::asm!(
                    "tdpbusd tmm{c}, tmm{a}, tmm{b}",
                    c = const C, a = const A, b = const B,
                    options(nostack),
                );
            }
        }
    }
}

/// A 32 × 16·NP block of C (i32 for int8, f32 for `BF16`) on real tiles.
///
/// # Safety
/// AMX with the configuration of [`begin`] loaded on this thread; `t` as in
/// [`tile_with`].
#[cfg(target_arch = "x86_64")]
unsafe fn tile<const BF16: bool, const NP: usize>(t: &super::grouped::Tile) {
    // SAFETY: forwarded from the caller.
    unsafe { tile_with::<Asm, BF16, NP>(&mut Asm, t) }
}

/// The block kernel over any [`TileOps`]: tmm0/tmm2 (and tmm1/tmm3 when
/// NP = 2) start from C or from the column start values (a stride-0 load
/// repeats one 64-byte row), then each depth step of 16 groups loads A rows
/// 0–15 (tmm4) and 16–31 (tmm5) and 16 B rows per panel (tmm6, tmm7) and
/// multiplies; the tiles are stored back to C.
///
/// # Safety
/// `t` as in `grouped::Tile`, A packed by `pack_a_rows` with `mr = 32`
/// (row stride `16·ceil(groups/16)·4` bytes), the B panels holding
/// `16·ceil(groups/16)` rows from `t.b`; with real tiles, as for [`tile`].
pub(super) unsafe fn tile_with<O: TileOps, const BF16: bool, const NP: usize>(
    ops: &mut O,
    t: &super::grouped::Tile,
) {
    let steps = t.groups.div_ceil(16);
    // Row stride of packed A: whole tiles of depth (`pack_a_rows`).
    let sa = steps * 64;
    let ldc = t.ldc * 4;
    // SAFETY: forwarded from the caller; every tile load and store below
    // covers 16 rows × 64 bytes inside the buffers it names.
    unsafe {
        let c0 = t.c.cast::<u8>();
        let c1 = t.c.add(16 * t.ldc).cast::<u8>();
        let (lo, hi, ld) = if t.load_c {
            (c0.cast_const(), c1.cast_const(), ldc)
        } else {
            (t.init.cast::<u8>(), t.init.cast::<u8>(), 0)
        };
        ops.load::<0>(lo, ld);
        ops.load::<2>(hi, ld);
        if NP == 2 {
            ops.load::<1>(lo.add(64), ld);
            ops.load::<3>(hi.add(64), ld);
        }
        let mut a = t.a;
        let mut b = t.b;
        for _ in 0..steps {
            ops.load::<4>(a, sa);
            ops.load::<5>(a.add(16 * sa), sa);
            ops.load::<6>(b, 64);
            ops.dot::<BF16, 0, 4, 6>();
            ops.dot::<BF16, 2, 5, 6>();
            if NP == 2 {
                ops.load::<7>(b.add(t.bstride), 64);
                ops.dot::<BF16, 1, 4, 7>();
                ops.dot::<BF16, 3, 5, 7>();
            }
            a = a.add(64);
            b = b.add(16 * 64);
        }
        ops.store::<0>(c0, ldc);
        ops.store::<2>(c1, ldc);
        if NP == 2 {
            ops.store::<1>(c0.add(64), ldc);
            ops.store::<3>(c1.add(64), ldc);
        }
    }
}
