//! Loading and calling the pointwise kernels the x86 backend generates
//! (Cranelift machine code stored as blobs in the artifact).
//!
//! Invariants:
//! - A kernel blob is position independent and has no relocations: the only
//!   outside code it reaches is the [`MathTable`] whose address the caller
//!   passes, so loading is a copy into fresh executable memory.
//! - The table's layout is part of the ABI: the code generator reads the
//!   function pointers at the `MATH_*_OFFSET` byte offsets of
//!   `aoc_plan::jit_abi` (re-exported here), and a test checks them against
//!   the real layout.
//! - A [`LoadedKernel`] owns its executable memory, so the entry point stays
//!   valid for as long as the kernel value lives.
//! - The table's transcendental functions (`math.rs`, over the lane types of
//!   `lanes.rs`) are branch-free f32 polynomials with one scalar and one
//!   `f32x4` entry each. Every entry runs the SSE2 instance, or the AVX+FMA
//!   instance where the CPU has those (decided once per process), so on a
//!   given machine the two entries of a function agree lane for lane and a
//!   kernel's scalar tail matches its vector body.
//!
//! The ABI of a kernel, [`KernelFn`]: `(args, row_start, row_end, math)`,
//! where `args` holds the operands' base pointers and then the output's; the
//! kernel computes the output rows `row_start..row_end` (see
//! `aoc_backend_x86::expr` for the element semantics).

use memmap2::{Mmap, MmapMut};

pub(crate) mod lanes;
pub(crate) mod math;

#[cfg(target_arch = "x86_64")]
use std::sync::atomic::{AtomicU8, Ordering};

#[cfg(not(target_arch = "x86_64"))]
use lanes::Unfused;

/// Four f32 lanes passed by value in one SSE register: on x86-64 SystemV an
/// `__m128` argument and result travel in `xmm0`, where Cranelift passes
/// and returns an `f32x4` value, so generated code calls the vector entries
/// without a trip through memory.
#[cfg(target_arch = "x86_64")]
pub type F32x4 = std::arch::x86_64::__m128;

/// Four f32 lanes (other targets run no generated code; the type only keeps
/// the table's shape).
#[cfg(not(target_arch = "x86_64"))]
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug)]
pub struct F32x4(pub [f32; 4]);

/// The math functions Cranelift has no instruction for; generated code calls
/// them through the pointer it gets as its last argument. The scalar entries
/// serve scalar loops and vector tails, the `*4` entries the `f32x4` loops
/// (one call per vector); a scalar entry returns bit for bit (NaN payloads
/// aside) what its vector entry returns in each lane. Accuracy: `exp` and
/// `log` within 4 ulp, `tanh`, `erf` and `sigmoid` within 2e-7 absolute
/// (see `math.rs`); `pow` is std's.
// The lint calls `__m128` not FFI-safe because Rust gives SIMD types no C
// ABI guarantee in general; on x86-64 SystemV (the only target that runs
// generated code) rustc passes and returns it in `xmm0`, as the psABI's
// `__m128` and Cranelift's `f32x4` are, and the backend's tests call these
// entries from generated code.
#[allow(improper_ctypes_definitions)]
#[repr(C)]
pub struct MathTable {
    pub exp: extern "C" fn(f32) -> f32,
    pub log: extern "C" fn(f32) -> f32,
    pub tanh: extern "C" fn(f32) -> f32,
    pub erf: extern "C" fn(f32) -> f32,
    pub pow: extern "C" fn(f32, f32) -> f32,
    /// `1 / (1 + exp(-x))`.
    pub sigmoid: extern "C" fn(f32) -> f32,
    pub exp4: extern "C" fn(F32x4) -> F32x4,
    pub log4: extern "C" fn(F32x4) -> F32x4,
    pub tanh4: extern "C" fn(F32x4) -> F32x4,
    pub erf4: extern "C" fn(F32x4) -> F32x4,
    pub sigmoid4: extern "C" fn(F32x4) -> F32x4,
    pub sin: extern "C" fn(f32) -> f32,
    pub cos: extern "C" fn(f32) -> f32,
}

