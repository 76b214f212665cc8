//! Softmax (and log-softmax) and layer normalization over the rows of a
//! row-major matrix, built on the row-group machinery of `row`. The
//! formulas are the CPU's (`aoc_runtime::kernels::norm`) operation by
//! operation.
//!
//! Invariants:
//! - Softmax's row maximum ignores NaN (`maxnum`, as the CPU's `v > m`); the
//!   sum then carries it. `exp` and `log` are `pointwise::math`'s
//!   `@aoc.exp` and `@aoc.log`.
//! - Layer norm's variance is clamped with `maxnum(var, 0)`, which, like
//!   Rust's `max`, also turns a NaN variance into 0.
//! - Softmax uses two reduction slots, layer norm three (one for the mean,
//!   two for the deviations' sums).

use super::kernel::{Kernel, Op};
use super::row::{Elem, RowPlan};
use crate::irtext::{ModuleText, f32_lit};
use crate::kernels::{GemmEpilogue, Geometry, HalfCopy};
use crate::pointwise::define_epilogue_of;
use crate::pointwise::math::{self, MathFn};

/// Softmax (`log`: log-softmax) over each `cols`-long row of the row-major
/// `rows × cols` matrix `x` into `y`: `y = exp(x − max) / Σ exp(x − max)`,
/// or `(x − max) − ln Σ exp(x − max)`. Parameters `(x, y)`.
pub fn softmax(
    m: &mut ModuleText,
    name: &str,
    rows: u64,
    cols: u64,
    log: bool,
) -> Result<Geometry, String> {
    let mut k = Kernel::new(m, name)?;
    if rows == 0 || cols == 0 {
        return Ok(k.empty(2));
    }
    let plan = RowPlan::norm(rows, cols)?;
    math::define(k.m, MathFn::Exp);
    if log {
        math::define(k.m, MathFn::Log);
    }
    let r = k.rows(plan, 2);
    let mut src = k.row_src(&r, "%p0");
    let mx = k.row_reduce(&r, &mut src, &[Op::MaxNum], 0, |_, e| vec![e.x.clone()]);
    let d = |k: &mut Kernel, e: &mut Elem| {
        k.memo(e, "d", |k, e| k.v(format!("fsub float {}, {}", e.x, mx[0])))
    };
    let exp = |k: &mut Kernel, e: &mut Elem| {
        let d = d(k, e);
        k.memo(e, "e", |k, _| {
            k.v(format!("call float @aoc.exp(float {d})"))
        })
    };
    let s = k.row_reduce(&r, &mut src, &[Op::Sum], 1, |k, e| vec![exp(k, e)]);
    if log {
        let ls = k.v(format!("call float @aoc.log(float {})", s[0]));
        k.row_write(&r, &mut src, "%p1", |k, e| {
            let d = d(k, e);
            k.v(format!("fsub float {d}, {ls}"))
        });
    } else {
        let inv = k.v(format!("fdiv float 1.0, {}", s[0]));
        k.row_write(&r, &mut src, "%p1", |k, e| {
            let x = exp(k, e);
            k.v(format!("fmul float {x}, {inv}"))
        });
    }
    k.finish(2);
    Ok(plan.geometry())
}

/// Layer normalization of each `cols`-long row of the row-major `rows ×
/// cols` matrix `x` into `y`: `(x − mean) / sqrt(var + epsilon) · gamma +
/// beta` with the population variance, computed as the CPU kernel does: a
/// first mean `m0`, deviations `d = x − m0`, `δ = Σd / n`,
/// `var = max((Σd² − (Σd)²/n) / n, 0)`, `y = (d − δ)·rstd·gamma + beta`.
/// Parameters `(x, gamma, beta, y)`, `gamma`/`beta` only when asked for
/// (`cols` values each; absent they mean 1 and 0).
pub fn layer_norm(
    m: &mut ModuleText,
    name: &str,
    rows: u64,
    cols: u64,
    epsilon: f32,
    gamma: bool,
    beta: bool,
) -> Result<Geometry, String> {
    layer_norm_with(m, name, rows, cols, epsilon, gamma, beta, None)
}

/// [`layer_norm`] followed by a quantization: `epi` (a pointwise kernel
/// of `y` alone, as a GEMM epilogue: operand 0 the f32 value, no other
/// operand, an 8-bit result) also stores its byte at each element through
/// one more parameter after `y`; `y` itself is stored only with `keep_f32`
/// (a later step reads it). One launch instead of the layer norm and the
/// quantize reading its f32 output again.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_quant(
    m: &mut ModuleText,
    name: &str,
    rows: u64,
    cols: u64,
    epsilon: f32,
    gamma: bool,
    beta: bool,
    epi: &GemmEpilogue,
    keep_f32: bool,
) -> Result<Geometry, String> {
    layer_norm_bytes(m, name, rows, cols, epsilon, gamma, beta, None, Some((epi, keep_f32)))
}

