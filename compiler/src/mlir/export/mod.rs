//! `.air` to MLIR: each function becomes a `func.func` of TOSA ops, built
//! operation by operation with melior's `OperationBuilder`, then verified
//! by MLIR before it is printed.
//!
//! What maps where (docs/mlir.md has the table): pointwise ops to TOSA
//! elementwise ops (float division to `arith.divf` and square root to
//! `math.sqrt`, which TOSA lacks); activations, normalizations and
//! reductions to short TOSA compositions; convolutions and pools to their
//! NHWC TOSA ops between transposes; matmuls to 3-D `tosa.matmul` between
//! reshapes; quantize/dequantize to `quant.qcast`/`quant.dcast`; an
//! integer op (`quant.conv2d`, ...) to exactly what it means — dequantize,
//! the float op, clamp, quantize; a fused op to its core and its epilogue
//! region's ops. Constants become `tosa.const` with `dense` values, or
//! `dense_resource` blobs above a size; quantized constants are their
//! stored integers behind a `quant.scast`.
//!
//! Invariant: the exported function computes what the aoc function
//! computes (same op order; only compositions round differently), and
//! nothing but MLIR-verified text leaves here.

mod compute;
mod pointwise;

use super::Mlir;
use super::types;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::interp::WeightSource;
use aoc_ir::ops::kind::{Conv, Form, Movement, Norm, OpKind, Pointwise, Reduce, Unary};
use aoc_ir::types::{Scalar, TensorType};
use aoc_ir::{Func, Module, OpId, Opcode, ValueId};
use melior::Context;
use melior::ir::attribute::{StringAttribute, TypeAttribute};
use melior::ir::block::BlockLike;
use melior::ir::operation::{OperationBuilder, OperationLike};
use melior::ir::r#type::FunctionType;
use melior::ir::RegionLike;
use melior::ir::{Attribute, Block, BlockRef, Identifier, Location, Region, Type, Value};
use std::collections::HashMap;

/// What `aoc export --format mlir` may choose.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Constants of more bytes than this become `dense_resource` blobs
    /// (printed once, in the file's resource section) instead of `dense`.
    pub resource_above: usize,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions { resource_above: 1 << 20 }
    }
}

/// Exports `module` as MLIR text. `file` and `source` (the `.air` text)
/// give the ops' `file:line:col` locations; `weights` provides the
/// constants the module keeps in weights files.
pub fn export_module(
    module: &Module,
    weights: &dyn WeightSource,
    file: &str,
    source: Option<&str>,
    opts: &ExportOptions,
) -> Result<String, String> {
    let m = Mlir::new();
    let ctx = &m.ctx;
    let mmod = melior::ir::Module::new(Location::new(ctx, file, 1, 1));
    for f in &module.funcs {
        let mut cx = Ex { ctx, file, source, weights, opts, block: None, vals: HashMap::new(), resources: 0 };
        cx.func(&mmod, f).map_err(|e| {
            let d = m.take_diagnostics();
            if d.is_empty() { e } else { format!("{e}\n{d}") }
        })?;
    }
    if !mmod.as_operation().verify() {
        return Err(format!(
            "error: the MLIR module aoc built does not verify; this is a bug in the exporter, please report it\n{}",
            m.take_diagnostics()
        ));
    }
    // With locations: `loc(...)` carries each op's `.air` line and name.
    let flags = melior::ir::operation::OperationPrintingFlags::new().enable_debug_info(true, false);
    let text = mmod.as_operation().to_string_with_flags(flags).map_err(internal)?;
    // What MLIR prints, MLIR must read back (mlir-opt reads the file).
    if melior::ir::Module::parse(ctx, &text).is_none() {
        return Err(format!(
            "error: MLIR does not read back the module aoc printed; this is a bug in the exporter, please report it\n{}",
            m.take_diagnostics()
        ));
    }
    Ok(format!("{}\n", text.trim_end()))
}