/// Byte offsets of the [`MathTable`] fields: part of the contract with the
/// code generator, so they live in `aoc_plan::jit_abi` (one definition) and
/// the test below checks them against this struct.
pub use aoc_plan::jit_abi::{
    MATH_ERF_OFFSET, MATH_ERF4_OFFSET, MATH_EXP_OFFSET, MATH_EXP4_OFFSET, MATH_LOG_OFFSET,
    MATH_LOG4_OFFSET, MATH_POW_OFFSET, MATH_SIGMOID_OFFSET, MATH_SIGMOID4_OFFSET, MATH_TANH_OFFSET,
    MATH_TANH4_OFFSET, MATH_SIN_OFFSET, MATH_COS_OFFSET,
};

/// The table every kernel call gets.
pub static MATH: MathTable = MathTable {
    exp: math_exp,
    log: math_log,
    tanh: math_tanh,
    erf: math_erf,
    pow: math_pow,
    sigmoid: math_sigmoid,
    exp4: math_exp4,
    log4: math_log4,
    tanh4: math_tanh4,
    erf4: math_erf4,
    sigmoid4: math_sigmoid4,
    sin: math_sin,
    cos: math_cos,
};

/// Which instances of the math functions the entries run: detected on the
/// first call, then one relaxed load per call.
#[cfg(target_arch = "x86_64")]
static INSTANCES: AtomicU8 = AtomicU8::new(UNKNOWN);
#[cfg(target_arch = "x86_64")]
const UNKNOWN: u8 = 0;
/// SSE2 code with separate multiplies and adds (any x86-64).
#[cfg(target_arch = "x86_64")]
const PLAIN: u8 = 1;
/// AVX code with fused multiply-adds.
#[cfg(target_arch = "x86_64")]
const FUSED: u8 = 2;

/// Whether the CPU has AVX and FMA, for the fused instances.
#[cfg(target_arch = "x86_64")]
fn fused_ok() -> bool {
    std::arch::is_x86_feature_detected!("avx") && std::arch::is_x86_feature_detected!("fma")
}

/// Records which instances this CPU runs (racing first calls store the
/// same value).
#[cfg(target_arch = "x86_64")]
fn detect_instances() {
    let level = if fused_ok() { FUSED } else { PLAIN };
    INSTANCES.store(level, Ordering::Relaxed);
}

