//! MLIR to `.air`: parses a file with MLIR's own parser (which verifies
//! it), then converts each `func.func` op by op — TOSA, the linalg named
//! ops, `arith`/`math` elementwise ops, `tensor` reshapes and `quant`
//! casts — into aoc ops, through the ONNX importer's builder (`Cx`), so
//! ops on constants fold at import time and large constants become
//! weights. `convert` is the one list of what maps.
//!
//! Invariants: every op gets a location (its MLIR name location, else
//! `file:line:col`); an op, type or attribute aoc cannot express is an
//! error at its `file:line:col` naming it; nothing here panics on input.

mod attrs;
mod compose;

use super::{Mlir, loc_name, loc_text, types};
use attrs::{attr, entry_name, ints_of, number_of, string_of, tensor_of_elements};
use crate::onnx::ImportOptions;
use crate::onnx::context::{Cx, V};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::module::{ValueDef, WeightsDecl};
use aoc_ir::types::{ElemType, Scalar, TensorType};
use aoc_ir::{Location, Module, Opcode, Tensor, ValueId};
use melior::ir::block::BlockLike;
use melior::ir::operation::{OperationLike, OperationRef};
use melior::ir::RegionLike;
use melior::ir::ValueLike;
use melior::ir::Value;
use mlir_sys as sys;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

/// An imported MLIR module: the aoc module and the weights its `const`s
/// name (key -> tensor, for the safetensors file).
pub struct ImportedMlir {
    pub module: Module,
    pub weights: Vec<(String, Tensor)>,
}

/// What an MLIR value is while importing.
#[derive(Clone)]
enum M {
    /// A tensor: an IR value or a constant.
    T(V),
    /// A `!tosa.shape` constant.
    Shape(Vec<i64>),
    /// `tensor.empty`: a destination whose contents do not matter.
    Empty(TensorType),
}

type R<T> = Result<T, String>;

/// Imports the MLIR file at `path`; the module names its weights file
/// `weights_path` (as `@weights`).
pub fn import_mlir(path: &Path, weights_path: &str) -> R<ImportedMlir> {
    let name = path.display().to_string();
    // MLIR's own message for a missing file has no location.
    std::fs::metadata(path).map_err(|e| format!("error: cannot read {name}: {e}"))?;
    let m = Mlir::new();
    let raw = unsafe { sys::mlirModuleCreateParseFromFile(m.ctx.to_raw(), melior::StringRef::new(&name).to_raw()) };
    if raw.ptr.is_null() {
        let d = m.take_diagnostics();
        let d = if d.is_empty() { format!("{name}: error: cannot parse the file") } else { d };
        return Err(format!("{}\nerror: {name} is not valid MLIR", d.trim_end()));
    }
    let mmod = unsafe { melior::ir::Module::from_raw(raw) };
    let opts = ImportOptions { weights_name: "weights".into(), weights_path: weights_path.into(), ..Default::default() };
    let mut module = Module::default();
    let mut weights: Vec<(String, Tensor)> = vec![];
    let mut op = mmod.body().first_operation();
    while let Some(o) = op {
        let oname = o.name().as_string_ref().as_str().unwrap_or("?").to_string();
        if oname != "func.func" {
            return Err(format!("{}: error: `{oname}` at the top level is not supported (aoc imports func.func)", loc_text(&o.location())));
        }
        let region = o.region(0).map_err(|e| e.to_string())?;
        if let Some(_block) = region.first_block() {
            let mut cx = Cx::new(&opts, 0);
            let mut imp = Imp { cx: &mut cx, vals: HashMap::new(), at: String::new(), cur: String::new() };
            imp.func(&o)?;
            let (func, mut w) = cx.finish();
            for (k, _) in &w {
                if weights.iter().any(|(k2, _)| k2 == k) {
                    return Err(format!("error: {name}: two functions name the weight `{k}`; import them one file at a time"));
                }
            }
            weights.append(&mut w);
            module.funcs.push(func);
        }
        op = o.next_in_block();
    }
    if module.funcs.is_empty() {
        return Err(format!("error: {name} has no function with a body"));
    }
    if !weights.is_empty() {
        module.weights.push(WeightsDecl { name: opts.weights_name.clone(), path: opts.weights_path.clone(), loc: Location::default() });
    }
    Ok(ImportedMlir { module, weights })
}

struct Imp<'x, 'o> {
    cx: &'x mut Cx<'o>,
    vals: HashMap<usize, M>,
    /// The current op's `file:line:col: ` for messages.
    at: String,
    /// The current op's name, for messages from aoc's own checks.
    cur: String,
}

fn key(v: Value) -> usize {
    v.to_raw().ptr as usize
}

fn opname<'c, 'a>(op: &OperationRef<'c, 'a>) -> String {
    op.name().as_string_ref().as_str().unwrap_or("?").to_string()
}

// ---------------------------------------------------------------- attributes

impl<'x, 'o> Imp<'x, 'o> {
    fn err(&self, msg: impl std::fmt::Display) -> String {
        format!("{}error: {msg}", self.at)
    }

