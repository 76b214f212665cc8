//! Where Q/DQ pairs go, and the rewrite that puts them there.
//!
//! [`layers`] finds the quantizable layers of a float function: convolutions,
//! matmuls and gemms (their activation operands, their constant weight and
//! bias), residual adds and average pools. A layer's *output* is its result,
//! or the result of a relu or clip that is its only user (the epilogue the
//! integer op absorbs).
//!
//! [`build`] quantizes a chosen set of layers, the explicit-quantization
//! placement TensorRT uses:
//! - every activation operand of a quantized layer, and its output, gets
//!   `quant.quantize` + `quant.dequantize` right after its definition;
//!   the layer reads the dequantized value, and so does everything else that
//!   reads a quantized layer's output (its float form no longer exists);
//! - weights become constants stored as int8 (or fp8) with per-output-channel
//!   (or per-tensor) symmetric scales, biases int32 with scale
//!   `s_x · s_w[o]`, each behind a `quant.dequantize`;
//! - data movement that keeps values (max pool, reshape, flatten,
//!   transpose, slice) between quantized tensors passes the input's
//!   parameters on, so the `qdq` rules cancel the pair instead of
//!   requantizing.
//!
//! The `qdq` rules of `aoc compile` then turn each `quantize(op(dequantize
//! ...))` into the integer op, and cancel the pairs between two quantized
//! layers.

use std::collections::{BTreeMap, HashMap, HashSet};

use aoc_ir::attr::{Attr, Attrs, ConstValue};
use aoc_ir::interp::{WeightSource, eval_op};
use aoc_ir::module::{Func, OpId, ValueDef, ValueId};
use aoc_ir::ops::kind::{Form, OpKind};
use aoc_ir::ops::quant::quantize_values;
use aoc_ir::tensor::Tensor;
use aoc_ir::types::{ElemType, QuantParams, QuantType, Scalar, TensorType};
use aoc_ir::{Opcode, Trait};

use super::range::e4m3_round;

/// What kind of layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    Conv,
    MatMul,
    Gemm,
    Add,
    AvgPool,
    GlobalAvgPool,
}

impl LayerKind {
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Conv => "conv2d",
            LayerKind::MatMul => "matmul",
            LayerKind::Gemm => "gemm",
            LayerKind::Add => "add",
            LayerKind::AvgPool => "avg_pool2d",
            LayerKind::GlobalAvgPool => "global_avg_pool",
        }
    }
    /// Layers with weights: the ones `--target-sqnr` weighs first.
    pub fn has_weights(self) -> bool {
        matches!(self, LayerKind::Conv | LayerKind::MatMul | LayerKind::Gemm)
    }
}

/// A constant operand of a layer (weight or bias) and its channel axis.
#[derive(Clone, Debug)]
pub struct ConstSlot {
    /// Operand index in the layer's op.
    pub index: usize,
    pub value: Tensor,
    /// The output-channel axis of this tensor.
    pub axis: usize,
}

#[derive(Clone, Debug)]
pub struct Layer {
    pub op: OpId,
    /// The op's `loc` name (the ONNX node), else its result's name.
    pub name: String,
    /// The result's name (`--keep` matches it too).
    pub value_name: String,
    /// Other names `--keep` matches (the batch-norm folded into a conv).
    pub aliases: Vec<String>,
    pub kind: LayerKind,
    /// Activation operands: (operand index, value).
    pub acts: Vec<(usize, ValueId)>,
    pub weight: Option<ConstSlot>,
    pub bias: Option<ConstSlot>,
    /// The op whose operand `bias` is: the layer's own, or the add after a
    /// matmul (a linear layer's bias, kept in the integer accumulator).
    pub bias_op: OpId,
    /// The value quantized after the layer (after a relu or clip it absorbs).
    pub output: ValueId,
    /// Why this layer cannot be quantized, when it cannot.
    pub unsupported: Option<String>,
}

/// Weight and activation number formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Int8,
    Fp8,
}

/// Activation storage for int8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activations {
    /// Asymmetric unsigned: zero point anywhere in [0, 255].
    U8,
    /// Symmetric signed: zero point 0, [-127, 127].
    S8,
}

/// Data movement ops that pass their operand's quantization on.
fn passes_params(op: Opcode) -> bool {
    matches!(op, Opcode::MaxPool2d | Opcode::Reshape | Opcode::Flatten | Opcode::Transpose | Opcode::Slice)
}

fn is_f32(t: &TensorType) -> bool {
    t.elem == ElemType::F32
}