/// Defines the scalar and vector entries of functions of [`math`]. Each
/// runs the function's fused instance where the CPU has AVX and FMA and the
/// SSE2 one elsewhere, through a tail call after one check, so on one
/// machine both entries use the same instance and agree lane for lane.
macro_rules! entries {
    ($($scalar:ident, $vector:ident => $f:ident;)*) => {
        $(
            #[cfg(target_arch = "x86_64")]
            extern "C" fn $scalar(x: f32) -> f32 {
                match INSTANCES.load(Ordering::Relaxed) {
                    // SAFETY: `FUSED` is stored only where the CPU has the
                    // instances' target features.
                    FUSED => unsafe { fused::$scalar(x) },
                    PLAIN => plain::$scalar(x),
                    _ => first::$scalar(x),
                }
            }

            // `__m128` in `xmm0`; see `MathTable`.
            #[allow(improper_ctypes_definitions)]
            #[cfg(target_arch = "x86_64")]
            extern "C" fn $vector(x: F32x4) -> F32x4 {
                match INSTANCES.load(Ordering::Relaxed) {
                    // SAFETY: as above.
                    FUSED => unsafe { fused::$vector(x) },
                    PLAIN => plain::$vector(x),
                    _ => first::$vector(x),
                }
            }

            #[cfg(not(target_arch = "x86_64"))]
            extern "C" fn $scalar(x: f32) -> f32 {
                math::$f(Unfused, x)
            }

            #[cfg(not(target_arch = "x86_64"))]
            extern "C" fn $vector(x: F32x4) -> F32x4 {
                F32x4(x.0.map(|v| math::$f(Unfused, v)))
            }
        )*

        /// The first call of an entry: detects the instances, then calls
        /// the entry again (out of line, so the entries themselves need no
        /// stack frame).
        #[cfg(target_arch = "x86_64")]
        mod first {
            use super::F32x4;

            $(
                #[cold]
                #[inline(never)]
                pub(super) extern "C" fn $scalar(x: f32) -> f32 {
                    super::detect_instances();
                    super::$scalar(x)
                }

                #[allow(improper_ctypes_definitions)]
                #[cold]
                #[inline(never)]
                pub(super) extern "C" fn $vector(x: F32x4) -> F32x4 {
                    super::detect_instances();
                    super::$vector(x)
                }
            )*
        }

        /// The SSE2 instances (kept out of line, so the entries only
        /// dispatch).
        #[cfg(target_arch = "x86_64")]
        mod plain {
            use super::F32x4;
            use super::lanes::Unfused;
            use super::math;

            $(
                #[inline(never)]
                pub(super) extern "C" fn $scalar(x: f32) -> f32 {
                    math::$f(Unfused, x)
                }

                #[allow(improper_ctypes_definitions)]
                #[inline(never)]
                pub(super) extern "C" fn $vector(x: F32x4) -> F32x4 {
                    math::$f(Unfused, x)
                }
            )*
        }

        /// The instances for CPUs with AVX and FMA (VEX encoding, fused
        /// multiply-adds).
        #[cfg(target_arch = "x86_64")]
        mod fused {
            use super::F32x4;
            use super::lanes::Fused;
            use super::math;

            $(
                #[target_feature(enable = "avx,fma")]
                pub(super) extern "C" fn $scalar(x: f32) -> f32 {
                    // SAFETY: this function runs only where its target
                    // features, FMA among them, are present.
                    math::$f(unsafe { Fused::new() }, x)
                }

                #[allow(improper_ctypes_definitions)]
                #[target_feature(enable = "avx,fma")]
                pub(super) extern "C" fn $vector(x: F32x4) -> F32x4 {
                    // SAFETY: as above.
                    math::$f(unsafe { Fused::new() }, x)
                }
            )*
        }
    };
}

entries! {
    math_exp, math_exp4 => exp;
    math_log, math_log4 => log;
    math_tanh, math_tanh4 => tanh;
    math_erf, math_erf4 => erf;
    math_sigmoid, math_sigmoid4 => sigmoid;
}

extern "C" fn math_pow(x: f32, y: f32) -> f32 {
    x.powf(y)
}

/// Sine and cosine in f64, rounded once: the reference's values (it also
/// computes in f64), for every argument. Scalar: rotary and sinusoidal
/// position tables are small, so no vector form.
extern "C" fn math_sin(x: f32) -> f32 {
    (x as f64).sin() as f32
}

extern "C" fn math_cos(x: f32) -> f32 {
    (x as f64).cos() as f32
}

/// Terms of the Maclaurin series `erf(x) = x · Σ ERF_TAYLOR[n] · x^(2n)`,
/// `ERF_TAYLOR[n] = 2/√π · (-1)^n / (n! (2n+1))`. 28 terms reach 1e-14
/// relative at |x| = 2, where the largest term is about 1.5, so the
/// alternating signs cost no accuracy worth mentioning.
const ERF_TAYLOR: [f64; 28] = {
    let mut c = [0.0; 28];
    let mut fact = 1.0;
    let mut n = 0;
    while n < 28 {
        if n > 0 {
            fact *= n as f64;
        }
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        c[n] = std::f64::consts::FRAC_2_SQRT_PI * sign / (fact * (2 * n + 1) as f64);
        n += 1;
    }
    c
};

/// The error function in `f64`, accurate to about 1e-11 absolute: the
/// reference the fast f32 `erf` of the table is tested against (too slow to
/// call per element).
/// - `|x| < 2`: the Maclaurin series above (Horner in `x²`);
/// - `|x| >= 2`: `1 - erfc(x)`, erfc from its continued fraction
///   `exp(-x²)/√π / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))` cut at depth
///   20 (error < 6e-12 at x = 2, smaller beyond); infinities give ±1 and NaN
///   stays NaN.
pub fn erf_f64(x: f64) -> f64 {
    let ax = x.abs();
    if ax < 2.0 {
        let t = x * x;
        let mut p = 0.0;
        for c in ERF_TAYLOR.iter().rev() {
            p = p * t + c;
        }
        return x * p;
    }
    let mut t = ax;
    for k in (1..=20).rev() {
        t = ax + (k as f64 * 0.5) / t;
    }
    let erfc = (-ax * ax).exp() / (std::f64::consts::PI.sqrt() * t);
    (1.0 - erfc).copysign(x)
}

