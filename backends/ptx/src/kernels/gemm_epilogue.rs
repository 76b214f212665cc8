//! The epilogue pieces that the tensor-core GEMMs share: where a thread's
//! `mma.sync` accumulators lie in the block tile ([`super::gemm_tc`],
//! [`super::gemm_s8`]), and for the f32 kernels ([`super::gemm_tc`],
//! [`super::gemm_wgmma`]) the [`GemmEpilogue`] checks, the extra kernel
//! parameters and the helper `@{name}_epi`, bias and relu on one
//! accumulator, the epilogue operands' element offsets, and the (pair)
//! stores of C. Free functions over the kernel's [`Body`], so the
//! generators emit the same text for the same work; each keeps its own
//! loops.

use super::{GemmEpilogue, GemmSpec};
use crate::irtext::{Body, ModuleText, f32_lit};
use aoc_ir::types::Scalar;
use aoc_plan::plan::QuantConv;
use crate::pointwise::define_epilogue;

/// The epilogue's helper function and its operands' strides `[b, i, j]`.
pub(crate) type EpiFn = (String, Vec<[u64; 3]>);

/// The first row and column (i32) of this thread's `mma.sync` m16n8
/// accumulators in a block tile at (`bm0`, `bn0`) that `warps_n` warps
/// across split into warp tiles of `wrows × wcols`: warp `w` takes warp
/// tile (`w / warps_n`, `w % warps_n`); in each m16n8 fragment, lane `l`
/// holds rows `l/4 (+ 8)`, columns `2·(l%4) (+ 1)`. Returns (lane, row0,
/// col0).
pub(crate) fn mma_origin(
    b: &mut Body,
    tid: &str,
    warps_n: u32,
    [wrows, wcols]: [u32; 2],
    bm0: &str,
    bn0: &str,
) -> (String, String, String) {
    let lane = b.v(format!("and i32 {tid}, 31"));
    let warp = b.v(format!("lshr i32 {tid}, 5"));
    let wm = b.v(format!("udiv i32 {warp}, {warps_n}"));
    let wn = b.v(format!("urem i32 {warp}, {warps_n}"));
    let g = b.v(format!("lshr i32 {lane}, 2"));
    let q = b.v(format!("and i32 {lane}, 3"));
    let q2 = b.v(format!("shl i32 {q}, 1"));
    let row0 = b.v(format!("mul i32 {wm}, {wrows}"));
    let row0 = b.v(format!("add i32 {row0}, {bm0}"));
    let row0 = b.v(format!("add i32 {row0}, {g}"));
    let col0 = b.v(format!("mul i32 {wn}, {wcols}"));
    let col0 = b.v(format!("add i32 {col0}, {bn0}"));
    let col0 = b.v(format!("add i32 {col0}, {q2}"));
    (lane, row0, col0)
}

/// Rejects an epilogue whose offsets could leave i64 (`define_epilogue`
/// checks the rest: operand count, types).
pub(crate) fn check(s: &GemmSpec, e: &GemmEpilogue) -> Result<(), String> {
    let last = [s.batch, s.m, s.n].map(|x| x.saturating_sub(1));
    for (k, st) in e.strides.iter().enumerate() {
        let most = (0..3).try_fold(0u64, |acc, d| acc.checked_add(last[d].checked_mul(st[d])?));
        if most.is_none_or(|x| x > i64::MAX as u64) {
            return Err(format!(
                "gemm epilogue operand {}: strides {st:?} overflow a 64-bit offset",
                k + 1
            ));
        }
    }
    Ok(())
}

/// Checks that `epi` quantizes one f32 value alone (operand 0 the value,
/// no other operand, an 8-bit integer or e4m3 result): the second output
/// a layer norm or an attention writes. `what` names the producer in the
/// error.
pub(crate) fn check_quantization(epi: &GemmEpilogue, what: &str) -> Result<(), String> {
    let k = &epi.kernel;
    if !epi.strides.is_empty()
        || k.operands.len() != 1
        || k.operands[0].dtype != Scalar::F32
        || !matches!(k.out_dtype, Scalar::U8 | Scalar::I8 | Scalar::F8E4M3FN)
    {
        return Err(format!("{what}'s quantization reads the f32 value alone and stores 8-bit integers or e4m3"));
    }
    Ok(())
}

/// Checks that `epi` is a dequantization of an 8-bit operand read alone
/// (operand 0 u8 or i8, an f32 result, no other operand), the form a
/// kernel reading bytes in place of f32 values (`what`) evaluates as it
/// loads them. Returns whether the bytes are signed.
pub(crate) fn check_dequantization(epi: &GemmEpilogue, what: &str) -> Result<bool, String> {
    let k = &epi.kernel;
    if !epi.strides.is_empty() || k.operands.len() != 1 || k.out_dtype != Scalar::F32 || k.compute != crate::expr::Compute::F32 {
        return Err(format!("{what}'s dequantization reads an 8-bit value alone and gives f32"));
    }
    match k.operands[0].dtype {
        Scalar::U8 => Ok(false),
        Scalar::I8 => Ok(true),
        other => Err(format!("{what}'s dequantization reads 8-bit integers, not {}", other.name())),
    }
}