/// A value being built, with its aoc type (shapes drive every composition).
#[derive(Clone)]
struct V<'c, 'a> {
    v: Value<'c, 'a>,
    t: TensorType,
}

struct Ex<'c, 'a, 'w> {
    ctx: &'c Context,
    file: &'w str,
    source: Option<&'w str>,
    weights: &'w dyn WeightSource,
    opts: &'w ExportOptions,
    block: Option<BlockRef<'c, 'a>>,
    vals: HashMap<ValueId, V<'c, 'a>>,
    resources: usize,
}

type R<T> = Result<T, String>;

fn internal(what: impl std::fmt::Display) -> String {
    format!("error: internal error in the MLIR exporter: {what} (please report)")
}

/// A float as MLIR attribute text (always with a `.`; infinities as the
/// type's largest finite value, which is what clamps need).
fn flt(v: f64, s: Scalar) -> String {
    let v = if v.is_infinite() {
        let max = match s {
            Scalar::F16 => 65504.0,
            Scalar::BF16 => 3.3895313892515355e38,
            Scalar::F64 => f64::MAX,
            _ => f32::MAX as f64,
        };
        max.copysign(v)
    } else {
        v
    };
    format!("{v:.17e}")
}

fn mlir_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:02X}")),
        }
    }
    out.push('"');
    out
}

fn ints(attrs: &Attrs, name: &str) -> Vec<i64> {
    match attrs.get(name) {
        Some(Attr::Ints(v)) => v.clone(),
        _ => vec![],
    }
}

fn int(attrs: &Attrs, name: &str, default: i64) -> i64 {
    match attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    }
}

fn float(attrs: &Attrs, name: &str) -> Option<f64> {
    match attrs.get(name) {
        Some(Attr::Float(v)) => Some(*v),
        _ => None,
    }
}

fn boolean(attrs: &Attrs, name: &str) -> bool {
    matches!(attrs.get(name), Some(Attr::Bool(true)))
}

fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
            let y = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
            if x == 1 { y } else { x }
        })
        .collect()
}

fn norm_axis(axis: i64, rank: usize) -> usize {
    if axis < 0 { (axis + rank as i64).max(0) as usize } else { axis as usize }
}

impl<'c, 'a, 'w> Ex<'c, 'a, 'w> {
    fn block(&self) -> BlockRef<'c, 'a> {
        self.block.expect("a function body is being built")
    }