/// `v` and the values it reaches through data movement that is its only
/// user, then that value's only user, and so on (reshape, transpose,
/// flatten, slice, max pool): a quantize that the `qdq` rules fold into a
/// layer may sit after any of them (fp8 quantizes the input of the next
/// layer, which an attention reaches through a reshape and a transpose),
/// and the quantized op then carries that value's location.
pub fn through_data_movement(func: &Func, uses: &HashMap<ValueId, Vec<(OpId, usize)>>, v: ValueId) -> Vec<ValueId> {
    let mut chain = vec![v];
    let mut v = v;
    while let Some([(user, 0)]) = uses.get(&v).map(Vec::as_slice)
        && passes_params(func.ops[*user].opcode)
        && let [r] = func.ops[*user].results[..]
    {
        chain.push(r);
        v = r;
    }
    chain
}

/// How a normalization reads the rows of a value: `len` values a row,
/// rows whose spread is at most `epsilon` left out, centered (a layer
/// norm: the row's variance) or not (an RMS norm: its mean square).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormedRows {
    pub len: usize,
    pub epsilon: f64,
    pub centered: bool,
}

/// The outputs of the residual adds among `layers` that a normalization
/// reads row by row, through float casts: a `core.layer_norm` (its input
/// `x`; rows from its axis on), a `core.reduce_mean` over the trailing
/// axes (a layer norm written out), or a power or square of the value that
/// such a mean reads (an RMS norm written out, T5's and LLaMA's).
pub fn normed_rows(func: &Func, layers: &[Layer]) -> HashMap<ValueId, NormedRows> {
    let uses = uses(func);
    let readers = |v: ValueId| -> Vec<(OpId, usize)> {
        let mut out = vec![];
        let mut todo = vec![v];
        while let Some(v) = todo.pop() {
            for &(op, i) in uses.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
                let d = &func.ops[op];
                match d.results[..] {
                    [r] if d.opcode == Opcode::Cast && func.ty(r).elem.is_float() => todo.push(r),
                    _ => out.push((op, i)),
                }
            }
        }
        out
    };
    // The row length of a mean over trailing axes of `x`, else None.
    let trailing_mean = |op: OpId, x: ValueId| -> Option<usize> {
        let shape = &func.ty(x).shape;
        let Some(Attr::Ints(axes)) = func.attr(op, "axes") else { return None };
        let mut axes: Vec<usize> =
            axes.iter().map(|&a| usize::try_from(if a < 0 { a + shape.len() as i64 } else { a }).ok()).collect::<Option<_>>()?;
        axes.sort_unstable();
        let first = shape.len().checked_sub(axes.len())?;
        (axes == (first..shape.len()).collect::<Vec<_>>()).then(|| shape[first..].iter().product())
    };
    let mut out = HashMap::new();
    for l in layers.iter().filter(|l| l.kind == LayerKind::Add && l.unsupported.is_none()) {
        for (op, i) in readers(l.output) {
            let d = &func.ops[op];
            let x = d.operands[i];
            let rows = match d.opcode {
                Opcode::LayerNorm if i == 0 => {
                    let shape = &func.ty(x).shape;
                    let axis = match func.attr(op, "axis") {
                        Some(Attr::Int(a)) if *a < 0 => *a + shape.len() as i64,
                        Some(Attr::Int(a)) => *a,
                        _ => shape.len() as i64 - 1,
                    };
                    let Ok(axis) = usize::try_from(axis) else { continue };
                    let epsilon = match func.attr(op, "epsilon") {
                        Some(Attr::Float(e)) => *e,
                        _ => 1e-5,
                    };
                    NormedRows { len: shape.iter().skip(axis).product(), epsilon, centered: true }
                }
                Opcode::ReduceMean => match trailing_mean(op, x) {
                    Some(len) => NormedRows { len, epsilon: 0.0, centered: true },
                    None => continue,
                },
                Opcode::Pow | Opcode::Mul if i == 0 && (d.opcode == Opcode::Pow || d.operands[1] == x) => {
                    let [r] = d.results[..] else { continue };
                    let mean = uses.get(&r).into_iter().flatten().find_map(|&(m, _)| {
                        (func.ops[m].opcode == Opcode::ReduceMean).then(|| trailing_mean(m, r)).flatten()
                    });
                    match mean {
                        Some(len) => NormedRows { len, epsilon: 0.0, centered: false },
                        None => continue,
                    }
                }
                _ => continue,
            };
            out.insert(l.output, rows);
        }
    }
    out
}

/// Uses of each value: (op, operand index).
pub fn uses(func: &Func) -> HashMap<ValueId, Vec<(OpId, usize)>> {
    let mut u: HashMap<ValueId, Vec<(OpId, usize)>> = HashMap::new();
    for &op in &func.body.ops {
        for (i, &v) in func.ops[op].operands.iter().enumerate() {
            u.entry(v).or_default().push((op, i));
        }
        for r in &func.ops[op].regions {
            for &rop in &r.ops {
                for (i, &v) in func.ops[rop].operands.iter().enumerate() {
                    u.entry(v).or_default().push((rop, i));
                }
            }
        }
    }
    u
}

