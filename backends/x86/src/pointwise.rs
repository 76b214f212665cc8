//! Machine code for a [`PointwiseKernel`], generated with Cranelift.
//!
//! Code shape: an outer loop over the rows `row_start..row_end` (clamped to
//! the kernel's row count) computes each operand's row pointer once per row
//! (the row index split into the leading dimensions' indices by constant
//! division, dotted with the strides). The inner loop over the columns is
//! - SIMD (`f32x4`, the widest vector Cranelift's x86 backend has) when the
//!   output and every operand the expression reads are f32 and each of those
//!   operands has a last-dimension stride of 0 (splatted) or 1 (vector
//!   loads), followed by an unrolled scalar tail of `cols % 4` elements;
//! - scalar with strides otherwise, converting each load to f32 and the
//!   result to the output type.
//!
//! This file holds the API, the checks and the loop skeleton; `emit.rs` the
//! expressions and the element conversions.
//!
//! Invariants:
//! - The code is position independent and has no relocations: the math
//!   functions Cranelift lacks (`exp`, `log`, `tanh`, `erf`, `sigmoid`,
//!   `pow`) are called through the table pointer the kernel receives, at the
//!   byte offsets `aoc_plan::jit_abi` fixes, and rounding never becomes a
//!   libcall (the baseline level, without SSE4.1, rounds with a float trick
//!   instead). [`compile_pointwise`] checks the relocation list is empty.
//! - The vector loop calls the table's `f32x4` entries once per vector (the
//!   value travels in `xmm0` both ways, SystemV's `__m128` convention); only
//!   `pow`, which has no vector entry, is called lane by lane. Scalar code
//!   calls the scalar entries, which return what the vector entries return
//!   in each lane, so a row's tail matches its vector part.
//! - `max`/`min`/`relu` follow the reference interpreter: NaN propagates and
//!   ties return the first argument (so `relu(-0.0)` is `-0.0`), not
//!   Cranelift's `fmax`, which orders `-0.0 < 0.0`.
//! - Only expressions the result depends on are emitted, so a dead math call
//!   costs nothing.

use aoc_plan::jit_abi::{
    MATH_ERF_OFFSET, MATH_ERF4_OFFSET, MATH_EXP_OFFSET, MATH_EXP4_OFFSET, MATH_LOG_OFFSET,
    MATH_LOG4_OFFSET, MATH_POW_OFFSET, MATH_SIGMOID_OFFSET, MATH_SIGMOID4_OFFSET, MATH_TANH_OFFSET,
    MATH_TANH4_OFFSET, MATH_SIN_OFFSET, MATH_COS_OFFSET,
};
use cranelift::codegen::Context;
use cranelift::codegen::control::ControlPlane;
use cranelift::codegen::ir::{BlockArg, Function, SigRef, UserFuncName};
use cranelift::codegen::isa::{CallConv, OwnedTargetIsa, TargetFrontendConfig};
use cranelift::prelude::*;
use types::{F32, F32X4, I64};

use crate::expr::{Binary, Compute, Expr, PointwiseKernel, Unary};

mod emit;
use emit::Elem;

/// The x86-64 feature level code is generated for (the psABI levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum X86Level {
    /// x86-64: SSE2 only.
    Baseline,
    /// x86-64-v3: AVX, AVX2, FMA, BMI1/2, LZCNT, SSE4.2.
    V3,
    /// x86-64-v4: v3 plus AVX-512 F/DQ/VL.
    V4,
}

impl X86Level {
    pub const ALL: [X86Level; 3] = [X86Level::Baseline, X86Level::V3, X86Level::V4];