    fn attr(&self, text: &str) -> R<Attribute<'c>> {
        Attribute::parse(self.ctx, text).ok_or_else(|| internal(format!("MLIR does not parse the attribute `{text}`")))
    }

    fn loc(&self, l: &aoc_ir::Location) -> Location<'c> {
        let base = match (l.span, self.source) {
            (Some(span), Some(src)) if (span.start as usize) <= src.len() => {
                let (line, col) = aoc_ir::diag::line_col(src, span.start as usize);
                Location::new(self.ctx, self.file, line, col)
            }
            _ => Location::unknown(self.ctx),
        };
        match &l.name {
            Some(n) => Location::name(self.ctx, n, base),
            None => base,
        }
    }

    /// Appends one operation and returns its results.
    fn emit(
        &self,
        name: &str,
        operands: &[Value<'c, 'a>],
        results: &[Type<'c>],
        attrs: &[(&str, Attribute<'c>)],
        loc: Location<'c>,
    ) -> R<Vec<Value<'c, 'a>>> {
        let attrs: Vec<(Identifier<'c>, Attribute<'c>)> =
            attrs.iter().map(|(n, a)| (Identifier::new(self.ctx, n), *a)).collect();
        let op = OperationBuilder::new(name, loc)
            .add_operands(operands)
            .add_results(results)
            .add_attributes(&attrs)
            .build()
            .map_err(|e| internal(format!("{name}: {e}")))?;
        let op = self.block().append_operation(op);
        (0..op.result_count())
            .map(|i| op.result(i).map(Into::into).map_err(internal))
            .collect()
    }

    /// One op with one result of type `t`.
    fn op1(&self, name: &str, operands: &[&V<'c, 'a>], t: TensorType, attrs: &[(&str, Attribute<'c>)], loc: Location<'c>) -> R<V<'c, 'a>> {
        let ty = types::tensor(self.ctx, &t)?;
        let ops: Vec<Value<'c, 'a>> = operands.iter().map(|v| v.v).collect();
        let r = self.emit(name, &ops, &[ty], attrs, loc)?;
        Ok(V { v: r[0], t })
    }

    // ------------------------------------------------------------ functions

    fn func(&mut self, mmod: &'a melior::ir::Module<'c>, f: &Func) -> R<()> {
        let ctx = self.ctx;
        let floc = self.loc(&f.loc);
        let mut args = vec![];
        for &p in f.params() {
            args.push((types::tensor(ctx, f.ty(p)).map_err(|m| format!("{m} (parameter %{} of @{})", f.name_of(p), f.name))?, self.loc(&f.values[p].loc)));
        }
        let results: Vec<Type<'c>> = f.result_types.iter().enumerate().map(|(i, t)| types::tensor(ctx, t).map_err(|m| format!("{m} (result {i} of @{})", f.name))).collect::<R<_>>()?;
        let arg_types: Vec<Type<'c>> = args.iter().map(|a| a.0).collect();
        let fty = FunctionType::new(ctx, &arg_types, &results);
        let names = (0..f.params().len()).map(|i| format!("{{aoc.name = {}}}", mlir_string(f.param_name(i)))).collect::<Vec<_>>();
        let rnames = (0..f.results().len()).map(|i| format!("{{aoc.name = {}}}", mlir_string(f.result_name(i)))).collect::<Vec<_>>();
        let region = Region::new();
        region.append_block(Block::new(&args));
        let op = OperationBuilder::new("func.func", floc)
            .add_attributes(&[
                (Identifier::new(ctx, "sym_name"), StringAttribute::new(ctx, &f.name).into()),
                (Identifier::new(ctx, "function_type"), TypeAttribute::new(fty.into()).into()),
                (Identifier::new(ctx, "arg_attrs"), self.attr(&format!("[{}]", names.join(", ")))?),
                (Identifier::new(ctx, "res_attrs"), self.attr(&format!("[{}]", rnames.join(", ")))?),
            ])
            .add_regions([region])
            .build()
            .map_err(internal)?;
        let op = mmod.body().append_operation(op);
        let block = op.region(0).map_err(internal)?.first_block().ok_or_else(|| internal("func.func without a block"))?;
        self.block = Some(block);
        for (i, &p) in f.params().iter().enumerate() {
            let v: Value<'c, 'a> = block.argument(i).map_err(internal)?.into();
            self.vals.insert(p, V { v, t: f.ty(p).clone() });
        }
        for &op in &f.body.ops {
            // Errors from deep inside (a type MLIR cannot hold) get the op's place.
            self.op(f, op).map_err(|e| {
                let at = self.at(&f.ops[op]);
                if e.contains(&at) { e } else { format!("{e} (at {at})") }
            })?;
        }
        let rets: Vec<Value<'c, 'a>> = f.results().iter().map(|r| self.val(*r).map(|v| v.v)).collect::<R<_>>()?;
        self.emit("func.return", &rets, &[], &[], self.loc(&f.body.terminator_loc))?;
        Ok(())
    }

    /// The value of `v` when a `const` op defines it.
    fn constant(&self, f: &Func, v: ValueId) -> Option<aoc_ir::Tensor> {
        let op = &f.ops[f.def_op(v)?];
        if op.opcode != Opcode::Const {
            return None;
        }
        let ty = f.ty(v).clone();
        aoc_ir::interp::eval_op(Opcode::Const, &[], &op.attrs, &[ty], self.weights).ok()?.pop()
    }

    fn val(&self, v: ValueId) -> R<V<'c, 'a>> {
        self.vals.get(&v).cloned().ok_or_else(|| internal(format!("value {v:?} used before it was exported")))
    }

    /// `file:line:col: opname` of an op, for messages.
    fn at(&self, op: &aoc_ir::OpData) -> String {
        let mut s = op.opcode.name().to_string();
        if let (Some(span), Some(src)) = (op.loc.span, self.source) {
            let (l, c) = aoc_ir::diag::line_col(src, (span.start as usize).min(src.len()));
            s = format!("{}:{l}:{c}: {s}", self.file);
        } else if let Some(n) = &op.loc.name {
            s = format!("{s} (\"{n}\")");
        }
        s
    }

    /// Exports one op, recording its results.
    fn op(&mut self, f: &Func, id: OpId) -> R<()> {
        let op = &f.ops[id];
        let loc = self.loc(&op.loc);
        let at = self.at(op);
        let operands: Vec<V<'c, 'a>> = op.operands.iter().map(|&v| self.val(v)).collect::<R<_>>()?;
        let out = f.ty(op.results[0]).clone();
        let attrs = &op.attrs;
        let unsupported = |why: &str| Err(format!("error: {}: not supported by the MLIR export ({why})", at));
        let need = |i: usize| operands.get(i).cloned().ok_or_else(|| internal(format!("{} without operand {i}", op.opcode.name())));
        let result = match op.opcode.kind() {
            OpKind::Constant => {
                let t = aoc_ir::interp::eval_op(Opcode::Const, &[], attrs, std::slice::from_ref(&out), self.weights)
                    .map_err(|m| format!("error: {}: {m}", at))?
                    .remove(0);
                let hint = match attrs.get("value") {
                    Some(Attr::Const(aoc_ir::ConstValue::Weight(w))) => w.key.clone(),
                    _ => f.name_of(op.results[0]).to_string(),
                };
                self.konst(&t, &hint, loc)?
            }
            OpKind::Unary(u) => self.scalar_fn(u, &need(0)?, loc)?,
            OpKind::Binary(b) => self.binary_fn(b, &need(0)?, &need(1)?, loc)?,
            OpKind::Activation(a) => self.activation(a, attrs, &need(0)?, operands.get(1), loc)?,
            OpKind::Pointwise(p) => match p {
                Pointwise::Cast => {
                    let x = need(0)?;
                    // aoc truncates floats to integers where TOSA rounds; to
                    // bool both test for non-zero, so no truncation there.
                    let x = if x.t.elem.is_float() && out.elem.is_int() { self.scalar_fn(Unary::Trunc, &x, loc)? } else { x };
                    self.op1("tosa.cast", &[&x], out.clone(), &[], loc)?
                }
                Pointwise::Where => self.select(&need(0)?, &need(1)?, &need(2)?, loc)?,
                Pointwise::Quantize => self.qcast(&need(0)?, &out, loc)?,
                Pointwise::Dequantize => self.dcast(&need(0)?, loc)?,
                Pointwise::Requantize => {
                    let d = self.dcast(&need(0)?, loc)?;
                    self.qcast(&d, &out, loc)?
                }
                Pointwise::BatchNorm => {
                    let x = need(0)?;
                    let mut shape = vec![1; x.t.rank()];
                    shape[1] = x.t.shape[1];
                    let p: Vec<V> = (1..5).map(|i| self.reshape(&need(i)?, &shape, loc)).collect::<R<_>>()?;
                    let d = self.arith("tosa.sub", &x, &p[2], loc)?;
                    let v = self.add_scalar(&p[3], float(attrs, "epsilon").unwrap_or(1e-5), loc)?;
                    let sd = self.unary("math.sqrt", &v, loc)?;
                    let n = self.div(&d, &sd, loc)?;
                    let n = self.arith("tosa.mul", &n, &p[0], loc)?;
                    self.arith("tosa.add", &n, &p[1], loc)?
                }
                Pointwise::QuantAdd => {
                    let a = self.dcast(&need(0)?, loc)?;
                    let b = self.dcast(&need(1)?, loc)?;
                    let s = self.arith("tosa.add", &a, &b, loc)?;
                    self.requant(attrs, &s, &out, loc)?
                }
                Pointwise::Fused => {
                    let first = need(0)?;
                    self.epilogue(f, id, first, &op.operands[1..])?
                }
                Pointwise::SparseCompress => return unsupported("sparse weights; export the dense model"),
            },
            OpKind::Norm(n) => {
                let x = need(0)?;
                let r = x.t.rank();
                match n {
                    Norm::Softmax | Norm::LogSoftmax => {
                        let axis = norm_axis(int(attrs, "axis", -1), r);
                        self.softmax(&x, axis, n == Norm::LogSoftmax, loc)?
                    }
                    Norm::LayerNorm => {
                        let axis = norm_axis(int(attrs, "axis", -1), r);
                        let axes: Vec<usize> = (axis..r).collect();
                        let m = self.mean(&x, &axes, loc)?;
                        let d = self.arith("tosa.sub", &x, &m, loc)?;
                        let sq = self.arith("tosa.mul", &d, &d, loc)?;
                        let var = self.mean(&sq, &axes, loc)?;
                        let var = self.add_scalar(&var, float(attrs, "epsilon").unwrap_or(1e-5), loc)?;
                        let sd = self.unary("math.sqrt", &var, loc)?;
                        let y = self.div(&d, &sd, loc)?;
                        let y = self.arith("tosa.mul", &y, &need(1)?, loc)?;
                        match operands.get(2) {
                            Some(b) => self.arith("tosa.add", &y, b, loc)?,
                            None => y,
                        }
                    }
                }
            }
            OpKind::Conv(c, form) => {
                let (x, w) = (need(0)?, need(1)?);
                match (c, form) {
                    (Conv::Winograd, Form::Float) => {
                        // The weight is U = G g G^T (constant, folded by the
                        // optimizer): recover g and export a plain convolution.
                        let Some(u) = self.constant(f, op.operands[1]) else {
                            return unsupported("the Winograd weight is not a constant");
                        };
                        let g = compute::winograd_weight(&u, int(attrs, "tile", 2) as usize).map_err(|m| format!("error: {at}: {m}"))?;
                        let wv = self.konst(&g, "winograd_weight", loc)?;
                        let plain = Attrs::new()
                            .with("strides", Attr::Ints(vec![1, 1]))
                            .with("pads", Attr::Ints(ints(attrs, "pads")))
                            .with("dilations", Attr::Ints(vec![1, 1]))
                            .with("groups", Attr::Int(1));
                        self.conv(&plain, &x, &wv, operands.get(2), &out.shape, loc)?
                    }
                    (Conv::Winograd, _) => return unsupported("fused or integer Winograd convolutions"),
                    (Conv::Direct, Form::Float) => self.conv(attrs, &x, &w, operands.get(2), &out.shape, loc)?,
                    (Conv::Transposed, Form::Float) => self.conv_transpose(attrs, &x, &w, operands.get(2), &out.shape, loc)?,
                    (Conv::Direct, Form::Fused) => {
                        let has_bias = boolean(attrs, "bias");
                        let core = compute::conv_shape(attrs, &x.t.shape, &w.t.shape);
                        let acc = self.conv(attrs, &x, &w, if has_bias { operands.get(2) } else { None }, &core, loc)?;
                        let rest = if has_bias { 3 } else { 2 };
                        self.epilogue(f, id, acc, &op.operands[rest.min(op.operands.len())..])?
                    }
                    (Conv::Direct, Form::Quant) => {
                        let xd = self.dcast(&x, loc)?;
                        let wd = self.dcast(&w, loc)?;
                        let bd = match operands.get(2) {
                            Some(b) => Some(self.dcast(b, loc)?),
                            None => None,
                        };
                        let acc = self.conv(attrs, &xd, &wd, bd.as_ref(), &out.shape, loc)?;
                        self.requant(attrs, &acc, &out, loc)?
                    }
                    (Conv::Direct, Form::Sparse) => return unsupported("sparse weights; export the dense model"),
                    (Conv::Transposed, _) => return unsupported("fused or integer transposed convolutions"),
                }
            }
            OpKind::MatMul(form) => {
                let (a, b) = (need(0)?, need(1)?);
                match form {
                    Form::Float => self.matmul(&a, &b, &out.shape, loc)?,
                    Form::Fused => {
                        let acc = self.matmul(&a, &b, &compute::matmul_shape(&a.t.shape, &b.t.shape), loc)?;
                        self.epilogue(f, id, acc, &op.operands[2..])?
                    }
                    Form::Quant => {
                        let (ad, bd) = (self.dcast(&a, loc)?, self.dcast(&b, loc)?);
                        let acc = self.matmul(&ad, &bd, &out.shape, loc)?;
                        self.requant(attrs, &acc, &out, loc)?
                    }
                    Form::Sparse => return unsupported("sparse weights; export the dense model"),
                }
            }
            OpKind::Gemm(form) => {
                let (a, b) = (need(0)?, need(1)?);
                match form {
                    Form::Float => self.gemm(attrs, &a, &b, operands.get(2), &out.shape, loc)?,
                    Form::Fused => {
                        let has_c = boolean(attrs, "bias");
                        let core = compute::gemm_shape(attrs, &a.t.shape, &b.t.shape);
                        let acc = self.gemm(attrs, &a, &b, if has_c { operands.get(2) } else { None }, &core, loc)?;
                        let rest = if has_c { 3 } else { 2 };
                        self.epilogue(f, id, acc, &op.operands[rest.min(op.operands.len())..])?
                    }
                    Form::Quant => {
                        let (ad, bd) = (self.dcast(&a, loc)?, self.dcast(&b, loc)?);
                        let cd = match operands.get(2) {
                            Some(c) => Some(self.dcast(c, loc)?),
                            None => None,
                        };
                        let acc = self.gemm(attrs, &ad, &bd, cd.as_ref(), &out.shape, loc)?;
                        self.requant(attrs, &acc, &out, loc)?
                    }
                    Form::Sparse => return unsupported("sparse weights; export the dense model"),
                }
            }
            OpKind::Attention => {
                let (q, kt, v) = (need(0)?, need(1)?, need(2)?);
                let mut sshape = q.t.shape.clone();
                let r = sshape.len();
                sshape[r - 1] = kt.t.shape[kt.t.rank() - 1];
                let scores = self.matmul(&q, &kt, &sshape, loc)?;
                let scores = self.epilogue(f, id, scores, &op.operands[3..])?;
                let p = self.softmax(&scores, r - 1, false, loc)?;
                self.matmul(&p, &v, &out.shape, loc)?
            }
            OpKind::Pool(p, form) => {
                let x = need(0)?;
                match form {
                    Form::Float => self.pool(p, attrs, &x, &out.shape, loc)?,
                    Form::Quant => {
                        let xd = self.dcast(&x, loc)?;
                        let y = self.pool(p, attrs, &xd, &out.shape, loc)?;
                        self.requant(attrs, &y, &out, loc)?
                    }
                    Form::Fused | Form::Sparse => return unsupported("fused pools"),
                }
            }
            OpKind::Reduce(r) => {
                let x = need(0)?;
                let axes: Vec<usize> = ints(attrs, "axes").iter().map(|&a| norm_axis(a, x.t.rank())).collect();
                let y = if axes.is_empty() {
                    self.unary("tosa.identity", &x, loc)?
                } else {
                    match r {
                        Reduce::Sum => self.reduce("tosa.reduce_sum", &x, &axes, loc)?,
                        Reduce::Max => self.reduce("tosa.reduce_max", &x, &axes, loc)?,
                        Reduce::Min => self.reduce("tosa.reduce_min", &x, &axes, loc)?,
                        Reduce::Mean => self.mean(&x, &axes, loc)?,
                    }
                };
                self.reshape(&y, &out.shape, loc)?
            }
            OpKind::Movement(m) => {
                let x = need(0)?;
                match m {
                    Movement::Identity => self.unary("tosa.identity", &x, loc)?,
                    Movement::Reshape => {
                        let y = self.reshape(&x, &out.shape, loc)?;
                        if y.v == x.v { self.unary("tosa.identity", &x, loc)? } else { y }
                    }
                    Movement::Transpose => {
                        let perm: Vec<usize> = ints(attrs, "perm").iter().map(|&p| p as usize).collect();
                        let y = self.transpose(&x, &perm, loc)?;
                        if y.v == x.v { self.unary("tosa.identity", &x, loc)? } else { y }
                    }
                    Movement::Concat => {
                        let axis = norm_axis(int(attrs, "axis", 0), x.t.rank());
                        let refs: Vec<&V> = operands.iter().collect();
                        self.op1("tosa.concat", &refs, out.clone(), &[("axis", self.attr(&format!("{axis} : i32"))?)], loc)?
                    }
                    Movement::Slice => self.slice(attrs, &x, &out, loc)?,
                    Movement::Pad => match self.pad(attrs, &x, &out, loc)? {
                        Some(y) => y,
                        None => return unsupported("reflect or wrap pads wider than the padded dimension"),
                    },
                    Movement::Gather => self.gather(attrs, &x, &need(1)?, &out, loc)?,
                    Movement::Expand => {
                        let y = self.expand(&x, &out.shape, loc)?;
                        if y.v == x.v { self.unary("tosa.identity", &x, loc)? } else { y }
                    }
                }
            }
            OpKind::Resize => match self.resize(attrs, &need(0)?, &out, loc)? {
                Some(y) => y,
                None => return unsupported("this resize mode; tosa.resize takes 2-D nearest (asymmetric/floor, half-pixel) and linear (half-pixel, asymmetric, align-corners) with scales equal to the size ratios"),
            },
            OpKind::GridSample => return unsupported("TOSA has no grid sampling"),
            OpKind::Recurrent(_) => return unsupported("TOSA has no recurrent layer; a loop of matmuls is not exported yet"),
            OpKind::Control(_) => return unsupported("control flow (scf.if/scf.while) is not exported yet"),
        };
        if result.t.shape != out.shape {
            return Err(internal(format!("{}: exported shape {:?}, expected {:?}", at, result.t.shape, out.shape)));
        }
        self.vals.insert(op.results[0], result);
        Ok(())
    }

    /// The requantize epilogue of an integer op: clamp, then quantize.
    fn requant(&mut self, attrs: &Attrs, y: &V<'c, 'a>, out: &TensorType, loc: Location<'c>) -> R<V<'c, 'a>> {
        let (lo, hi) = (float(attrs, "clip_min"), float(attrs, "clip_max"));
        let y = if lo.is_some() || hi.is_some() {
            let (lo, hi) = match (lo, hi) {
                (Some(l), Some(h)) if l > h => (Some(h), Some(h)),
                p => p,
            };
            self.clamp(y, lo, hi, loc)?
        } else {
            y.clone()
        };
        self.qcast(&y, out, loc)
    }

    /// The epilogue region of op `id` applied to `acc`; its other block
    /// arguments stand for `rest`.
    fn epilogue(&mut self, f: &Func, id: OpId, acc: V<'c, 'a>, rest: &[ValueId]) -> R<V<'c, 'a>> {
        let op = &f.ops[id];
        let Some(region) = op.regions.first() else { return Ok(acc) };
        if let Some(&a0) = region.args.first() {
            self.vals.insert(a0, acc.clone());
        }
        for (i, &a) in region.args.iter().enumerate().skip(1) {
            let v = rest.get(i - 1).ok_or_else(|| internal("epilogue argument without an operand"))?;
            let v = self.val(*v)?;
            self.vals.insert(a, v);
        }
        for &rop in &region.ops {
            self.op(f, rop)?;
        }
        match region.terminator.first() {
            Some(&y) => self.val(y),
            None => Ok(acc),
        }
    }

}