/// Constant values of a function: `const` ops and pure ops of constants,
/// evaluated with the interpreter (memoized).
pub struct Consts<'a> {
    func: &'a Func,
    weights: &'a dyn WeightSource,
    memo: HashMap<ValueId, Option<Tensor>>,
}

impl<'a> Consts<'a> {
    pub fn new(func: &'a Func, weights: &'a dyn WeightSource) -> Self {
        Consts { func, weights, memo: HashMap::new() }
    }

    /// The value of `v` when it depends on constants only.
    pub fn get(&mut self, v: ValueId) -> Result<Option<Tensor>, String> {
        if let Some(t) = self.memo.get(&v) {
            return Ok(t.clone());
        }
        let f = self.func;
        let ValueDef::Result(op, idx) = f.values[v].def else {
            return Ok(None);
        };
        let data = &f.ops[op];
        if !data.regions.is_empty() || !data.opcode.info().traits.contains(&Trait::Pure) {
            self.memo.insert(v, None);
            return Ok(None);
        }
        let mut inputs = vec![];
        for &o in &data.operands {
            match self.get(o)? {
                Some(t) => inputs.push(t),
                None => {
                    self.memo.insert(v, None);
                    return Ok(None);
                }
            }
        }
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let tys: Vec<TensorType> = data.results.iter().map(|&r| f.ty(r).clone()).collect();
        let out = eval_op(data.opcode, &refs, &data.attrs, &tys, self.weights)
            .map_err(|m| format!("error: cannot evaluate the constant %{}: {m}", f.name_of(v)))?;
        let t = out.into_iter().nth(idx);
        self.memo.insert(v, t.clone());
        Ok(t)
    }
}