/// The kernel's parameters `%p0 …` (A, B, bias if any, C; all read-only
/// but C) and the epilogue's operands `%e1 …` after C; with an epilogue,
/// defines its helper `@{name}_epi` and returns it. Called also for an
/// empty kernel, which does not call the helper: an invalid epilogue is an
/// error whatever the shape.
pub(crate) fn params(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    epi: Option<&GemmEpilogue>,
) -> Result<(Vec<String>, Option<EpiFn>), String> {
    let params = if spec.bias.is_some() { 4 } else { 3 };
    let mut sig: Vec<String> = (0..params)
        .map(|i| {
            let ro = if i + 1 < params { " readonly" } else { "" };
            format!("ptr addrspace(1) noalias{ro} %p{i}")
        })
        .collect();
    let epi_fn = epi.map(|e| {
        sig.extend(
            (1..=e.strides.len()).map(|k| format!("ptr addrspace(1) noalias readonly %e{k}")),
        );
        (format!("{name}_epi"), e.strides.clone())
    });
    if let (Some(e), Some((f, _))) = (epi, &epi_fn) {
        define_epilogue(m, f, e)?;
    }
    Ok((sig, epi_fn))
}

/// Accumulator value `x` plus `bias` (if any), then relu keeping NaN
/// ([`relu_keeping_nan`]). No `+ 0.0` without bias: it would turn -0.0
/// into 0.0.
pub(crate) fn bias_relu(b: &mut Body, x: String, bias: Option<&str>, relu: bool) -> String {
    let mut x = x;
    if let Some(bias) = bias {
        x = b.v(format!("fadd float {x}, {bias}"));
    }
    if relu {
        x = relu_keeping_nan(b, &x);
    }
    x
}

/// Relu that keeps NaN, as the interpreter's does: `llvm.maximum`
/// (`max.NaN.f32` on sm_80+), where `llvm.maxnum` would turn NaN into 0.
/// One instruction, no predicate, so the register-tiled GEMMs keep their
/// register budget (a compare and select per element spilled the 8x8 SIMT
/// tile). It differs from the interpreter only in the sign of zero for an
/// input of exactly -0.0 (maximum orders -0.0 below +0.0).
pub(crate) fn relu_keeping_nan(b: &mut Body, x: &str) -> String {
    b.v(format!("call float @llvm.maximum.f32(float {x}, float 0.0)"))
}

/// Per epilogue operand `k`, `bz·s0 + row0·s1 + col0·s2` (i64; the batch
/// term only where `bz`, an i64 batch index, is given) for this thread's
/// first row and column (i32); none without an epilogue. It may lie
/// outside the operand (row0 or col0 past the edge): only offsets of
/// stored elements are read, and the i64 arithmetic wraps back to them.
pub(crate) fn bases(
    b: &mut Body,
    epi: Option<&EpiFn>,
    bz: Option<&str>,
    row0: &str,
    col0: &str,
) -> Vec<String> {
    let Some((_, strides)) = epi else {
        return Vec::new();
    };
    let r = b.v(format!("zext i32 {row0} to i64"));
    let c = b.v(format!("zext i32 {col0} to i64"));
    // Strides as i64 bit patterns: a stride past i64 only multiplies an
    // index that is always 0 (checked with the spec).
    strides
        .iter()
        .map(|st| {
            let [s0, s1, s2] = st.map(|x| x as i64);
            let batch = bz.map(|bz| b.v(format!("mul i64 {bz}, {s0}")));
            let t = b.v(format!("mul i64 {r}, {s1}"));
            let o = match batch {
                Some(o) => b.v(format!("add i64 {o}, {t}")),
                None => t,
            };
            let t = b.v(format!("mul i64 {c}, {s2}"));
            b.v(format!("add i64 {o}, {t}"))
        })
        .collect()
}

/// `x`, the value of element (row0 + dr, col0 + dc), through the
/// epilogue `epi` (which must be given): operand `k` at
/// `base[k] + dr·s1 + dc·s2` (`base` from [`bases`]). The result is f32.
pub(crate) fn value(
    b: &mut Body,
    epi: Option<&EpiFn>,
    x: &str,
    base: &[String],
    dr: u64,
    dc: u64,
) -> String {
    value_as(b, epi, x, base, dr, dc, "float")
}

/// [`value`] of an epilogue whose result has LLVM type `ty`.
pub(crate) fn value_as(
    b: &mut Body,
    epi: Option<&EpiFn>,
    x: &str,
    base: &[String],
    dr: u64,
    dc: u64,
    ty: &str,
) -> String {
    let (f, strides) = epi.expect("an epilogue");
    let mut args = vec![format!("float {x}")];
    for (k, (o, [_, s1, s2])) in base.iter().zip(strides).enumerate() {
        // Where the element exists (the code runs), at most the largest
        // offset, which fits i64; elsewhere dead, and wrapping keeps
        // the generator from overflowing.
        let d = dr.wrapping_mul(*s1).wrapping_add(dc.wrapping_mul(*s2)) as i64;
        let o = b.v(format!("add i64 {o}, {d}"));
        args.push(format!("ptr addrspace(1) %e{}, i64 {o}", k + 1));
    }
    b.v(format!("call {ty} @{f}({})", args.join(", ")))
}