    /// An error from aoc's own checks of what an op became.
    fn d(&self, d: aoc_ir::Diagnostic) -> String {
        self.err(format!("`{}` does not map to aoc: {}", self.cur, d.message))
    }

    fn get(&self, v: Value) -> R<M> {
        self.vals.get(&key(v)).cloned().ok_or_else(|| self.err("use of a value aoc did not import (an op of another block?)"))
    }

    /// Operand `i` as a tensor (a `tensor.empty` reads as zeros).
    fn t<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, i: usize) -> R<V> {
        let v = op.operand(i).map_err(|_| self.err(format!("`{}` lacks operand {i}", opname(op))))?;
        match self.get(v)? {
            M::T(v) => Ok(v),
            M::Empty(t) => Ok(V::konst(Tensor::splat(t, 0.0))),
            M::Shape(_) => Err(self.err(format!("operand {i} of `{}` is a shape, a tensor was expected", opname(op)))),
        }
    }

    fn shape_operand<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, i: usize) -> R<Vec<i64>> {
        let v = op.operand(i).map_err(|_| self.err(format!("`{}` lacks operand {i}", opname(op))))?;
        match self.get(v)? {
            M::Shape(s) => Ok(s),
            M::T(V::C(t)) => Ok(t.to_i64()),
            _ => Err(self.err(format!("operand {i} of `{}` must be a constant shape (tosa.const_shape)", opname(op)))),
        }
    }

    fn const_operand<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, i: usize, what: &str) -> R<Rc<Tensor>> {
        match self.t(op, i)? {
            V::C(t) => Ok(t),
            V::R(_) => Err(self.err(format!("`{}`: the {what} must be a constant", opname(op)))),
        }
    }

    fn result_type<'c, 'a>(&self, op: &OperationRef<'c, 'a>, i: usize) -> R<TensorType> {
        let r = op.result(i).map_err(|_| self.err(format!("`{}` has no result {i}", opname(op))))?;
        types::tensor_of_mlir(r.r#type()).map_err(|m| self.err(format!("`{}`: {m}", opname(op))))
    }

    fn ints<'c, 'a>(&self, op: &OperationRef<'c, 'a>, name: &str) -> R<Vec<i64>> {
        attr(op, name).and_then(ints_of).ok_or_else(|| self.err(format!("`{}` lacks the integer list `{name}`", opname(op))))
    }

    fn int<'c, 'a>(&self, op: &OperationRef<'c, 'a>, name: &str) -> R<i64> {
        attr(op, name).and_then(number_of).map(|x| x as i64).ok_or_else(|| self.err(format!("`{}` lacks the integer `{name}`", opname(op))))
    }

    fn num<'c, 'a>(&self, op: &OperationRef<'c, 'a>, name: &str) -> R<f64> {
        attr(op, name).and_then(number_of).ok_or_else(|| self.err(format!("`{}` lacks the number `{name}`", opname(op))))
    }

    fn ty(&self, v: &V) -> TensorType {
        self.cx.ty(v)
    }

    fn op1(&mut self, opcode: Opcode, operands: &[V], attrs: Attrs) -> R<V> {
        self.cx.op1(opcode, operands, attrs).map_err(|d| self.d(d))
    }

    fn declared(&mut self, opcode: Opcode, operands: &[V], attrs: Attrs, t: TensorType) -> R<V> {
        let mut r = self.cx.op(opcode, operands, attrs, Some(vec![t])).map_err(|d| self.d(d))?;
        Ok(r.remove(0))
    }

    fn transpose(&mut self, x: &V, perm: &[i64]) -> R<V> {
        if perm.iter().enumerate().all(|(i, &p)| i as i64 == p) {
            return Ok(x.clone());
        }
        self.op1(Opcode::Transpose, std::slice::from_ref(x), Attrs::new().with("perm", Attr::Ints(perm.to_vec())))
    }

    fn reshape(&mut self, x: &V, shape: &[usize]) -> R<V> {
        self.cx.reshape(x, shape).map_err(|d| self.d(d))
    }

    fn splat(&self, v: f64, like: &TensorType, shape: &[usize]) -> V {
        V::konst(Tensor::splat(TensorType { shape: shape.to_vec(), elem: like.elem.clone(), encoding: None }, v))
    }

    /// `t` cast to `s` (a no-op when it already is).
    fn cast(&mut self, x: &V, s: Scalar) -> R<V> {
        if self.ty(x).elem == ElemType::Scalar(s) {
            return Ok(x.clone());
        }
        self.op1(Opcode::Cast, std::slice::from_ref(x), Attrs::new().with("to", Attr::Type(s)))
    }

    /// Checks a converted value against the type MLIR declared for it.
    fn expect(&self, v: V, want: &TensorType) -> R<V> {
        let got = self.ty(&v);
        if got.shape != want.shape || got.elem != want.elem {
            return Err(self.err(format!("aoc computes {got} where the MLIR declares {want}")));
        }
        Ok(v)
    }

    // ------------------------------------------------------------ functions

    fn func<'c, 'a>(&mut self, f: &OperationRef<'c, 'a>) -> R<()> {
        self.at = format!("{}: ", loc_text(&f.location()));
        let name = attr(f, "sym_name").and_then(string_of).unwrap_or_else(|| "main".into());
        self.cx.func.name = name;
        self.cx.func.loc = Location::named(loc_text(&f.location()));
        let region = f.region(0).map_err(|e| self.err(e))?;
        let block = region.first_block().ok_or_else(|| self.err("function without a body"))?;
        if block.next_in_region().is_some() {
            return Err(self.err("functions with more than one block (control flow) are not supported"));
        }
        for i in 0..block.argument_count() {
            let a = block.argument(i).map_err(|e| self.err(e))?;
            let t = types::tensor_of_mlir(a.r#type()).map_err(|m| self.err(format!("argument {i}: {m}")))?;
            let n = entry_name(f, "arg_attrs", i).unwrap_or_else(|| format!("arg{i}"));
            let id = self.cx.func.add_param(&n, t, Location::named(n.clone()));
            let v: Value = a.into();
            self.vals.insert(key(v), M::T(V::R(id)));
        }
        let mut op = block.first_operation();
        while let Some(o) = op {
            let oname = opname(&o);
            let loc = o.location();
            self.at = format!("{}: ", loc_text(&loc));
            self.cx.loc = Location::named(loc_name(&loc).unwrap_or_else(|| loc_text(&loc)));
            self.cx.hint = oname.rsplit('.').next().unwrap_or("v").to_string();
            self.cur = oname.clone();
            if oname == "func.return" || oname == "tosa.yield" {
                return self.finish(f, &o);
            }
            let outs = self.convert(&o, &oname)?;
            if outs.len() != o.result_count() {
                return Err(self.err(format!("`{oname}`: {} results converted, {} expected (please report)", outs.len(), o.result_count())));
            }
            for (i, m) in outs.into_iter().enumerate() {
                let r: Value = o.result(i).map_err(|e| self.err(e))?.into();
                self.vals.insert(key(r), m);
            }
            op = o.next_in_block();
        }
        Err(self.err("function without func.return"))
    }

    fn finish<'c, 'a>(&mut self, f: &OperationRef<'c, 'a>, ret: &OperationRef<'c, 'a>) -> R<()> {
        let mut results: Vec<ValueId> = vec![];
        let mut names: Vec<Option<String>> = vec![];
        for i in 0..ret.operand_count() {
            let v = self.t(ret, i)?;
            let want = entry_name(f, "res_attrs", i).unwrap_or_else(|| format!("result{i}"));
            self.cx.loc = Location::named(want.clone());
            let id = match v {
                V::C(t) => self.cx.materialize(&t, &want).map_err(|d| self.d(d))?,
                V::R(id) => {
                    let is_param = matches!(self.cx.func.values[id].def, ValueDef::Param(_));
                    if is_param || results.contains(&id) {
                        self.cx.func.push_op(Opcode::Identity, &[id], Attrs::new(), None, &want, self.cx.loc.clone()).map_err(|d| self.d(d))?[0]
                    } else {
                        if self.cx.func.value_by_name(&want).is_none() {
                            self.cx.func.rename(id, want.clone());
                        }
                        id
                    }
                }
            };
            results.push(id);
            // The outside name, where the value's own had to differ.
            names.push((self.cx.func.name_of(id) != want).then_some(want));
        }
        self.cx.func.set_return(results);
        if names.iter().any(Option::is_some) {
            self.cx.func.result_names = names;
        }
        Ok(())
    }

    // ------------------------------------------------------------ ops

    /// Converts one op: the one list of what aoc imports.
    fn convert<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, name: &str) -> R<Vec<M>> {
        let one = |v: V| Ok(vec![M::T(v)]);
        match name {
            "tosa.const" | "arith.constant" => {
                let a = attr(op, if name == "tosa.const" { "values" } else { "value" }).ok_or_else(|| self.err(format!("`{name}` without a value")))?;
                // A scalar (the value of a linalg.fill) is a rank-0 tensor.
                let rt = op.result(0).map_err(|e| self.err(e))?.r#type();
                if let Some(s) = types::scalar_of(rt) {
                    let x = number_of(a).ok_or_else(|| self.err(format!("`{name}`: {a} is not a number")))?;
                    return one(V::konst(Tensor::splat(TensorType::new(vec![], s), x)));
                }
                let want = self.result_type(op, 0)?;
                let t = tensor_of_elements(a).map_err(|m| self.err(format!("`{name}`: {m}")))?;
                one(V::konst(Tensor { ty: want, data: t.data }))
            }
            "tosa.const_shape" => {
                let a = attr(op, "values").ok_or_else(|| self.err("`tosa.const_shape` without values"))?;
                let t = tensor_of_elements(a).map_err(|m| self.err(m))?;
                Ok(vec![M::Shape(t.to_i64())])
            }
            "tensor.empty" => Ok(vec![M::Empty(self.result_type(op, 0)?)]),
            "linalg.fill" => {
                let x = self.const_operand(op, 0, "fill value")?;
                let want = self.result_type(op, 0)?;
                one(V::konst(Tensor::splat(want, x.get_f64(0))))
            }
            // Elementwise.
            "tosa.add" | "arith.addf" | "arith.addi" => self.bin(op, Opcode::Add),
            "tosa.sub" | "arith.subf" | "arith.subi" => self.bin(op, Opcode::Sub),
            "tosa.mul" | "arith.mulf" | "arith.muli" => {
                if name == "tosa.mul" && op.operand_count() == 3 {
                    let s = self.const_operand(op, 2, "shift")?.get_i64(0);
                    if s != 0 {
                        // i32 only: (a * b + 2^(shift-1)) >> shift, in i64.
                        return one(self.mul_shift(op, s)?);
                    }
                }
                self.bin(op, Opcode::Mul)
            }
            "arith.divf" | "tosa.intdiv" | "arith.divsi" => self.bin(op, Opcode::Div),
            "tosa.maximum" | "arith.maximumf" => self.bin(op, Opcode::Max),
            "tosa.minimum" | "arith.minimumf" => self.bin(op, Opcode::Min),
            "tosa.pow" | "math.powf" => self.bin(op, Opcode::Pow),
            "tosa.equal" => self.bin(op, Opcode::Equal),
            "tosa.greater" => self.bin(op, Opcode::Greater),
            "tosa.greater_equal" => {
                let (a, b) = (self.t(op, 0)?, self.t(op, 1)?);
                let lt = self.op1(Opcode::Less, &[a, b], Attrs::new())?;
                let t = self.ty(&lt);
                let (f, tr) = (self.splat(0.0, &t, &[]), self.splat(1.0, &t, &[]));
                one(self.op1(Opcode::Where, &[lt, f, tr], Attrs::new())?)
            }
            // Booleans: `where` with constant true/false.
            "tosa.logical_and" | "tosa.logical_or" | "tosa.logical_xor" => {
                let (a, b) = (self.t(op, 0)?, self.t(op, 1)?);
                let t = TensorType::new(vec![], Scalar::I1);
                let (f, tr) = (self.splat(0.0, &t, &[]), self.splat(1.0, &t, &[]));
                let y = match name {
                    "tosa.logical_and" => self.op1(Opcode::Where, &[a, b, f], Attrs::new())?,
                    "tosa.logical_or" => self.op1(Opcode::Where, &[a, tr, b], Attrs::new())?,
                    _ => {
                        let eq = self.op1(Opcode::Equal, &[a, b], Attrs::new())?;
                        self.op1(Opcode::Where, &[eq, f, tr], Attrs::new())?
                    }
                };
                one(y)
            }
            "tosa.logical_not" => {
                let a = self.t(op, 0)?;
                let t = TensorType::new(vec![], Scalar::I1);
                let (f, tr) = (self.splat(0.0, &t, &[]), self.splat(1.0, &t, &[]));
                one(self.op1(Opcode::Where, &[a, f, tr], Attrs::new())?)
            }
            "tosa.reduce_all" | "tosa.reduce_any" => {
                // On 0/1 integers: all is the minimum, any the maximum.
                let x = self.t(op, 0)?;
                let axis = self.int(op, "axis")?;
                let i = self.cast(&x, Scalar::I32)?;
                let oc = if name == "tosa.reduce_all" { Opcode::ReduceMin } else { Opcode::ReduceMax };
                let r = self.op1(oc, &[i], Attrs::new().with("axes", Attr::Ints(vec![axis])).with("keepdims", Attr::Bool(true)))?;
                let zero = V::konst(Tensor::from_i64(TensorType::new(vec![], Scalar::I32), vec![0]));
                one(self.op1(Opcode::Greater, &[r, zero], Attrs::new())?)
            }
            "tosa.reverse" => {
                let x = self.t(op, 0)?;
                let axis = self.int(op, "axis")?;
                let d = self.ty(&x).shape.get(axis as usize).copied().unwrap_or(0) as i64;
                let a = Attrs::new()
                    .with("starts", Attr::Ints(vec![d - 1]))
                    .with("ends", Attr::Ints(vec![-d - 1]))
                    .with("axes", Attr::Ints(vec![axis]))
                    .with("steps", Attr::Ints(vec![-1]));
                one(self.op1(Opcode::Slice, &[x], a)?)
            }
            "tosa.select" | "arith.select" => {
                let (c, a, b) = (self.t(op, 0)?, self.t(op, 1)?, self.t(op, 2)?);
                one(self.op1(Opcode::Where, &[c, a, b], Attrs::new())?)
            }
            "tosa.abs" | "math.absf" => self.un(op, Opcode::Abs),
            "tosa.exp" | "math.exp" => self.un(op, Opcode::Exp),
            "tosa.log" | "math.log" => self.un(op, Opcode::Log),
            "math.sqrt" => self.un(op, Opcode::Sqrt),
            "tosa.rsqrt" | "math.rsqrt" => self.un(op, Opcode::Rsqrt),
            "tosa.reciprocal" => self.un(op, Opcode::Reciprocal),
            "tosa.erf" | "math.erf" => self.un(op, Opcode::Erf),
            "tosa.tanh" | "math.tanh" => self.un(op, Opcode::Tanh),
            "tosa.sin" | "math.sin" => self.un(op, Opcode::Sin),
            "tosa.cos" | "math.cos" => self.un(op, Opcode::Cos),
            "tosa.sigmoid" => self.un(op, Opcode::Sigmoid),
            "tosa.floor" | "math.floor" => self.un(op, Opcode::Floor),
            "tosa.ceil" | "math.ceil" => self.un(op, Opcode::Ceil),
            "tosa.identity" => self.un(op, Opcode::Identity),
            "tosa.negate" | "arith.negf" => {
                if op.operand_count() == 3 {
                    for i in [1, 2] {
                        let z = self.const_operand(op, i, "zero point")?;
                        if z.to_f64().iter().any(|&x| x != 0.0) {
                            return Err(self.err("`tosa.negate` with a non-zero zero point is not supported"));
                        }
                    }
                }
                self.un(op, Opcode::Neg)
            }
            "tosa.clamp" => {
                let x = self.t(op, 0)?;
                let (lo, hi) = (self.num(op, "min_val")?, self.num(op, "max_val")?);
                if self.ty(&x).elem.quant().is_some() {
                    // On a quantized tensor the bounds are stored integers.
                    let want = self.result_type(op, 0)?;
                    let sx = self.storage_f64(&x)?;
                    let c = self.op1(Opcode::Clip, &[sx], Attrs::new().with("min", Attr::Float(lo)).with("max", Attr::Float(hi)))?;
                    return one(self.storage_to(&c, &want)?);
                }
                let s = self.ty(&x).elem.storage();
                let lim = |v: f64| v.is_finite() && (!s.is_float() || v.abs() < 3.0e38);
                let mut a = Attrs::new();
                if lim(lo) {
                    a.set("min", Attr::Float(lo));
                }
                if lim(hi) {
                    a.set("max", Attr::Float(hi));
                }
                one(self.op1(Opcode::Clip, &[x], a)?)
            }
            "tosa.cast" | "arith.sitofp" | "arith.extf" | "arith.truncf" => {
                let x = self.t(op, 0)?;
                let want = self.result_type(op, 0)?;
                let to = want.elem.scalar().ok_or_else(|| self.err("`tosa.cast` to a quantized type is not supported"))?;
                let from = self.ty(&x).elem;
                let x = if from.is_float() && !to.is_float() && to != Scalar::I1 { self.round_even(&x)? } else { x };
                one(self.cast(&x, to)?)
            }
            // Data movement.
            "tosa.reshape" | "tensor.expand_shape" | "tensor.collapse_shape" | "tensor.reshape" => {
                let x = self.t(op, 0)?;
                let want = self.result_type(op, 0)?;
                let s: Vec<i64> = want.shape.iter().map(|&d| d as i64).collect();
                one(self.op1(Opcode::Reshape, &[x], Attrs::new().with("shape", Attr::Ints(s)))?)
            }
            "tosa.transpose" => {
                let x = self.t(op, 0)?;
                let p = self.ints(op, "perms")?;
                one(self.op1(Opcode::Transpose, &[x], Attrs::new().with("perm", Attr::Ints(p)))?)
            }
            "tosa.concat" => {
                let xs = (0..op.operand_count()).map(|i| self.t(op, i)).collect::<R<Vec<_>>>()?;
                let axis = self.int(op, "axis")?;
                one(self.op1(Opcode::Concat, &xs, Attrs::new().with("axis", Attr::Int(axis)))?)
            }
            "tosa.slice" => {
                let x = self.t(op, 0)?;
                let start = self.shape_operand(op, 1)?;
                let size = self.shape_operand(op, 2)?;
                let ends: Vec<i64> = start.iter().zip(&size).map(|(s, z)| s + z).collect();
                one(self.op1(Opcode::Slice, &[x], Attrs::new().with("starts", Attr::Ints(start)).with("ends", Attr::Ints(ends)))?)
            }
            "tosa.pad" => {
                let x = self.t(op, 0)?;
                let p = self.shape_operand(op, 1)?;
                let r = p.len() / 2;
                let pads: Vec<i64> = (0..r).map(|d| p[2 * d]).chain((0..r).map(|d| p[2 * d + 1])).collect();
                let value = if op.operand_count() > 2 { self.const_operand(op, 2, "pad value")?.get_f64(0) } else { 0.0 };
                one(self.op1(Opcode::Pad, &[x], Attrs::new().with("pads", Attr::Ints(pads)).with("value", Attr::Float(value)))?)
            }
            "tensor.pad" => {
                let x = self.t(op, 0)?;
                if op.operand_count() != 1 {
                    return Err(self.err("`tensor.pad` with dynamic amounts is not supported"));
                }
                let (lo, hi) = (self.ints(op, "static_low")?, self.ints(op, "static_high")?);
                let value = self.pad_value(op)?;
                let pads: Vec<i64> = lo.into_iter().chain(hi).collect();
                one(self.op1(Opcode::Pad, &[x], Attrs::new().with("pads", Attr::Ints(pads)).with("value", Attr::Float(value)))?)
            }
            "tosa.tile" => {
                let x = self.t(op, 0)?;
                let m = self.shape_operand(op, 1)?;
                let mut y = x;
                for (axis, &k) in m.iter().enumerate() {
                    if k > 1 {
                        let copies = vec![y.clone(); k as usize];
                        y = self.op1(Opcode::Concat, &copies, Attrs::new().with("axis", Attr::Int(axis as i64)))?;
                    }
                }
                one(y)
            }
            "tosa.resize" => {
                // input = (output * scale_d + offset) / scale_n, per axis;
                // ONNX's coordinate modes are the offsets (d - n) / 2
                // (half-pixel) and 0 (asymmetric), and for nearest -n / 2
                // turns TOSA's round-half-up into asymmetric floor.
                let x = self.t(op, 0)?;
                let sc = self.shape_operand(op, 1)?;
                let off = self.shape_operand(op, 2)?;
                let linear = attr(op, "mode").is_some_and(|a| a.to_string().contains("BILINEAR"));
                let want = self.result_type(op, 0)?;
                let mut modes = vec![];
                for k in 0..2 {
                    let (n, d, o) = (sc[2 * k], sc[2 * k + 1], off[k]);
                    modes.push(if 2 * o == d - n {
                        ("half_pixel", "round_prefer_ceil")
                    } else if o == 0 {
                        ("asymmetric", "round_prefer_ceil")
                    } else if !linear && 2 * o == -n {
                        ("asymmetric", "floor")
                    } else {
                        ("", "")
                    });
                }
                if modes[0] != modes[1] || modes[0].0.is_empty() || sc.iter().any(|&v| v <= 0) {
                    return Err(self.err(format!("`tosa.resize` with scale {sc:?} and offset {off:?} has no ONNX coordinate mode aoc takes")));
                }
                let (ctm, nearest) = modes[0];
                let xn = self.transpose(&x, &[0, 3, 1, 2])?;
                let s = &want.shape;
                let a = Attrs::new()
                    .with("sizes", Attr::Ints(vec![s[0] as i64, s[3] as i64, s[1] as i64, s[2] as i64]))
                    .with("scales", Attr::Floats(vec![1.0, 1.0, sc[0] as f64 / sc[1] as f64, sc[2] as f64 / sc[3] as f64]))
                    .with("mode", Attr::Str(if linear { "linear" } else { "nearest" }.into()))
                    .with("coordinate_transformation_mode", Attr::Str(ctm.into()))
                    .with("nearest_mode", Attr::Str(nearest.into()));
                let y = self.op1(Opcode::Resize, &[xn], a)?;
                let y = self.transpose(&y, &[0, 2, 3, 1])?;
                one(self.expect(y, &want)?)
            }
            "tosa.gather" => {
                // values [N, K, C], indices [N, W] -> [N, W, C]
                let (vals, idx) = (self.t(op, 0)?, self.t(op, 1)?);
                let vt = self.ty(&vals);
                let (n, k, c) = (vt.shape[0], vt.shape[1], vt.shape[2]);
                let flat = self.reshape(&vals, &[n * k, c])?;
                let idx = self.cast(&idx, Scalar::I64)?;
                let idx = if n > 1 {
                    let off = V::konst(Tensor::from_i64(TensorType::new(vec![n, 1], Scalar::I64), (0..n).map(|i| (i * k) as i64).collect()));
                    self.op1(Opcode::Add, &[idx, off], Attrs::new())?
                } else {
                    idx
                };
                one(self.op1(Opcode::Gather, &[flat, idx], Attrs::new().with("axis", Attr::Int(0)))?)
            }
            "tosa.reduce_sum" | "tosa.reduce_max" | "tosa.reduce_min" => {
                let x = self.t(op, 0)?;
                let axis = self.int(op, "axis")?;
                let oc = match name {
                    "tosa.reduce_sum" => Opcode::ReduceSum,
                    "tosa.reduce_max" => Opcode::ReduceMax,
                    _ => Opcode::ReduceMin,
                };
                one(self.op1(oc, &[x], Attrs::new().with("axes", Attr::Ints(vec![axis])).with("keepdims", Attr::Bool(true)))?)
            }
            "tosa.argmax" => {
                let x = self.t(op, 0)?;
                let axis = self.int(op, "axis")? as usize;
                let want = self.result_type(op, 0)?;
                one(self.argmax(&x, axis, &want)?)
            }
            // Compute.
            "tosa.matmul" | "linalg.matmul" | "linalg.batch_matmul" => {
                let (ab, int) = if name == "tosa.matmul" {
                    self.int_compute(op, &[(0, Some(2)), (1, Some(3))])?
                } else {
                    (vec![self.t(op, 0)?, self.t(op, 1)?], None)
                };
                let y = self.op1(Opcode::MatMul, &ab, Attrs::new())?;
                let y = if name == "tosa.matmul" { self.int_result(y, int)? } else { self.accumulate(op, 2, y)? };
                one(y)
            }
            "tosa.conv2d" | "tosa.depthwise_conv2d" => {
                let (xwb, int) = self.int_compute(op, &[(0, Some(3)), (1, Some(4)), (2, None)])?;
                let [x, w, b] = <[V; 3]>::try_from(xwb).map_err(|_| self.err("three operands expected"))?;
                let pad = self.ints(op, "pad")?;
                let stride = self.ints(op, "stride")?;
                let dil = self.ints(op, "dilation")?;
                let wt = self.ty(&w);
                let (w, groups) = if name == "tosa.conv2d" {
                    (self.transpose(&w, &[0, 3, 1, 2])?, 1)
                } else {
                    let (kh, kw, c, m) = (wt.shape[0], wt.shape[1], wt.shape[2], wt.shape[3]);
                    let w = self.transpose(&w, &[2, 3, 0, 1])?;
                    (self.reshape(&w, &[c * m, 1, kh, kw])?, c as i64)
                };
                let bt = self.ty(&b);
                let want = self.result_type(op, 0)?;
                let b = if bt.shape == [1] && want.shape[3] > 1 { self.reshape(&b, &[])? } else { b };
                let b = if self.ty(&b).rank() == 0 {
                    let cout = want.shape[3];
                    self.op1(Opcode::Expand, &[b], Attrs::new().with("shape", Attr::Ints(vec![cout as i64])))?
                } else {
                    b
                };
                let xn = self.transpose(&x, &[0, 3, 1, 2])?;
                let a = Attrs::new()
                    .with("strides", Attr::Ints(stride))
                    .with("pads", Attr::Ints(vec![pad[0], pad[2], pad[1], pad[3]]))
                    .with("dilations", Attr::Ints(dil))
                    .with("groups", Attr::Int(groups));
                let y = self.op1(Opcode::Conv2d, &[xn, w, b], a)?;
                let y = self.transpose(&y, &[0, 2, 3, 1])?;
                let y = self.int_result(y, int)?;
                one(self.expect(y, &want)?)
            }
            "tosa.transpose_conv2d" => {
                let (xwb, int) = self.int_compute(op, &[(0, Some(3)), (1, Some(4)), (2, None)])?;
                let [x, w, b] = <[V; 3]>::try_from(xwb).map_err(|_| self.err("three operands expected"))?;
                let op_ = self.ints(op, "out_pad")?;
                let stride = self.ints(op, "stride")?;
                if op_[0] > 0 || op_[2] > 0 {
                    return Err(self.err("`tosa.transpose_conv2d` with positive top or left out_pad is not supported"));
                }
                let (pt, pl) = (-op_[0], -op_[2]);
                let (pb, ob) = if op_[1] <= 0 { (-op_[1], 0) } else { (0, op_[1]) };
                let (pr, or) = if op_[3] <= 0 { (-op_[3], 0) } else { (0, op_[3]) };
                let want = self.result_type(op, 0)?;
                let w = self.transpose(&w, &[3, 0, 1, 2])?;
                let xn = self.transpose(&x, &[0, 3, 1, 2])?;
                let b = if self.ty(&b).shape == [1] && want.shape[3] > 1 {
                    let s = self.reshape(&b, &[])?;
                    self.op1(Opcode::Expand, &[s], Attrs::new().with("shape", Attr::Ints(vec![want.shape[3] as i64])))?
                } else {
                    b
                };
                let a = Attrs::new()
                    .with("strides", Attr::Ints(stride))
                    .with("pads", Attr::Ints(vec![pt, pl, pb, pr]))
                    .with("output_padding", Attr::Ints(vec![ob, or]));
                let y = self.op1(Opcode::ConvTranspose2d, &[xn, w, b], a)?;
                let y = self.transpose(&y, &[0, 2, 3, 1])?;
                let y = self.int_result(y, int)?;
                one(self.expect(y, &want)?)
            }
            "tosa.avg_pool2d" | "tosa.max_pool2d" => {
                let x = self.t(op, 0)?;
                if name == "tosa.avg_pool2d" {
                    self.zero_points(op, &[1, 2])?;
                }
                let k = self.ints(op, "kernel")?;
                let s = self.ints(op, "stride")?;
                let p = self.ints(op, "pad")?;
                let xn = self.transpose(&x, &[0, 3, 1, 2])?;
                let a = Attrs::new().with("kernel", Attr::Ints(k)).with("strides", Attr::Ints(s)).with("pads", Attr::Ints(vec![p[0], p[2], p[1], p[3]]));
                let oc = if name == "tosa.avg_pool2d" { Opcode::AvgPool2d } else { Opcode::MaxPool2d };
                let y = self.op1(oc, &[xn], a)?;
                let y = self.transpose(&y, &[0, 2, 3, 1])?;
                let want = self.result_type(op, 0)?;
                one(self.expect(y, &want)?)
            }
            "linalg.conv_2d_nchw_fchw" | "linalg.conv_2d_nhwc_hwcf" | "linalg.depthwise_conv_2d_nhwc_hwc" => {
                let (x, w) = (self.t(op, 0)?, self.t(op, 1)?);
                let strides = attr(op, "strides").and_then(ints_of).unwrap_or(vec![1, 1]);
                let dil = attr(op, "dilations").and_then(ints_of).unwrap_or(vec![1, 1]);
                let wt = self.ty(&w);
                let nhwc = name != "linalg.conv_2d_nchw_fchw";
                let (w, groups) = match name {
                    "linalg.conv_2d_nchw_fchw" => (w, 1),
                    "linalg.conv_2d_nhwc_hwcf" => (self.transpose(&w, &[3, 2, 0, 1])?, 1),
                    _ => {
                        let (kh, kw, c) = (wt.shape[0], wt.shape[1], wt.shape[2]);
                        let w = self.transpose(&w, &[2, 0, 1])?;
                        (self.reshape(&w, &[c, 1, kh, kw])?, c as i64)
                    }
                };
                let xn = if nhwc { self.transpose(&x, &[0, 3, 1, 2])? } else { x };
                let a = Attrs::new().with("strides", Attr::Ints(strides)).with("dilations", Attr::Ints(dil)).with("groups", Attr::Int(groups));
                let y = self.op1(Opcode::Conv2d, &[xn, w], a)?;
                let y = if nhwc { self.transpose(&y, &[0, 2, 3, 1])? } else { y };
                let y = self.accumulate(op, 2, y)?;
                let want = self.result_type(op, 0)?;
                one(self.expect(y, &want)?)
            }
            n if n.starts_with("linalg.pooling_") => {
                let kind = &n["linalg.pooling_".len()..];
                let nhwc = kind.starts_with("nhwc");
                let max = kind.ends_with("_max");
                let sum = kind.ends_with("_sum");
                if !(kind.starts_with("nhwc") || kind.starts_with("nchw")) || !(max || sum) {
                    return Err(self.err(format!("`{n}` is not supported (aoc takes the nhwc/nchw max and sum pools)")));
                }
                let x = self.t(op, 0)?;
                let win = op.operand(1).map_err(|e| self.err(e))?;
                let ws = types::tensor_of_mlir(win.r#type()).map_err(|m| self.err(m))?.shape;
                let strides = attr(op, "strides").and_then(ints_of).unwrap_or(vec![1, 1]);
                let dil = attr(op, "dilations").and_then(ints_of).unwrap_or(vec![1, 1]);
                let xn = if nhwc { self.transpose(&x, &[0, 3, 1, 2])? } else { x };
                let kernel: Vec<i64> = ws.iter().map(|&d| d as i64).collect();
                let a = Attrs::new().with("kernel", Attr::Ints(kernel)).with("strides", Attr::Ints(strides)).with("dilations", Attr::Ints(dil));
                let y = if max {
                    self.op1(Opcode::MaxPool2d, &[xn], a)?
                } else {
                    let avg = self.op1(Opcode::AvgPool2d, &[xn], a)?;
                    let t = self.ty(&avg);
                    let n = self.splat((ws[0] * ws[1]) as f64, &t, &[]);
                    self.op1(Opcode::Mul, &[avg, n], Attrs::new())?
                };
                let y = if nhwc { self.transpose(&y, &[0, 2, 3, 1])? } else { y };
                let y = if max { self.max_into(op, 2, y)? } else { self.accumulate(op, 2, y)? };
                let want = self.result_type(op, 0)?;
                one(self.expect(y, &want)?)
            }
            // Quantization.
            "quant.qcast" => {
                let x = self.t(op, 0)?;
                let want = self.result_type(op, 0)?;
                one(self.declared(Opcode::Quantize, &[x], Attrs::new(), want)?)
            }
            "quant.dcast" => {
                let x = self.t(op, 0)?;
                one(self.op1(Opcode::Dequantize, &[x], Attrs::new())?)
            }
            "quant.scast" => {
                let x = self.const_operand(op, 0, "operand of a storage cast")?;
                let want = self.result_type(op, 0)?;
                if want.elem.storage() != x.ty.elem.storage() || want.shape != x.ty.shape {
                    return Err(self.err(format!("`quant.scast` from {} to {want} is not supported", x.ty)));
                }
                one(V::konst(Tensor { ty: want, data: x.data.clone() }))
            }
            "tosa.rescale" => one(self.rescale(op)?),
            "tosa.table" => {
                let x = self.t(op, 0)?;
                let table = self.t(op, 1)?;
                let xt = self.ty(&x);
                if xt.elem.storage() != Scalar::I8 {
                    return Err(self.err("`tosa.table` is supported on i8 inputs (a 256-entry lookup) only"));
                }
                let i = self.cast(&x, Scalar::I64)?;
                let off = self.splat(128.0, &TensorType::new(vec![], Scalar::I64), &[]);
                let i = self.op1(Opcode::Add, &[i, off], Attrs::new())?;
                one(self.op1(Opcode::Gather, &[table, i], Attrs::new().with("axis", Attr::Int(0)))?)
            }
            other => Err(self.err(format!("`{other}` is not supported by aoc's MLIR import (docs/mlir.md lists what is)"))),
        }
    }

    fn un<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, oc: Opcode) -> R<Vec<M>> {
        let x = self.t(op, 0)?;
        Ok(vec![M::T(self.op1(oc, &[x], Attrs::new())?)])
    }

    fn bin<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, oc: Opcode) -> R<Vec<M>> {
        let (a, b) = (self.t(op, 0)?, self.t(op, 1)?);
        Ok(vec![M::T(self.op1(oc, &[a, b], Attrs::new())?)])
    }
}