    /// The target name the driver accepts (`--target`).
    pub fn target_name(self) -> &'static str {
        match self {
            X86Level::Baseline => "x86-64",
            X86Level::V3 => "x86-64-v3",
            X86Level::V4 => "x86-64-v4",
        }
    }

    pub fn from_target_name(name: &str) -> Option<X86Level> {
        X86Level::ALL.into_iter().find(|l| l.target_name() == name)
    }

    /// The highest level the running CPU supports.
    pub fn host() -> X86Level {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let v3 = has!("avx")
                && has!("avx2")
                && has!("fma")
                && has!("bmi1")
                && has!("bmi2")
                && has!("lzcnt")
                && has!("sse4.2")
                && has!("popcnt");
            let v4 = v3 && has!("avx512f") && has!("avx512dq") && has!("avx512vl");
            if v4 {
                X86Level::V4
            } else if v3 {
                X86Level::V3
            } else {
                X86Level::Baseline
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            X86Level::Baseline
        }
    }

    /// Whether SSE4.1's `round` instructions are available.
    fn has_round(self) -> bool {
        match self {
            X86Level::Baseline => false,
            X86Level::V3 | X86Level::V4 => true,
        }
    }
}

/// Machine code for `k`: a position-independent function with the kernel ABI
/// of `crate::expr`, ready for `aoc_runtime::jit::LoadedKernel::new`.
pub fn compile_pointwise(k: &PointwiseKernel, level: X86Level) -> Result<Vec<u8>, String> {
    compile(k, level, false).map(|(code, _)| code)
}

/// The Cranelift IR of `k` as generated (before optimization), as text.
pub fn pointwise_clif(k: &PointwiseKernel, level: X86Level) -> Result<String, String> {
    let isa = target_isa(level)?;
    Ok(pointwise_function(k, level, isa.frontend_config())?
        .display()
        .to_string())
}

/// Cranelift's listing of the final machine instructions of `k` (its VCode
/// after register allocation), followed by the code size.
pub fn pointwise_asm(k: &PointwiseKernel, level: X86Level) -> Result<String, String> {
    let (code, vcode) = compile(k, level, true)?;
    Ok(format!(
        "{}; {} bytes\n",
        vcode.unwrap_or_default(),
        code.len()
    ))
}

fn target_isa(level: X86Level) -> Result<OwnedTargetIsa, String> {
    let err = |e: &dyn std::fmt::Display| format!("cannot configure cranelift for x86-64: {e}");
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(|e| err(&e))?;
    flags.set("is_pic", "true").map_err(|e| err(&e))?;
    let mut isa = isa::lookup_by_name("x86_64-unknown-linux-gnu").map_err(|e| err(&e))?;
    let features: &[&str] = match level {
        X86Level::Baseline => &[],
        X86Level::V3 => &["x86-64-v3", "has_avx"],
        X86Level::V4 => &["x86-64-v4", "has_avx", "has_avx512f"],
    };
    for f in features {
        isa.enable(f).map_err(|e| err(&e))?;
    }
    isa.finish(settings::Flags::new(flags)).map_err(|e| err(&e))
}

fn compile(
    k: &PointwiseKernel,
    level: X86Level,
    disasm: bool,
) -> Result<(Vec<u8>, Option<String>), String> {
    let isa = target_isa(level)?;
    let mut ctx = Context::for_function(pointwise_function(k, level, isa.frontend_config())?);
    ctx.set_disasm(disasm);
    let code = ctx
        .compile(&*isa, &mut ControlPlane::default())
        .map_err(|e| format!("cranelift failed: {:?}", e.inner))?;
    let relocs = code.buffer.relocs();
    if !relocs.is_empty() {
        return Err(format!(
            "generated code needs {} relocation(s) (first: {:?}); kernels must be self-contained",
            relocs.len(),
            relocs[0]
        ));
    }
    Ok((code.code_buffer().to_vec(), code.vcode.clone()))
}

/// A function of the runtime's math table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MathFn {
    Exp,
    Log,
    Tanh,
    Erf,
    Sigmoid,
    Pow,
    Sin,
    Cos,
}