/// The quantizable layers of `func`, in program order.
pub fn layers(func: &Func, weights: &dyn WeightSource) -> Result<Vec<Layer>, String> {
    let uses = uses(func);
    let results: HashSet<ValueId> = func.results().iter().copied().collect();
    let mut consts = Consts::new(func, weights);
    let mut out = vec![];
    for &op in &func.body.ops {
        let data = &func.ops[op];
        let kind = match data.opcode {
            Opcode::Conv2d => LayerKind::Conv,
            Opcode::MatMul => LayerKind::MatMul,
            Opcode::Gemm => LayerKind::Gemm,
            Opcode::Add => LayerKind::Add,
            Opcode::AvgPool2d => LayerKind::AvgPool,
            Opcode::GlobalAvgPool => LayerKind::GlobalAvgPool,
            // Listed, so the table says why they stay in float (below).
            Opcode::SparseConv2d => LayerKind::Conv,
            Opcode::SparseMatMul => LayerKind::MatMul,
            _ => continue,
        };
        let Some(&result) = data.results.first() else { continue };
        let mut layer = Layer {
            op,
            name: data.loc.name.clone().unwrap_or_else(|| func.name_of(result).to_string()),
            value_name: func.name_of(result).to_string(),
            aliases: vec![],
            kind,
            acts: vec![],
            weight: None,
            bias: None,
            bias_op: op,
            output: result,
            unsupported: None,
        };
        let mut why: Option<String> = None;
        let operand_consts: Vec<Option<Tensor>> =
            data.operands.iter().map(|&v| consts.get(v)).collect::<Result<_, _>>()?;
        if !data.operands.iter().chain(&data.results).all(|&v| is_f32(func.ty(v))) {
            why = Some("not an f32 op".to_string());
        }
        let oc_of = |t: &TensorType, axis: usize| t.shape.get(axis).copied().unwrap_or(1);
        match kind {
            LayerKind::Conv => {
                layer.acts.push((0, data.operands[0]));
                match &operand_consts[1] {
                    Some(w) => layer.weight = Some(ConstSlot { index: 1, value: w.clone(), axis: 0 }),
                    None => why = Some("its weight is not a constant".to_string()),
                }
                if data.operands.len() > 2 {
                    match &operand_consts[2] {
                        Some(b) => layer.bias = Some(ConstSlot { index: 2, value: b.clone(), axis: 0 }),
                        None => why = Some("its bias is not a constant".to_string()),
                    }
                }
                if operand_consts[0].is_some() {
                    why = Some("its input is a constant".to_string());
                }
            }
            LayerKind::Gemm => {
                let trans_b = matches!(data.attrs.get("trans_b"), Some(Attr::Bool(true)));
                layer.acts.push((0, data.operands[0]));
                match &operand_consts[1] {
                    Some(w) => {
                        layer.weight = Some(ConstSlot { index: 1, value: w.clone(), axis: if trans_b { 0 } else { 1 } })
                    }
                    None => layer.acts.push((1, data.operands[1])),
                }
                if data.operands.len() > 2 {
                    let n = oc_of(func.ty(result), 1);
                    match &operand_consts[2] {
                        Some(c) if layer.weight.is_some() && c.shape() == [n] => {
                            layer.bias = Some(ConstSlot { index: 2, value: c.clone(), axis: 0 })
                        }
                        Some(c) if layer.weight.is_some() && c.shape() == [1, n] => {
                            layer.bias = Some(ConstSlot { index: 2, value: c.clone(), axis: 1 })
                        }
                        _ => why = Some("its c operand is not a per-column constant".to_string()),
                    }
                }
                if operand_consts[0].is_some() {
                    why = Some("its input is a constant".to_string());
                }
            }
            LayerKind::MatMul => {
                layer.acts.push((0, data.operands[0]));
                let rt = func.ty(data.operands[1]);
                match &operand_consts[1] {
                    Some(w) if rt.rank() >= 2 => {
                        layer.weight = Some(ConstSlot { index: 1, value: w.clone(), axis: rt.rank() - 1 })
                    }
                    Some(_) => why = Some("its weight is a vector".to_string()),
                    None => layer.acts.push((1, data.operands[1])),
                }
                if operand_consts[0].is_some() {
                    why = Some("its input is a constant".to_string());
                }
                // A linear layer: the matmul's only user adds a constant
                // vector along the last axis. The bias joins the layer (an
                // int32 in the accumulator) and the add's result is its
                // output, so the product is not rounded before the bias.
                if layer.weight.is_some()
                    && rt.rank() == 2
                    && !results.contains(&result)
                    && let Some(us) = uses.get(&result)
                    && let [(user, slot)] = us[..]
                    && func.body.ops.contains(&user)
                {
                    let u = &func.ops[user];
                    let n = func.ty(result).shape.last().copied();
                    if u.opcode == Opcode::Add && u.operands.len() == 2 && u.results.len() == 1 {
                        let other = 1 - slot;
                        if let Some(c) = consts.get(u.operands[other])?
                            && Some(c.shape()) == n.map(|n| vec![n]).as_deref()
                            && is_f32(func.ty(u.results[0]))
                            && func.ty(u.results[0]).shape == func.ty(result).shape
                        {
                            layer.bias = Some(ConstSlot { index: other, value: c, axis: 0 });
                            layer.bias_op = user;
                            layer.output = u.results[0];
                        }
                    }
                }
            }
            LayerKind::Add => {
                // A residual add: both operands computed. An add of a
                // constant (a bias) is left to the epilogues.
                if operand_consts.iter().any(|c| c.is_some()) {
                    continue;
                }
                layer.acts = vec![(0, data.operands[0]), (1, data.operands[1])];
            }
            LayerKind::AvgPool | LayerKind::GlobalAvgPool => {
                if operand_consts[0].is_some() {
                    continue;
                }
                layer.acts.push((0, data.operands[0]));
            }
        }
        // Absorb a relu or clip that is the only user.
        let out_v = layer.output;
        if let Some(us) = uses.get(&out_v)
            && us.len() == 1
            && !results.contains(&out_v)
        {
            let (user, _) = us[0];
            let u = &func.ops[user];
            if matches!(u.opcode, Opcode::Relu | Opcode::Clip) && u.results.len() == 1 && func.body.ops.contains(&user) {
                layer.output = u.results[0];
            }
        }
        if why.is_none() {
            why = integer_data(func, &uses, &layer);
        }
        if matches!(data.opcode.kind(), OpKind::Conv(_, Form::Sparse) | OpKind::MatMul(Form::Sparse)) {
            why = Some("a 2:4 sparse layer: there is no int8 sparse kernel yet, so it stays in float".to_string());
        }
        layer.unsupported = why;
        out.push(layer);
    }
    Ok(out)
}

/// Why `layer` computes on integer data, if it does: an activation that is
/// integers cast to float, or a result cast to an integer type (index
/// arithmetic, such as the position ids a CumSum lowered to a matmul with a
/// triangle of ones computes). Rounding to 256 levels would change such
/// values, and an index one off selects another row, silently.
fn integer_data(func: &Func, uses: &HashMap<ValueId, Vec<(OpId, usize)>>, layer: &Layer) -> Option<String> {
    let moves = |op: Opcode| matches!(op.kind(), OpKind::Movement(_)) || matches!(op, Opcode::Relu | Opcode::Clip);
    for &(_, mut v) in &layer.acts {
        while let ValueDef::Result(op, _) = func.values[v].def {
            let d = &func.ops[op];
            if d.opcode == Opcode::Cast && d.operands.first().is_some_and(|&x| !func.ty(x).elem.is_float()) {
                return Some(format!("its input %{} is integer data cast to float", func.name_of(v)));
            }
            match d.operands.first() {
                Some(&x) if moves(d.opcode) => v = x,
                _ => break,
            }
        }
    }
    let mut todo = vec![layer.output];
    let mut seen = HashSet::new();
    while let Some(v) = todo.pop() {
        if !seen.insert(v) {
            continue;
        }
        for &(user, _) in uses.get(&v).into_iter().flatten() {
            let u = &func.ops[user];
            if u.opcode == Opcode::Cast && u.results.iter().any(|&r| !func.ty(r).elem.is_float()) {
                return Some(format!("its result is cast to an integer type at %{}: rounding would change it", func.name_of(u.results[0])));
            }
            if moves(u.opcode) {
                todo.extend(&u.results);
            }
        }
    }
    None
}

