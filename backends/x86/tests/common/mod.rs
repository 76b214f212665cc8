//! Helpers shared by the pointwise kernel tests: test buffers as bytes,
//! kernel construction, and running a kernel at every level this CPU has.

// Each test crate uses a subset of the helpers.
#![allow(dead_code)]

use aoc_backend_x86::expr::{Operand, PointwiseKernel};
use aoc_backend_x86::pointwise::{X86Level, compile_pointwise};
use aoc_ir::types::Scalar;
use aoc_runtime::jit::LoadedKernel;

/// Little-endian element (de)serialization for test buffers.
pub trait Elem: Copy {
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
    const SIZE: usize;
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap())
            }
            const SIZE: usize = std::mem::size_of::<$t>();
        }
    )*};
}
elem!(f32, f64, i8, u8, i16, u16, i32, u32, i64, u64);

pub fn bytes<T: Elem>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for &x in v {
        x.put(&mut out);
    }
    out
}

pub fn values<T: Elem>(b: &[u8]) -> Vec<T> {
    b.chunks_exact(T::SIZE).map(T::get).collect()
}

pub fn contiguous(dims: &[u64]) -> Vec<u64> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

pub fn kernel(dims: &[u64], operands: &[(Scalar, Vec<u64>)], out_dtype: Scalar) -> PointwiseKernel {
    PointwiseKernel {
        name: "test".into(),
        dims: dims.to_vec(),
        operands: operands
            .iter()
            .map(|(dtype, strides)| Operand {
                dtype: *dtype,
                strides: strides.clone(),
            })
            .collect(),
        exprs: vec![],
        result: 0,
        out_dtype,
        compute: aoc_backend_x86::expr::Compute::F32,
    }
}

/// Sets `k.result` to the last pushed expression.
pub fn finish(mut k: PointwiseKernel) -> PointwiseKernel {
    k.result = k.exprs.len() - 1;
    k
}

/// Compiles `k` for every level and runs rows `rows` on each level this CPU
/// has, with `out` as the initial output buffer. Returns each run's output.
pub fn run_all(
    k: &PointwiseKernel,
    inputs: &[Vec<u8>],
    out: &[u8],
    rows: (u64, u64),
) -> Vec<(X86Level, Vec<u8>)> {
    let mut results = Vec::new();
    for level in X86Level::ALL {
        let code = compile_pointwise(k, level).unwrap_or_else(|e| panic!("{level:?}: {e}"));
        assert!(!code.is_empty());
        if level > X86Level::host() {
            // Cranelift often emits the same code for v4 as for v3; say so,
            // since then the v3 run covers it.
            let same = compile_pointwise(k, X86Level::V3).ok().as_ref() == Some(&code);
            eprintln!("{level:?}: compiled, not run (this CPU lacks it); same code as V3: {same}");
            continue;
        }
        let loaded = LoadedKernel::new(&code).unwrap();
        let mut ins = inputs.to_vec();
        let mut out = out.to_vec();
        let mut args: Vec<*mut u8> = ins.iter_mut().map(|v| v.as_mut_ptr()).collect();
        args.push(out.as_mut_ptr());
        // SAFETY: every buffer holds all elements the kernel's strides reach.
        unsafe { loaded.call(&args, rows.0, rows.1) };
        results.push((level, out));
    }
    assert!(!results.is_empty());
    results
}

/// Runs all rows with an f32 output and checks bit-exact equality.
pub fn check_f32(k: &PointwiseKernel, inputs: &[Vec<u8>], want: &[f32]) {
    let rows = k.rows();
    for (level, out) in run_all(k, inputs, &bytes(&vec![0f32; want.len()]), (0, rows)) {
        let got: Vec<f32> = values(&out);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
            assert!(same, "{level:?}: element {i}: got {g:?}, want {w:?}");
        }
    }
}