/// A kernel's entry point.
pub type KernelFn = unsafe extern "C" fn(*const *mut u8, u64, u64, *const MathTable);

/// One kernel's machine code in executable memory it owns.
pub struct LoadedKernel {
    map: Mmap,
}

impl LoadedKernel {
    /// Copies `code` into a fresh executable mapping.
    pub fn new(code: &[u8]) -> Result<LoadedKernel, String> {
        if code.is_empty() {
            return Err("kernel code is empty".to_string());
        }
        let mut map = MmapMut::map_anon(code.len())
            .map_err(|e| format!("cannot map {} bytes for kernel code: {e}", code.len()))?;
        map[..code.len()].copy_from_slice(code);
        let map = map
            .make_exec()
            .map_err(|e| format!("cannot make kernel code executable: {e}"))?;
        Ok(LoadedKernel { map })
    }

    /// The kernel's entry point; valid while `self` lives.
    pub fn entry(&self) -> KernelFn {
        // SAFETY: the mapping holds the machine code of a function with the
        // `KernelFn` ABI, starting at its first byte (the code generator's
        // contract); function and data pointers have the same size here.
        unsafe { std::mem::transmute::<*const u8, KernelFn>(self.map.as_ptr()) }
    }

    /// Runs rows `row_start..row_end` with the standard math table.
    ///
    /// # Safety
    /// `args` must hold one pointer per kernel operand and then the output
    /// pointer, each valid for every element the kernel's strides reach in
    /// those rows (reads for operands, writes for the output).
    pub unsafe fn call(&self, args: &[*mut u8], row_start: u64, row_end: u64) {
        // SAFETY: the caller vouches for `args`; the code is alive (`self`).
        unsafe { (self.entry())(args.as_ptr(), row_start, row_end, &MATH) }
    }
}