/// The average pools in `active` none of whose readers is another layer of
/// `active` (through data movement that keeps values): an int8 pool feeding
/// a float layer would only add the rounding of its output (and a range
/// fitted to few pooled values), since its result must be quantized.
pub fn pools_without_int8_readers(func: &Func, layers: &[Layer], active: &HashSet<usize>) -> Vec<usize> {
    // The value each activation operand of an active layer comes from,
    // before data movement.
    let mut read: HashSet<ValueId> = HashSet::new();
    for &i in active {
        for &(_, mut v) in &layers[i].acts {
            loop {
                read.insert(v);
                match func.values[v].def {
                    ValueDef::Result(op, _) if passes_params(func.ops[op].opcode) => v = func.ops[op].operands[0],
                    _ => break,
                }
            }
        }
    }
    let mut out: Vec<usize> = active
        .iter()
        .copied()
        .filter(|&i| matches!(layers[i].kind, LayerKind::AvgPool | LayerKind::GlobalAvgPool) && !read.contains(&layers[i].output))
        .collect();
    out.sort_unstable();
    out
}

/// The values whose ranges calibration must observe: every activation and
/// output of every quantizable layer, in order of first appearance.
pub fn observed_values(layers: &[Layer]) -> Vec<ValueId> {
    let mut seen = HashSet::new();
    let mut out = vec![];
    for l in layers.iter().filter(|l| l.unsupported.is_none()) {
        for v in l.acts.iter().map(|&(_, v)| v).chain([l.output]) {
            if seen.insert(v) {
                out.push(v);
            }
        }
    }
    out
}

/// The fp8 (e4m3) type of an activation with per-tensor `scale`.
pub fn fp8_type(scale: f64) -> QuantType {
    QuantType { storage: Scalar::F8E4M3FN, expressed: Scalar::F32, params: QuantParams::PerTensor { scale, zero_point: 0 } }
}

/// The quantized element type of an activation with real range [lo, hi].
pub fn activation_type(lo: f64, hi: f64, precision: Precision, act: Activations) -> QuantType {
    let f32r = |x: f64| x as f32 as f64;
    let amax = lo.abs().max(hi.abs());
    let (storage, params) = match (precision, act) {
        (Precision::Fp8, _) => return fp8_type(if amax > 0.0 { f32r(amax / 448.0) } else { 1.0 }),
        (Precision::Int8, Activations::S8) => {
            let scale = if amax > 0.0 { f32r(amax / 127.0) } else { 1.0 };
            (Scalar::I8, QuantParams::PerTensor { scale, zero_point: 0 })
        }
        (Precision::Int8, Activations::U8) => {
            let (lo, hi) = (lo.min(0.0), hi.max(0.0));
            if hi - lo <= 0.0 {
                (Scalar::U8, QuantParams::PerTensor { scale: 1.0, zero_point: 0 })
            } else {
                let scale = f32r((hi - lo) / 255.0);
                let zero_point = (-lo / scale).round().clamp(0.0, 255.0) as i64;
                (Scalar::U8, QuantParams::PerTensor { scale, zero_point })
            }
        }
    };
    QuantType { storage, expressed: Scalar::F32, params }
}

/// The number of quantization steps between 0 and the clip T that a
/// range method should assume for a tensor with minimum `min`.
pub fn levels(min: f64, precision: Precision, act: Activations) -> usize {
    match (precision, act) {
        (Precision::Int8, Activations::U8) if min >= 0.0 => 255,
        _ => 127,
    }
}

/// The largest |x| of each slice along `axis` of `vals` (shape `shape`).
fn channel_amax(vals: &[f64], shape: &[usize], axis: usize) -> Vec<f64> {
    let oc = shape.get(axis).copied().unwrap_or(1).max(1);
    let inner: usize = shape.iter().skip(axis + 1).product::<usize>().max(1);
    let mut amax = vec![0f64; oc];
    for (i, v) in vals.iter().enumerate() {
        let c = (i / inner) % oc;
        amax[c] = amax[c].max(v.abs());
    }
    amax
}