/// The general form: with `dq`, `x` is passed as 8-bit integers (one per
/// element, at its f32 element offsets) and each is dequantized by `dq` (a
/// pointwise kernel of the byte alone giving f32, as a GEMM epilogue
/// without other operands) as it is loaded: the layer norm of the
/// dequantized tensor from a quarter of the bytes. With `quant`, the
/// quantized output as in [`layer_norm_quant`].
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_bytes(
    m: &mut ModuleText,
    name: &str,
    rows: u64,
    cols: u64,
    epsilon: f32,
    gamma: bool,
    beta: bool,
    dq: Option<&GemmEpilogue>,
    quant: Option<(&GemmEpilogue, bool)>,
) -> Result<Geometry, String> {
    let byte_in = match dq {
        Some(dq) => {
            let signed = crate::kernels::gemm_epilogue::check_dequantization(dq, "a layer norm's input")?;
            let f = format!("{name}_dq");
            define_epilogue_of(m, &f, dq)?;
            Some((f, signed))
        }
        None => None,
    };
    let byte_out = match quant {
        Some((epi, keep_f32)) => {
            crate::kernels::gemm_epilogue::check_quantization(epi, "a layer norm")?;
            let f = format!("{name}_q");
            define_epilogue_of(m, &f, epi)?;
            Some((f, keep_f32))
        }
        None => None,
    };
    layer_norm_impl(m, name, (rows, cols, epsilon, gamma, beta), None, byte_out, byte_in)
}

/// [`layer_norm`] that also writes a [`HalfCopy`] of `y` through one more
/// parameter after `y`, when `half` asks for it.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_with(
    m: &mut ModuleText,
    name: &str,
    rows: u64,
    cols: u64,
    epsilon: f32,
    gamma: bool,
    beta: bool,
    half: Option<HalfCopy>,
) -> Result<Geometry, String> {
    layer_norm_impl(m, name, (rows, cols, epsilon, gamma, beta), half, None, None)
}

/// The layer norm kernel with at most one second output: a half copy, or
/// a quantizing function's bytes (its name, and whether `y` is stored);
/// with `byte_in`, x read as bytes and dequantized by the function named.
fn layer_norm_impl(
    m: &mut ModuleText,
    name: &str,
    (rows, cols, epsilon, gamma, beta): (u64, u64, f32, bool, bool),
    half: Option<HalfCopy>,
    byte_out: Option<(String, bool)>,
    byte_in: Option<(String, bool)>,
) -> Result<Geometry, String> {
    let mut k = Kernel::new(m, name)?;
    k.byte_in = byte_in;
    let second = half.is_some() || byte_out.is_some();
    let params = 2 + usize::from(gamma) + usize::from(beta) + usize::from(second);
    if rows == 0 || cols == 0 {
        return Ok(k.empty(params));
    }
    let plan = RowPlan::norm(rows, cols)?;
    let r = k.rows(plan, 3);
    let pg = gamma.then_some("%p1");
    let pb = beta.then(|| format!("%p{}", 1 + usize::from(gamma)));
    let n = f32_lit(cols as f32);
    let mut src = k.row_src(&r, "%p0");
    let s = k.row_reduce(&r, &mut src, &[Op::Sum], 0, |_, e| vec![e.x.clone()]);
    let m0 = k.v(format!("fdiv float {}, {n}", s[0]));
    let d = |k: &mut Kernel, e: &mut Elem| {
        k.memo(e, "d", |k, e| k.v(format!("fsub float {}, {m0}", e.x)))
    };
    let sums = k.row_reduce(&r, &mut src, &[Op::Sum, Op::Sum], 1, |k, e| {
        let d = d(k, e);
        vec![d.clone(), k.v(format!("fmul float {d}, {d}"))]
    });
    let (sd, sd2) = (&sums[0], &sums[1]);
    let delta = k.v(format!("fdiv float {sd}, {n}"));
    let q = k.v(format!("fmul float {sd}, {sd}"));
    let q = k.v(format!("fdiv float {q}, {n}"));
    let q = k.v(format!("fsub float {sd2}, {q}"));
    let var = k.v(format!("fdiv float {q}, {n}"));
    // `maxnum`, as Rust's `max`, also turns a NaN variance into 0.
    let var = k.call2("maxnum.f32", "float", &var, "0.0");
    let ve = k.v(format!("fadd float {var}, {}", f32_lit(epsilon)));
    k.m.declare("declare float @llvm.sqrt.f32(float)");
    let sq = k.v(format!("call float @llvm.sqrt.f32(float {ve})"));
    let rstd = k.v(format!("fdiv float 1.0, {sq}"));
    let y = params - 1 - usize::from(second);
    k.half = half.map(|h| (h, format!("%p{}", params - 1)));
    k.byte_out = byte_out.map(|(f, keep)| (f, format!("%p{}", params - 1), keep));
    k.row_write(&r, &mut src, &format!("%p{y}"), |k, e| {
        let d = d(k, e);
        let t = k.v(format!("fsub float {d}, {delta}"));
        let mut o = k.v(format!("fmul float {t}, {rstd}"));
        if let Some(pg) = pg {
            let gv = k.load(pg, "i64", &e.c);
            o = k.v(format!("fmul float {o}, {gv}"));
        }
        if let Some(pb) = &pb {
            let bv = k.load(pb, "i64", &e.c);
            o = k.v(format!("fadd float {o}, {bv}"));
        }
        o
    });
    k.finish(params);
    Ok(plan.geometry())
}