impl std::fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedKernel({} bytes)", self.map.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jit_math_offsets_match_layout() {
        let fields = [
            (std::mem::offset_of!(MathTable, exp), MATH_EXP_OFFSET),
            (std::mem::offset_of!(MathTable, log), MATH_LOG_OFFSET),
            (std::mem::offset_of!(MathTable, tanh), MATH_TANH_OFFSET),
            (std::mem::offset_of!(MathTable, erf), MATH_ERF_OFFSET),
            (std::mem::offset_of!(MathTable, pow), MATH_POW_OFFSET),
            (
                std::mem::offset_of!(MathTable, sigmoid),
                MATH_SIGMOID_OFFSET,
            ),
            (std::mem::offset_of!(MathTable, exp4), MATH_EXP4_OFFSET),
            (std::mem::offset_of!(MathTable, log4), MATH_LOG4_OFFSET),
            (std::mem::offset_of!(MathTable, tanh4), MATH_TANH4_OFFSET),
            (std::mem::offset_of!(MathTable, erf4), MATH_ERF4_OFFSET),
            (
                std::mem::offset_of!(MathTable, sigmoid4),
                MATH_SIGMOID4_OFFSET,
            ),
            (std::mem::offset_of!(MathTable, sin), MATH_SIN_OFFSET),
            (std::mem::offset_of!(MathTable, cos), MATH_COS_OFFSET),
        ];
        for (i, (real, constant)) in fields.into_iter().enumerate() {
            assert_eq!(real, constant as usize, "field {i}");
        }
        assert_eq!(std::mem::size_of::<MathTable>(), 104);
    }

    #[test]
    fn jit_loaded_kernel_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<LoadedKernel>();
    }

    #[test]
    fn jit_erf_matches_reference_values() {
        // Python's math.erf (correctly rounded libm values).
        let table = [
            (0.0, 0.0),
            (1e-8, 1.1283791670955126e-08),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (1.5, 0.9661051464753108),
            (1.9999, 0.9953201979070294),
            (2.0, 0.9953222650189527),
            (2.5, 0.999593047982555),
            (3.0, 0.9999779095030014),
            (4.0, 0.9999999845827421),
            (6.0, 1.0),
        ];
        for (x, want) in table {
            for s in [1.0, -1.0] {
                let got = erf_f64(s * x);
                assert!(
                    (got - s * want).abs() <= 1e-11,
                    "erf({}) = {got}, want {}",
                    s * x,
                    s * want
                );
                // The table's f32 erf is within 2e-7 (its contract;
                // rounding these inputs to f32 moves erf by < 2e-9).
                let got32 = (MATH.erf)((s * x) as f32) as f64;
                assert!(
                    (got32 - s * want).abs() <= 2e-7,
                    "f32 erf({}) = {got32}, want {}",
                    s * x,
                    s * want
                );
            }
        }
        assert_eq!(erf_f64(f64::INFINITY), 1.0);
        assert_eq!(erf_f64(f64::NEG_INFINITY), -1.0);
        assert!(erf_f64(f64::NAN).is_nan());
        // Both branches agree where they meet.
        assert!((erf_f64(1.999_999_999_9) - erf_f64(2.0)).abs() < 1e-11);
    }

    #[test]
    fn jit_math_table_functions() {
        // Spot checks of the contracts (the sweeps are in `math`'s tests):
        // exp and log within 4 ulp, the others within 2e-7.
        let ulp4 = |got: f32, want: f64| (got as f64 - want).abs() <= 4.0 * 1.2e-7 * want.abs();
        let abs = |got: f32, want: f64| (got as f64 - want).abs() <= 2e-7;
        for x in [-20.0f32, -1.5, -0.25, 0.0, 0.75, 1.0, 3.0, 30.0] {
            let xd = x as f64;
            assert!(ulp4((MATH.exp)(x), xd.exp()), "exp({x})");
            assert!(abs((MATH.tanh)(x), xd.tanh()), "tanh({x})");
            assert!(abs((MATH.erf)(x), erf_f64(xd)), "erf({x})");
            assert!(
                abs((MATH.sigmoid)(x), 1.0 / (1.0 + (-xd).exp())),
                "sigmoid({x})"
            );
            if x > 0.0 {
                assert!(ulp4((MATH.log)(x), xd.ln()), "log({x})");
                assert!(
                    (((MATH.pow)(x, 1.7) as f64) - xd.powf(1.7f32 as f64)).abs()
                        <= 6e-8 * xd.powf(1.7f32 as f64),
                    "pow({x})"
                );
            }
        }
        assert_eq!((MATH.exp)(1.0), std::f32::consts::E);
        assert_eq!((MATH.log)(std::f32::consts::E), 1.0);
        assert_eq!((MATH.pow)(2.0, 10.0), 1024.0);
        assert_eq!((MATH.pow)(9.0, 0.5), 3.0);
        assert_eq!((MATH.log)(0.0), f32::NEG_INFINITY);
    }

    /// Hand-assembled bytes prove the loaded memory executes with the
    /// kernel ABI (the code generator's own tests live in the backend).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn jit_loaded_code_runs() {
        // `mov rax, [rdi]; mov dword ptr [rax], 0x40490fdb; ret`: writes
        // 3.1415927f32 through the first argument pointer.
        let code = [0x48, 0x8b, 0x07, 0xc7, 0x00, 0xdb, 0x0f, 0x49, 0x40, 0xc3];
        let k = LoadedKernel::new(&code).unwrap();
        let mut out = 0.0f32;
        let args = [&mut out as *mut f32 as *mut u8];
        // SAFETY: the code writes one f32 through args[0], which is valid.
        unsafe { k.call(&args, 0, 1) };
        assert_eq!(out, std::f32::consts::PI);
        assert!(LoadedKernel::new(&[]).is_err());
    }
}