/// A weight quantized symmetrically, per channel along `axis` or per tensor.
fn quantize_weight(w: &Tensor, axis: usize, per_channel: bool, precision: Precision) -> (Tensor, Vec<f64>) {
    let shape = w.shape().to_vec();
    let vals = w.to_f64();
    let mut amax = channel_amax(&vals, &shape, axis);
    let oc = amax.len();
    if !per_channel {
        let m = amax.iter().cloned().fold(0.0, f64::max);
        amax = vec![m; oc];
    }
    let top = match precision {
        Precision::Int8 => 127.0,
        Precision::Fp8 => 448.0,
    };
    let mut scales: Vec<f64> = amax.iter().map(|&a| if a > 0.0 { (a / top) as f32 as f64 } else { 1.0 }).collect();
    if precision == Precision::Fp8 {
        let inner: usize = shape.iter().skip(axis + 1).product::<usize>().max(1);
        let mut channels: Vec<Vec<f32>> = vec![vec![]; if per_channel { oc } else { 1 }];
        for (i, v) in vals.iter().enumerate() {
            let c = if per_channel { (i / inner) % oc } else { 0 };
            channels[c].push(*v as f32);
        }
        for (c, xs) in channels.iter().enumerate() {
            let s = fp8_weight_scale(xs, amax[c]);
            if per_channel { scales[c] = s } else { scales.fill(s) }
        }
    }
    let storage = match precision {
        Precision::Int8 => Scalar::I8,
        Precision::Fp8 => Scalar::F8E4M3FN,
    };
    let params = if per_channel {
        QuantParams::PerAxis { axis, scales: scales.clone(), zero_points: vec![0; oc] }
    } else {
        QuantParams::PerTensor { scale: scales[0], zero_point: 0 }
    };
    let q = QuantType { storage, expressed: Scalar::F32, params };
    let ty = TensorType::new(shape.clone(), ElemType::Quant(Box::new(q.clone())));
    let data = quantize_values(&vals, &shape, &q, true);
    (Tensor { ty, data }, scales)
}

/// The scale of an fp8 (e4m3) weight slice with largest magnitude `amax`.
/// e4m3's error is relative, so which scale is best depends on where the
/// values fall inside their binades: the scales `amax / 448 · 2^(k/16)`,
/// k = 0..15, keep every value in range (scaling by 2 repeats the grid)
/// and the one with the least squared error wins (k = 0 on a tie).
fn fp8_weight_scale(xs: &[f32], amax: f64) -> f64 {
    if amax <= 0.0 {
        return 1.0;
    }
    let mut best = (f64::INFINITY, 1.0);
    for k in 0..16 {
        let s = (amax / 448.0 * 2f64.powf(k as f64 / 16.0)) as f32;
        let err: f64 = xs
            .iter()
            .map(|&x| {
                let d = x.abs() - e4m3_round(x.abs() / s) * s;
                (d * d) as f64
            })
            .sum();
        if err < best.0 {
            best = (err, s as f64);
        }
    }
    best.1
}

/// A bias as int32 with scale `s_x · s_w[o]` per channel (or, where that
/// would overflow int32, a scale the value fits in).
fn quantize_bias(b: &Tensor, axis: usize, s_x: f64, s_w: &[f64]) -> Tensor {
    let shape = b.shape().to_vec();
    let vals = b.to_f64();
    let amax = channel_amax(&vals, &shape, axis);
    let oc = amax.len();
    let limit = (1u64 << 30) as f64;
    let scales: Vec<f64> = (0..oc)
        .map(|c| {
            let s = (s_x * s_w[c.min(s_w.len() - 1)]) as f32 as f64;
            if s > 0.0 && amax[c] / s < limit { s } else if amax[c] > 0.0 { (amax[c] / limit) as f32 as f64 } else { 1.0 }
        })
        .collect();
    let q = QuantType {
        storage: Scalar::I32,
        expressed: Scalar::F32,
        params: QuantParams::PerAxis { axis, scales, zero_points: vec![0; oc] },
    };
    let ty = TensorType::new(shape.clone(), ElemType::Quant(Box::new(q.clone())));
    let data = quantize_values(&vals, &shape, &q, true);
    Tensor { ty, data }
}

/// How to quantize weights.
#[derive(Clone, Copy, Debug)]
pub struct WeightFormat {
    pub precision: Precision,
    pub per_channel: bool,
    /// Quantize layer outputs too (int8: the integer ops need a quantized
    /// result). fp8 quantizes only the inputs of convolutions and matmuls,
    /// which compute in fp8 and write a wider type, as TensorRT does.
    pub outputs: bool,
}

/// Quantized weights by layer index, made once per `aoc quantize` run: the
/// sensitivity and target searches build the graph dozens of times.
pub type WeightCache = std::cell::RefCell<HashMap<usize, (Tensor, Vec<f64>)>>;

