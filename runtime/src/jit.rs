//! Loading and calling the pointwise kernels the x86 backend generates
//! (Cranelift machine code stored as blobs in the artifact).
//!
//! Invariants:
//! - A kernel blob is position independent and has no relocations: the only
//!   outside code it reaches is the [`MathTable`] whose address the caller
//!   passes, so loading is a copy into fresh executable memory.
//! - The table's layout is part of the ABI: the code generator reads the
//!   function pointers at the `MATH_*_OFFSET` byte offsets below, and a test
//!   checks them against the real layout.
//! - A [`LoadedKernel`] owns its executable memory, so the entry point stays
//!   valid for as long as the kernel value lives.
//!
//! The ABI of a kernel, [`KernelFn`]: `(args, row_start, row_end, math)`,
//! where `args` holds the operands' base pointers and then the output's; the
//! kernel computes the output rows `row_start..row_end` (see
//! `aoc_backend_x86::expr` for the element semantics).

use memmap2::{Mmap, MmapMut};

/// The math functions Cranelift has no instruction for; generated code calls
/// them through the pointer it gets as its last argument.
#[repr(C)]
pub struct MathTable {
    pub exp: extern "C" fn(f32) -> f32,
    pub log: extern "C" fn(f32) -> f32,
    pub tanh: extern "C" fn(f32) -> f32,
    pub erf: extern "C" fn(f32) -> f32,
    pub pow: extern "C" fn(f32, f32) -> f32,
}

/// Byte offsets of the [`MathTable`] fields (`i32`, as Cranelift's load
/// offsets are).
pub const MATH_EXP_OFFSET: i32 = 0;
pub const MATH_LOG_OFFSET: i32 = 8;
pub const MATH_TANH_OFFSET: i32 = 16;
pub const MATH_ERF_OFFSET: i32 = 24;
pub const MATH_POW_OFFSET: i32 = 32;

/// The table every kernel call gets.
pub static MATH: MathTable = MathTable {
    exp: math_exp,
    log: math_log,
    tanh: math_tanh,
    erf: math_erf,
    pow: math_pow,
};

extern "C" fn math_exp(x: f32) -> f32 {
    x.exp()
}

extern "C" fn math_log(x: f32) -> f32 {
    x.ln()
}

extern "C" fn math_tanh(x: f32) -> f32 {
    x.tanh()
}

extern "C" fn math_erf(x: f32) -> f32 {
    erf_f64(x as f64) as f32
}

extern "C" fn math_pow(x: f32, y: f32) -> f32 {
    x.powf(y)
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

/// The error function in `f64`, accurate to about 1e-11 absolute: ample
/// for an `f32` result and cheap enough to call per element.
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
        assert_eq!(
            std::mem::offset_of!(MathTable, exp),
            MATH_EXP_OFFSET as usize
        );
        assert_eq!(
            std::mem::offset_of!(MathTable, log),
            MATH_LOG_OFFSET as usize
        );
        assert_eq!(
            std::mem::offset_of!(MathTable, tanh),
            MATH_TANH_OFFSET as usize
        );
        assert_eq!(
            std::mem::offset_of!(MathTable, erf),
            MATH_ERF_OFFSET as usize
        );
        assert_eq!(
            std::mem::offset_of!(MathTable, pow),
            MATH_POW_OFFSET as usize
        );
        assert_eq!(std::mem::size_of::<MathTable>(), 40);
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
                let got32 = (MATH.erf)((s * x) as f32) as f64;
                // Rounding x and the result to f32 costs at most ~2^-23 relative.
                assert!(
                    (got32 - s * want).abs() <= 1.2e-7 * want.abs().max(1e-30) + 1e-45,
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
        // Each result within one f32 rounding of the f64 value.
        let close = |got: f32, want: f64| (got as f64 - want).abs() <= 6e-8 * want.abs();
        for x in [-20.0f32, -1.5, -0.25, 0.0, 0.75, 1.0, 3.0, 30.0] {
            assert!(close((MATH.exp)(x), (x as f64).exp()), "exp({x})");
            assert!(close((MATH.tanh)(x), (x as f64).tanh()), "tanh({x})");
            if x > 0.0 {
                assert!(close((MATH.log)(x), (x as f64).ln()), "log({x})");
                assert!(
                    close((MATH.pow)(x, 1.7), (x as f64).powf(1.7f32 as f64)),
                    "pow({x})"
                );
            }
        }
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