impl MathFn {
    const ALL: [MathFn; 8] = [
        MathFn::Exp,
        MathFn::Log,
        MathFn::Tanh,
        MathFn::Erf,
        MathFn::Sigmoid,
        MathFn::Pow,
        MathFn::Sin,
        MathFn::Cos,
    ];

    /// Index into `Gen::scalar_fns` and `Gen::vector_fns`.
    fn slot(self) -> usize {
        self as usize
    }

    /// Byte offset of the scalar entry in the table.
    fn offset(self) -> i32 {
        match self {
            MathFn::Exp => MATH_EXP_OFFSET,
            MathFn::Log => MATH_LOG_OFFSET,
            MathFn::Tanh => MATH_TANH_OFFSET,
            MathFn::Erf => MATH_ERF_OFFSET,
            MathFn::Sigmoid => MATH_SIGMOID_OFFSET,
            MathFn::Pow => MATH_POW_OFFSET,
            MathFn::Sin => MATH_SIN_OFFSET,
            MathFn::Cos => MATH_COS_OFFSET,
        }
    }

    /// Byte offset of the `f32x4` entry, if the table has one.
    fn vector_offset(self) -> Option<i32> {
        match self {
            MathFn::Exp => Some(MATH_EXP4_OFFSET),
            MathFn::Log => Some(MATH_LOG4_OFFSET),
            MathFn::Tanh => Some(MATH_TANH4_OFFSET),
            MathFn::Erf => Some(MATH_ERF4_OFFSET),
            MathFn::Sigmoid => Some(MATH_SIGMOID4_OFFSET),
            // Scalar only: a vector kernel calls them lane by lane.
            MathFn::Pow | MathFn::Sin | MathFn::Cos => None,
        }
    }

    /// Whether the function takes two arguments.
    fn binary(self) -> bool {
        self == MathFn::Pow
    }

    /// The table function an expression calls, if any.
    fn of(e: &Expr) -> Option<MathFn> {
        match *e {
            Expr::Unary(Unary::Exp, _) => Some(MathFn::Exp),
            Expr::Unary(Unary::Log, _) => Some(MathFn::Log),
            Expr::Unary(Unary::Tanh, _) => Some(MathFn::Tanh),
            Expr::Unary(Unary::Erf, _) => Some(MathFn::Erf),
            Expr::Unary(Unary::Sigmoid, _) => Some(MathFn::Sigmoid),
            Expr::Binary(Binary::Pow, _, _) => Some(MathFn::Pow),
            Expr::Unary(Unary::Sin, _) => Some(MathFn::Sin),
            Expr::Unary(Unary::Cos, _) => Some(MathFn::Cos),
            Expr::Load(_)
            | Expr::Const(_)
            | Expr::Int(_)
            | Expr::Unary(..)
            | Expr::Binary(..)
            | Expr::Select(..) => None,
        }
    }
}


/// Builds the Cranelift function of `k` (checking `k` on the way).
fn pointwise_function(
    k: &PointwiseKernel,
    level: X86Level,
    target: TargetFrontendConfig,
) -> Result<Function, String> {
    if k.dims.is_empty() {
        return Err("kernel output must have at least one dimension".to_string());
    }
    let mut elems = Vec::with_capacity(k.operands.len());
    for (i, op) in k.operands.iter().enumerate() {
        if op.strides.len() != k.dims.len() {
            return Err(format!(
                "operand {i} must have {} strides, found {}",
                k.dims.len(),
                op.strides.len()
            ));
        }
        elems.push(Elem::of(op.dtype).map_err(|e| format!("operand {i}: {e}"))?);
    }
    let out = Elem::of(k.out_dtype).map_err(|e| format!("output: {e}"))?;
    let live = k.live_exprs()?;
    let mut used = vec![false; k.operands.len()];
    for (e, _) in k.exprs.iter().zip(&live).filter(|(_, l)| **l) {
        if let Expr::Load(op) = e {
            used[*op] = true;
        }
    }

    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.extend([AbiParam::new(I64); 4]);
    let mut func = Function::with_name_signature(UserFuncName::testcase(&k.name), sig);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let mut g = Gen {
        b: &mut b,
        k,
        level,
        elems,
        out,
        live,
        used,
        scalar_fns: [None; MathFn::ALL.len()],
        vector_fns: [None; MathFn::ALL.len()],
        sig_un: None,
        sig_bin: None,
        sig_vec: None,
    };
    g.build();
    b.seal_all_blocks();
    b.finalize(target);
    Ok(func)
}