/// `func` with the layers `active` (indices into `layers`) quantized;
/// `act_type(v)` gives the quantized type of each activation value (from
/// calibration). Returns the new function.
pub fn build(
    func: &Func,
    layers: &[Layer],
    active: &HashSet<usize>,
    act_type: &dyn Fn(ValueId) -> Option<QuantType>,
    wf: WeightFormat,
    cache: &WeightCache,
) -> Result<Func, String> {
    let mut f = func.clone();
    // Roles: outputs of quantized layers replace every use; other
    // activations only the uses by quantized layers (and data movement
    // that passes their parameters on).
    #[derive(Clone, Copy, PartialEq)]
    enum Role {
        Input,
        Output,
    }
    let mut role: BTreeMap<ValueId, Role> = BTreeMap::new();
    let mut act_uses: HashSet<(OpId, usize)> = HashSet::new();
    for (i, l) in layers.iter().enumerate() {
        if !active.contains(&i) {
            continue;
        }
        for &(idx, v) in &l.acts {
            role.entry(v).or_insert(Role::Input);
            act_uses.insert((l.op, idx));
        }
        if wf.outputs {
            role.insert(l.output, Role::Output);
        }
    }
    // Parameters: a value made by data movement from a quantized value
    // inherits that value's type.
    let source = |v: ValueId| -> ValueId {
        let mut v = v;
        while let Some(op) = func.def_op(v) {
            let d = &func.ops[op];
            if passes_params(d.opcode) && role.contains_key(&d.operands[0]) {
                v = d.operands[0];
            } else {
                break;
            }
        }
        v
    };
    let mut qtype: HashMap<ValueId, QuantType> = HashMap::new();
    for &v in role.keys() {
        let src = source(v);
        let q = act_type(src).ok_or_else(|| format!("internal error: no calibrated range for %{} (please report)", func.name_of(src)))?;
        qtype.insert(v, q);
    }
    // Data movement whose result is quantized with its operand's type reads
    // the dequantized operand.
    for &v in role.keys() {
        if let Some(op) = func.def_op(v) {
            let d = &func.ops[op];
            if passes_params(d.opcode) && role.contains_key(&d.operands[0]) && qtype.get(&d.operands[0]) == qtype.get(&v) {
                act_uses.insert((op, 0));
            }
        }
    }

    // New ops, placed after the op defining a value (None: the parameters)
    // or before a layer.
    let mut after: HashMap<Option<OpId>, Vec<OpId>> = HashMap::new();
    let mut before: HashMap<OpId, Vec<OpId>> = HashMap::new();
    let mut dq_of: HashMap<ValueId, ValueId> = HashMap::new();
    let take_new = |f: &mut Func, n: usize| -> Vec<OpId> {
        let len = f.body.ops.len();
        f.body.ops.split_off(len - n)
    };
    for (&v, _) in &role {
        let q = qtype[&v].clone();
        let ty = func.ty(v);
        let qty = TensorType::new(ty.shape.clone(), ElemType::Quant(Box::new(q)));
        let name = func.name_of(v).to_string();
        let loc = func.values[v].loc.clone();
        let qv = f
            .push_op(Opcode::Quantize, &[v], Attrs::new(), Some(vec![qty]), &format!("{name}.q"), loc.clone())
            .map_err(|d| format!("error: cannot quantize %{name}: {}", d.message))?[0];
        let dq = f
            .push_op(Opcode::Dequantize, &[qv], Attrs::new(), None, &format!("{name}.dq"), loc)
            .map_err(|d| format!("error: cannot dequantize %{name}: {}", d.message))?[0];
        let new = take_new(&mut f, 2);
        after.entry(func.def_op(v)).or_default().extend(new);
        dq_of.insert(v, dq);
    }
    // Uses: the function's own ops (not the new quantize ops).
    let original: Vec<OpId> = func.body.ops.clone();
    for &op in &original {
        let n = f.ops[op].operands.len();
        for i in 0..n {
            let v = f.ops[op].operands[i];
            let Some(&dq) = dq_of.get(&v) else { continue };
            if role[&v] == Role::Output || act_uses.contains(&(op, i)) {
                f.ops[op].operands[i] = dq;
            }
        }
    }
    let returned: Vec<ValueId> = f.body.terminator.clone();
    for (i, r) in returned.into_iter().enumerate() {
        if let Some(&dq) = dq_of.get(&r)
            && role[&r] == Role::Output
        {
            // The result keeps its name (the artifact's output name).
            let name = f.name_of(r).to_string();
            let float_name = f.fresh_name(&format!("{name}.float"));
            f.rename(r, float_name);
            f.rename(dq, name);
            f.body.terminator[i] = dq;
        }
    }
    // Weights and biases of the quantized layers.
    for (i, l) in layers.iter().enumerate() {
        if !active.contains(&i) {
            continue;
        }
        let Some(w) = &l.weight else { continue };
        let loc = func.ops[l.op].loc.clone();
        let (wq, scales) = cache
            .borrow_mut()
            .entry(i)
            .or_insert_with(|| quantize_weight(&w.value, w.axis, wf.per_channel, wf.precision))
            .clone();
        let mut new = vec![];
        let wname = format!("{}.w", l.value_name);
        let dq = push_const_dq(&mut f, wq, &wname, loc.clone())?;
        new.extend(take_new(&mut f, 2));
        f.ops[l.op].operands[w.index] = dq;
        if let Some(b) = &l.bias {
            let s_x = l.acts.first().and_then(|&(_, v)| qtype.get(&v)).map_or(1.0, |q| q.params_at(0).0);
            let bq = quantize_bias(&b.value, b.axis, s_x, &scales);
            let dq = push_const_dq(&mut f, bq, &format!("{}.b", l.value_name), loc)?;
            new.extend(take_new(&mut f, 2));
            f.ops[l.bias_op].operands[b.index] = dq;
        }
        before.entry(l.op).or_default().extend(new);
    }
    // Program order: the new ops where they belong.
    let mut order = after.remove(&None).unwrap_or_default();
    for &op in &original {
        if let Some(b) = before.remove(&op) {
            order.extend(b);
        }
        order.push(op);
        if let Some(a) = after.remove(&Some(op)) {
            order.extend(a);
        }
    }
    f.body.ops = order;
    remove_dead(&mut f);
    Ok(f)
}