/// The store of `ys` (one element, or a pair as one 8-byte store) at `p`;
/// a pair's vector is built here, the store is returned for the caller to
/// place (inside its guard).
pub(crate) fn c_store(b: &mut Body, ys: &[String], p: &str) -> String {
    if let [y0, y1] = ys {
        let v = b.v(format!(
            "insertelement <2 x float> poison, float {y0}, i32 0"
        ));
        let v = b.v(format!("insertelement <2 x float> {v}, float {y1}, i32 1"));
        format!("store <2 x float> {v}, ptr addrspace(1) {p}, align 8")
    } else {
        format!("store float {}, ptr addrspace(1) {p}, align 4", ys[0])
    }
}

/// The e4m3 form of [`requantize`] (`QuantElem::E4M3`): f32 `acc` ·
/// `scale` + `shift` (one fma), clamped to `[y_min, y_max]` (a NaN stays
/// NaN), rounded to e4m3 (nearest even, saturating): the stored byte as
/// an i8. Needs `@llvm.fma.f32` declared.
pub(crate) fn requantize_e4m3(b: &mut Body, q: &QuantConv, acc: &str, [scale, shift]: [&str; 2]) -> String {
    let (lo, hi) = (f32_lit(q.y_min as f32), f32_lit(q.y_max as f32));
    let f = b.v(format!("call float @llvm.fma.f32(float {acc}, float {scale}, float {shift})"));
    let lt = b.v(format!("fcmp olt float {f}, {lo}"));
    let r = b.v(format!("select i1 {lt}, float {lo}, float {f}"));
    let gt = b.v(format!("fcmp ogt float {r}, {hi}"));
    let r = b.v(format!("select i1 {gt}, float {hi}, float {r}"));
    crate::irtext::f32_to_e4m3(b, &r)
}

/// Requantizes the s32 accumulator `acc` of an integer convolution's
/// output channel with its `[comp (i32), scale, shift (f32)]` as
/// `aoc_runtime::kernels::qconv::requantize` does (the contract in
/// [`super::gemm_s8`]'s doc): the stored value as an i32. Needs
/// `@llvm.fma.f32`, `@llvm.roundeven.f32` and `@llvm.fptosi.sat.i64.f32`
/// declared.
pub(crate) fn requantize(b: &mut Body, q: &QuantConv, acc: &str, [comp, scale, shift]: [&str; 3]) -> String {
    // The clamp bounds as the CPU computes them (rounded to f32).
    let lo = f32_lit((q.y_min as i64 - q.y_zero as i64) as f32);
    let hi = f32_lit((q.y_max as i64 - q.y_zero as i64) as f32);
    let a = b.v(format!("add i32 {acc}, {comp}"));
    let f = b.v(format!("sitofp i32 {a} to float"));
    let f = b.v(format!("call float @llvm.fma.f32(float {f}, float {scale}, float {shift})"));
    // Bounds exact in f32, inside i32, around 0 (8- and 16-bit outputs):
    // rounding and converting first (saturating, NaN to 0), then clamping
    // the integer gives the value below in 4 instructions instead of 13.
    let (lo_i, hi_i) = (q.y_min as i64 - q.y_zero as i64, q.y_max as i64 - q.y_zero as i64);
    if lo_i <= 0 && hi_i >= 0 && lo_i >= -(1 << 24) && hi_i <= 1 << 24 {
        let r = crate::irtext::f32_to_i32_sat(b, &f, true);
        let lt = b.v(format!("icmp slt i32 {r}, {lo_i}"));
        let r = b.v(format!("select i1 {lt}, i32 {lo_i}, i32 {r}"));
        let gt = b.v(format!("icmp sgt i32 {r}, {hi_i}"));
        let r = b.v(format!("select i1 {gt}, i32 {hi_i}, i32 {r}"));
        return b.v(format!("add i32 {r}, {}", q.y_zero));
    }
    let r = b.v(format!("call float @llvm.roundeven.f32(float {f})"));
    // `f32::clamp`: a NaN stays NaN (and converts to 0).
    let lt = b.v(format!("fcmp olt float {r}, {lo}"));
    let r = b.v(format!("select i1 {lt}, float {lo}, float {r}"));
    let gt = b.v(format!("fcmp ogt float {r}, {hi}"));
    let r = b.v(format!("select i1 {gt}, float {hi}, float {r}"));
    let r = b.v(format!("call i64 @llvm.fptosi.sat.i64.f32(float {r})"));
    let r = b.v(format!("add i64 {r}, {}", q.y_zero));
    b.v(format!("trunc i64 {r} to i32"))
}