fn mem() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// The generator of one kernel's function.
struct Gen<'a, 'f> {
    b: &'a mut FunctionBuilder<'f>,
    k: &'a PointwiseKernel,
    level: X86Level,
    elems: Vec<Elem>,
    out: Elem,
    live: Vec<bool>,
    /// Operands the live expressions load.
    used: Vec<bool>,
    /// Math table pointers, loaded once in the entry block (by
    /// `MathFn::slot`): the scalar entries and the `f32x4` entries.
    scalar_fns: [Option<Value>; MathFn::ALL.len()],
    vector_fns: [Option<Value>; MathFn::ALL.len()],
    /// `f32 -> f32`, `(f32, f32) -> f32` and `f32x4 -> f32x4`.
    sig_un: Option<SigRef>,
    sig_bin: Option<SigRef>,
    sig_vec: Option<SigRef>,
}

impl Gen<'_, '_> {
    /// The loop skeleton: entry, row loop, column loop(s), exit.
    fn build(&mut self) {
        let k = self.k;
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        let &[args, row_start, row_end, math] = self.b.block_params(entry) else {
            unreachable!("the signature has four parameters")
        };
        let cols = *k.dims.last().unwrap_or(&0);
        if k.dims.contains(&0) {
            // No elements: nothing to compute (and no division by zero).
            self.b.ins().return_(&[]);
            return;
        }
        let n = k.operands.len();
        let ptrs: Vec<Value> = (0..=n)
            .map(|i| self.b.ins().load(I64, mem(), args, (8 * i) as i32))
            .collect();
        let simd = self.simd_ok();
        // Which loops exist: the f32x4 loop, and scalar code (the scalar
        // loop, or the vector loop's tail).
        let vector_loop = simd && cols >= 4;
        let scalar_code = !simd || cols % 4 != 0;
        self.load_math_table(math, vector_loop, scalar_code);

        // Clamping to the row count keeps a bad range from writing out of
        // bounds.
        let rows = self.b.ins().iconst(I64, k.rows() as i64);
        let row_end = self.b.ins().umin(row_end, rows);
        let row = self.b.create_block();
        let r = self.b.append_block_param(row, I64);
        let exit = self.b.create_block();
        let any = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThan, row_start, row_end);
        self.b
            .ins()
            .brif(any, row, &[BlockArg::Value(row_start)], exit, &[]);

        self.b.switch_to_block(row);
        let offsets = self.row_offsets(r);
        let row_ptrs: Vec<Value> = (0..n)
            .map(|i| {
                let bytes = self.b.ins().imul_imm_s(offsets[i], self.elems[i].size());
                self.b.ins().iadd(ptrs[i], bytes)
            })
            .collect();
        let out_bytes = self.b.ins().imul_imm_s(r, cols as i64 * self.out.size());
        let out_ptr = self.b.ins().iadd(ptrs[n], out_bytes);
        let next = self.b.create_block();
        if simd {
            self.simd_cols(&row_ptrs, out_ptr, cols, next);
        } else {
            self.scalar_cols(&row_ptrs, out_ptr, cols, next);
        }