/// `const` holding `t` and its `quant.dequantize`; returns the dequantized value.
fn push_const_dq(f: &mut Func, t: Tensor, name: &str, loc: aoc_ir::Location) -> Result<ValueId, String> {
    let ty = t.ty.clone();
    let attrs = Attrs::new().with("value", Attr::Const(ConstValue::tensor(t)));
    let c = f
        .push_op(Opcode::Const, &[], attrs, Some(vec![ty]), &format!("{name}_quantized"), loc.clone())
        .map_err(|d| format!("error: cannot store %{name}: {}", d.message))?[0];
    let dq = f
        .push_op(Opcode::Dequantize, &[c], Attrs::new(), None, name, loc)
        .map_err(|d| format!("error: cannot dequantize %{name}: {}", d.message))?[0];
    Ok(dq)
}

/// Removes pure ops whose results nothing uses (the float weights the
/// quantized ones replaced), repeatedly.
pub fn remove_dead(f: &mut Func) {
    loop {
        let mut used: HashSet<ValueId> = f.body.terminator.iter().copied().collect();
        for &op in &f.body.ops {
            used.extend(f.ops[op].operands.iter().copied());
            for r in &f.ops[op].regions {
                for &rop in &r.ops {
                    used.extend(f.ops[rop].operands.iter().copied());
                }
                used.extend(r.terminator.iter().copied());
            }
        }
        let before = f.body.ops.len();
        let ops = std::mem::take(&mut f.body.ops);
        f.body.ops = ops
            .into_iter()
            .filter(|&op| {
                let d = &f.ops[op];
                let pure = d.opcode.info().traits.contains(&Trait::Pure);
                !pure || d.results.is_empty() || d.results.iter().any(|r| used.contains(r))
            })
            .collect();
        if f.body.ops.len() == before {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aoc_ir::tensor::round_f8;

    #[test]
    fn fast_e4m3_rounding_is_round_f8() {
        let mut x = 1e-4f32;
        while x < 448.0 {
            for v in [x, x * 1.0625, x * 1.1875, x * 1.3] {
                assert_eq!(e4m3_round(v) as f64, round_f8(Scalar::F8E4M3FN, v as f64, true), "{v}");
            }
            x *= 1.07;
        }
        assert_eq!(e4m3_round(0.0), 0.0);
        assert_eq!(e4m3_round(448.0), 448.0);
    }

    #[test]
    fn fp8_weight_scales_keep_the_range_and_never_lose_to_the_plain_scale() {
        let err = |xs: &[f32], s: f64| -> f64 {
            xs.iter().map(|&x| (x as f64 - round_f8(Scalar::F8E4M3FN, x as f64 / s, true) * s).powi(2)).sum()
        };
        // Pseudo-random slices of several shapes and spreads.
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        let mut gained = 0;
        for spread in [1.0, 3.0, 10.0] {
            for _ in 0..20 {
                let xs: Vec<f32> = (0..256).map(|_| (next() * next().abs().powf(spread)) as f32).collect();
                let amax = xs.iter().fold(0f64, |m, &x| m.max(x.abs() as f64));
                let s = fp8_weight_scale(&xs, amax);
                let plain = (amax / 448.0) as f32 as f64;
                assert!(amax / s <= 448.0 * (1.0 + 1e-6), "{amax} / {s} overflows e4m3");
                let (e, e0) = (err(&xs, s), err(&xs, plain));
                assert!(e <= e0 * (1.0 + 1e-9), "searched {e} > plain {e0}");
                gained += (e < e0 * 0.95) as usize;
            }
        }
        assert!(gained > 30, "the search should usually help: {gained} of 60");
    }
}