        self.b.switch_to_block(next);
        let r1 = self.b.ins().iadd_imm_s(r, 1);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, r1, row_end);
        self.b
            .ins()
            .brif(more, row, &[BlockArg::Value(r1)], exit, &[]);

        self.b.switch_to_block(exit);
        self.b.ins().return_(&[]);
    }

    /// Loads the table entries the live expressions call: the vector
    /// entries if the f32x4 loop exists, the scalar ones if scalar code does
    /// (or the vector loop needs one lane by lane).
    fn load_math_table(&mut self, math: Value, vector_loop: bool, scalar_code: bool) {
        for f in MathFn::ALL {
            let needed = self
                .k
                .exprs
                .iter()
                .zip(&self.live)
                .any(|(e, l)| *l && MathFn::of(e) == Some(f));
            if !needed {
                continue;
            }
            let vector = f.vector_offset().filter(|_| vector_loop);
            if let Some(off) = vector {
                self.vector_fns[f.slot()] = Some(self.b.ins().load(I64, mem(), math, off));
            }
            if scalar_code || (vector_loop && vector.is_none()) {
                self.scalar_fns[f.slot()] = Some(self.b.ins().load(I64, mem(), math, f.offset()));
            }
        }
        let sig = |ty: Type, params: usize| {
            let mut s = Signature::new(CallConv::SystemV);
            s.params
                .extend(std::iter::repeat_n(AbiParam::new(ty), params));
            s.returns.push(AbiParam::new(ty));
            s
        };
        let loaded = |fns: &[Option<Value>; MathFn::ALL.len()], binary: bool| {
            MathFn::ALL
                .iter()
                .any(|f| f.binary() == binary && fns[f.slot()].is_some())
        };
        if loaded(&self.scalar_fns, false) {
            self.sig_un = Some(self.b.import_signature(sig(F32, 1)));
        }
        if loaded(&self.scalar_fns, true) {
            self.sig_bin = Some(self.b.import_signature(sig(F32, 2)));
        }
        if loaded(&self.vector_fns, false) {
            self.sig_vec = Some(self.b.import_signature(sig(F32X4, 1)));
        }
    }

    /// Element offset of row `r`'s first element, per operand: the row
    /// index split into the leading dimensions' indices, dotted with the
    /// strides.
    fn row_offsets(&mut self, r: Value) -> Vec<Value> {
        let k = self.k;
        let last = k.dims.len() - 1;
        let zero = self.b.ins().iconst(I64, 0);
        let mut offs = vec![zero; k.operands.len()];
        let mut rem = r;
        for d in (0..last).rev() {
            let dim = k.dims[d];
            if dim == 1 {
                continue;
            }
            let idx = if d == 0 {
                rem
            } else {
                let idx = self.b.ins().urem_imm_u(rem, dim as i64);
                rem = self.b.ins().udiv_imm_u(rem, dim as i64);
                idx
            };
            for (i, op) in k.operands.iter().enumerate() {
                if op.strides[d] != 0 && self.used[i] {
                    let t = self.b.ins().imul_imm_s(idx, op.strides[d] as i64);
                    offs[i] = self.b.ins().iadd(offs[i], t);
                }
            }
        }
        offs
    }

    /// Whether the column loop can run on `f32x4` vectors.
    fn simd_ok(&self) -> bool {
        let last = self.k.dims.len() - 1;
        self.k.compute == Compute::F32
            && self.out == Elem::F32
            && self.k.operands.iter().enumerate().all(|(i, op)| {
                !self.used[i] || (self.elems[i] == Elem::F32 && op.strides[last] <= 1)
            })
    }

    fn last_stride(&self, i: usize) -> u64 {
        self.k.operands[i].strides[self.k.dims.len() - 1]
    }

    /// The used operands whose last-dimension stride satisfies `pred`.
    fn operands_with(&self, pred: impl Fn(u64) -> bool) -> Vec<usize> {
        (0..self.k.operands.len())
            .filter(|&i| self.used[i] && pred(self.last_stride(i)))
            .collect()
    }

    /// Vector loop over `cols / 4` groups, then an unrolled scalar tail.
    fn simd_cols(&mut self, row_ptrs: &[Value], out_ptr: Value, cols: u64, next: Block) {
        let n = row_ptrs.len();
        // Broadcast operands: one load per row.
        let mut scalars = vec![None; n];
        let mut splats = vec![None; n];
        for i in self.operands_with(|s| s == 0) {
            let s = self.b.ins().load(F32, mem(), row_ptrs[i], 0);
            scalars[i] = Some(s);
            splats[i] = Some(self.b.ins().splat(F32X4, s));
        }
        let nvec = cols / 4 * 4;
        if nvec > 0 {
            let body = self.b.create_block();
            let j = self.b.append_block_param(body, I64);
            let tail = self.b.create_block();
            let zero = self.b.ins().iconst(I64, 0);
            self.b.ins().jump(body, &[BlockArg::Value(zero)]);

            self.b.switch_to_block(body);
            let bytes = self.b.ins().ishl_imm_u(j, 2);
            let mut vals = splats.clone();
            for i in self.operands_with(|s| s == 1) {
                let p = self.b.ins().iadd(row_ptrs[i], bytes);
                vals[i] = Some(self.b.ins().load(F32X4, mem(), p, 0));
            }
            let y = self.exprs(F32X4, &vals);
            let p = self.b.ins().iadd(out_ptr, bytes);
            self.b.ins().store(mem(), y, p, 0);
            let j1 = self.b.ins().iadd_imm_s(j, 4);
            let more = self
                .b
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThan, j1, nvec as i64);
            self.b
                .ins()
                .brif(more, body, &[BlockArg::Value(j1)], tail, &[]);
            self.b.switch_to_block(tail);
        }
        for j in nvec..cols {
            let mut vals = scalars.clone();
            for i in self.operands_with(|s| s == 1) {
                let p = self.b.ins().iadd_imm_s(row_ptrs[i], 4 * j as i64);
                vals[i] = Some(self.b.ins().load(F32, mem(), p, 0));
            }
            let y = self.exprs(F32, &vals);
            let p = self.b.ins().iadd_imm_s(out_ptr, 4 * j as i64);
            self.b.ins().store(mem(), y, p, 0);
        }
        self.b.ins().jump(next, &[]);
    }

    /// One element at a time, any strides and element types.
    fn scalar_cols(&mut self, row_ptrs: &[Value], out_ptr: Value, cols: u64, next: Block) {
        let n = row_ptrs.len();
        let mut hoisted = vec![None; n];
        let int = self.k.compute == Compute::I64;
        for i in self.operands_with(|s| s == 0) {
            hoisted[i] = Some(if int {
                self.load_int(self.elems[i], row_ptrs[i])
            } else {
                self.load(self.elems[i], row_ptrs[i])
            });
        }
        let body = self.b.create_block();
        let j = self.b.append_block_param(body, I64);
        let zero = self.b.ins().iconst(I64, 0);
        self.b.ins().jump(body, &[BlockArg::Value(zero)]);

        self.b.switch_to_block(body);
        let mut vals = hoisted;
        for i in self.operands_with(|s| s != 0) {
            let step = self.last_stride(i) as i64 * self.elems[i].size();
            let bytes = self.b.ins().imul_imm_s(j, step);
            let p = self.b.ins().iadd(row_ptrs[i], bytes);
            vals[i] = Some(if int { self.load_int(self.elems[i], p) } else { self.load(self.elems[i], p) });
        }
        let bytes = self.b.ins().imul_imm_s(j, self.out.size());
        let p = self.b.ins().iadd(out_ptr, bytes);
        if int {
            let y = self.exprs_int(&vals);
            self.store_int(self.out, y, p);
        } else {
            let y = self.exprs(F32, &vals);
            self.store(self.out, y, p);
        }
        let j1 = self.b.ins().iadd_imm_s(j, 1);
        let more = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedLessThan, j1, cols as i64);
        self.b
            .ins()
            .brif(more, body, &[BlockArg::Value(j1)], next, &[]);
    }
}
