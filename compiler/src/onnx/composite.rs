//! ONNX ops imported as compositions of aoc ops that both backends run
//! natively: what ONNX defines as a function body, or an exact equivalent.
//!
//! - `DepthToSpace`/`SpaceToDepth`: reshape, transpose, reshape.
//! - `InstanceNormalization`/`GroupNormalization`: `core.layer_norm` over
//!   the spatial (group) elements, then the per-channel scale and shift.
//! - `CumSum` (float): a product with a constant triangular matrix along
//!   the summed axis.
//! - `ArgMax`/`ArgMin`: the extreme value, then the least (or, with
//!   `select_last_index`, the greatest) index where it occurs.
//! - `OneHot`: rows of a constant one-hot table gathered by the indices.
//! - `GatherElements`: each index turned into a flat element offset by
//!   integer pointwise ops, then one `core.gather` on the flattened data;
//!   `GatherND` likewise, each index tuple a flat row.
//! - `TopK` (float, constant `k` up to [`TOPK_MAX_K`]): `k` rounds of the
//!   extreme value, its least index (ties: lower index first, as ONNX
//!   Runtime), and that element masked out with an infinity.
//! - `ScatterElements`/`ScatterND` with constant indices: the element each
//!   output position takes, from the data or the updates, is known at
//!   import time, so the scatter is one gather over data and updates
//!   concatenated (reduction `none`), or per layer of repeated targets a
//!   gather, the reduction and a `where` with a constant mask.
//! - `Einsum` (one or two operands, no diagonals): sums, transposes and one
//!   batched matrix product.

use super::context::{Cx, Node, R, V};
use super::elementwise::bool_const;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::normalize_axis;
use aoc_ir::{Opcode, Scalar, Tensor, TensorType};

impl Cx<'_> {
    /// A constant of the given shape and element type.
    fn filled(shape: Vec<usize>, s: Scalar, values: Vec<f64>) -> V {
        V::konst(Tensor::from_f64(TensorType::new(shape, s), values))
    }
    fn float_elem(&self, v: &V) -> R<Scalar> {
        match self.ty(v).elem.scalar() {
            Some(s) if s.is_float() => Ok(s),
            _ => Err(self.bad(format!("input must be a float tensor, found {}", self.ty(v)))),
        }
    }
    /// `v` as floats: itself, or an integer (or bool) tensor cast to f32,
    /// with the integer type to cast a result back to. Exporters feed
    /// ArgMax and CumSum integer masks (`(ids == eos).int().argmax()`,
    /// `mask.cumsum()` for position ids) and the integer reductions have
    /// no kernels; f32 holds every integer up to 2^24 exactly.
    fn as_float(&mut self, v: &V) -> R<(V, Scalar, Option<Scalar>)> {
        match self.ty(v).elem.scalar() {
            Some(s) if s.is_float() => Ok((v.clone(), s, None)),
            Some(s) => {
                let f = self.op1(Opcode::Cast, std::slice::from_ref(v), Attrs::new().with("to", Attr::Type(Scalar::F32)))?;
                Ok((f, Scalar::F32, Some(s)))
            }
            None => Err(self.bad(format!("input must be a float or integer tensor, found {}", self.ty(v)))),
        }
    }
}

/// `DepthToSpace` and `SpaceToDepth` (modes DCR and CRD) on NCHW.
pub fn depth_space(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let s = cx.shape(&x);
    let b = n.int("blocksize", 0);
    if s.len() != 4 || b <= 0 {
        return Err(cx.bad(format!("expected a rank-4 input and a positive blocksize, found {s:?} and {b}")));
    }
    let b = b as usize;
    let [bn, c, h, w] = [s[0], s[1], s[2], s[3]];
    let (inner, perm, out) = if n.op_type == "DepthToSpace" {
        if c % (b * b) != 0 {
            return Err(cx.bad(format!("channels ({c}) must be a multiple of blocksize² ({})", b * b)));
        }
        let oc = c / (b * b);
        match n.str("mode", "DCR").as_str() {
            "DCR" => (vec![bn, b, b, oc, h, w], [0, 3, 4, 1, 5, 2], vec![bn, oc, h * b, w * b]),
            "CRD" => (vec![bn, oc, b, b, h, w], [0, 1, 4, 2, 5, 3], vec![bn, oc, h * b, w * b]),
            m => return Err(cx.bad(format!("unknown mode `{m}` (DCR or CRD)"))),
        }
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(cx.bad(format!("height and width ({h}, {w}) must be multiples of blocksize ({b})")));
        }
        let perm = match n.str("mode", "DCR").as_str() {
            "DCR" => [0, 3, 5, 1, 2, 4],
            "CRD" => [0, 1, 3, 5, 2, 4],
            m => return Err(cx.bad(format!("unknown mode `{m}` (DCR or CRD)"))),
        };
        (vec![bn, c, h / b, b, w / b, b], perm, vec![bn, c * b * b, h / b, w / b])
    };
    let r = cx.reshape(&x, &inner)?;
    let t = cx.transpose(&r, &perm)?;
    Ok(vec![cx.reshape(&t, &out)?])
}

/// `InstanceNormalization` (groups of one channel) and
/// `GroupNormalization` (scale and bias per group before opset 21, per
/// channel from 21; told apart by their length).
pub fn instance_group_norm(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let elem = cx.float_elem(&x)?;
    let shape = cx.shape(&x);
    if shape.len() < 2 {
        return Err(cx.bad(format!("input rank must be at least 2, found {}", shape.len())));
    }
    let (bn, c) = (shape[0], shape[1]);
    let spatial: usize = shape[2..].iter().product();
    let groups = if n.op_type == "InstanceNormalization" {
        c
    } else {
        match n.opt_int("num_groups") {
            Some(g) if g > 0 && c % g as usize == 0 => g as usize,
            g => return Err(cx.bad(format!("num_groups ({g:?}) must be a positive divisor of the channels ({c})"))),
        }
    };
    let epsilon = n.float("epsilon", 1e-5);
    let grouped = cx.reshape(&x, &[bn, groups, (c / groups) * spatial])?;
    let ones = Cx::filled(vec![1], elem, vec![1.0]);
    let attrs = Attrs::new().with("axis", Attr::Int(-1)).with("epsilon", Attr::Float(epsilon));
    let normed = cx.op1(Opcode::LayerNorm, &[grouped, ones], attrs)?;
    let per_channel = cx.reshape(&normed, &[bn, c, spatial])?;
    // Scale and bias as [C, 1] columns (per group: each repeated C/G times).
    let column = |cx: &mut Cx, i: usize, what: &str| -> R<V> {
        let p = cx.need(n, i)?.clone();
        let len: usize = cx.shape(&p).iter().product();
        if len == c {
            cx.reshape(&p, &[c, 1])
        } else if len == groups {
            let g = cx.reshape(&p, &[groups, 1])?;
            let shape = Cx::filled(vec![2], Scalar::I64, vec![groups as f64, (c / groups) as f64]);
            let wide = cx.bin(Opcode::Expand, &g, &shape)?;
            cx.reshape(&wide, &[c, 1])
        } else {
            Err(cx.bad(format!("{what} has {len} elements, expected {c} (channels) or {groups} (groups)")))
        }
    };
    let scale = column(cx, 1, "scale")?;
    let bias = column(cx, 2, "bias")?;
    let scaled = cx.bin(Opcode::Mul, &per_channel, &scale)?;
    let shifted = cx.bin(Opcode::Add, &scaled, &bias)?;
    Ok(vec![cx.reshape(&shifted, &shape)?])
}

/// `CumSum`: `x · T` along the axis, `T[i][j] = 1` where element `i`
/// counts toward result `j`. Integers are summed in f32 and cast back:
/// exact while every partial sum stays within ±2^24 (position ids from a
/// mask; larger sums round).
pub fn cumsum(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let (x, elem, int) = cx.as_float(&x)?;
    let shape = cx.shape(&x);
    let axis = cx.const_input(n, 1, "axis")?;
    if axis.len() != 1 {
        return Err(cx.bad("axis must hold one integer"));
    }
    let axis = axis.get_i64(0);
    let axis = normalize_axis(axis, shape.len()).map_err(|m| cx.bad(m))?;
    let (exclusive, reverse) = (n.int("exclusive", 0) != 0, n.int("reverse", 0) != 0);
    let len = shape[axis];
    let counts = |i: usize, j: usize| match (reverse, exclusive) {
        (false, false) => i <= j,
        (false, true) => i < j,
        (true, false) => i >= j,
        (true, true) => i > j,
    };
    let t: Vec<f64> = (0..len * len).map(|k| f64::from(u8::from(counts(k / len, k % len)))).collect();
    let tri = Cx::filled(vec![len, len], elem, t);
    let last = shape.len() - 1;
    let mut perm: Vec<usize> = (0..shape.len()).collect();
    perm.swap(axis, last);
    let moved = if axis == last { x } else { cx.transpose(&x, &perm)? };
    let summed = cx.bin(Opcode::MatMul, &moved, &tri)?;
    let out = if axis == last { summed } else { cx.transpose(&summed, &perm)? };
    Ok(vec![match int {
        Some(s) => cx.op1(Opcode::Cast, &[out], Attrs::new().with("to", Attr::Type(s)))?,
        None => out,
    }])
}

/// `ArgMax`/`ArgMin` (int64 result). Integers are compared in f32: exact
/// for values within ±2^24 (masks and ids; larger values that round
/// together tie).
pub fn arg_extreme(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let (x, elem, _) = cx.as_float(&x)?;
    let shape = cx.shape(&x);
    let axis = normalize_axis(n.int("axis", 0), shape.len()).map_err(|m| cx.bad(m))?;
    let last = n.int("select_last_index", 0) != 0;
    let reduce = |keep: bool| Attrs::new().with("axes", Attr::Ints(vec![axis as i64])).with("keepdims", Attr::Bool(keep));
    let extreme_op = if n.op_type == "ArgMax" { Opcode::ReduceMax } else { Opcode::ReduceMin };
    let attrs = reduce(true);
    let m = cx.op1(extreme_op, std::slice::from_ref(&x), attrs)?;
    let hit = cx.bin(Opcode::Equal, &x, &m)?;
    let len = shape[axis];
    let mut idx_shape = vec![1; shape.len()];
    idx_shape[axis] = len;
    let index = Cx::filled(idx_shape, elem, (0..len).map(|i| i as f64).collect());
    let miss = Cx::filled(vec![], elem, vec![if last { -1.0 } else { len as f64 }]);
    let cand = cx.op1(Opcode::Where, &[hit, index, miss], Attrs::new())?;
    let pick = if last { Opcode::ReduceMax } else { Opcode::ReduceMin };
    let i = cx.op1(pick, &[cand], reduce(n.int("keepdims", 1) != 0))?;
    Ok(vec![cx.op1(Opcode::Cast, &[i], Attrs::new().with("to", Attr::Type(Scalar::I64)))?])
}

/// `OneHot` with a constant depth and values: rows of a constant
/// `[depth, depth]` table (`on` on the diagonal) gathered by the indices,
/// then the new axis moved into place. Negative indices count from the
/// end as ONNX says; an index outside `[-depth, depth)` is a run-time
/// error (ONNX gives a row of `off`).
pub fn one_hot(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let idx = cx.need(n, 0)?.clone();
    let depth = cx.const_input(n, 1, "depth")?;
    let depth = if depth.len() == 1 { depth.get_f64(0) } else { f64::NAN };
    let values = cx.const_input(n, 2, "values")?.clone();
    if values.len() != 2 || !(1.0..=65536.0).contains(&depth) {
        return Err(cx.bad("depth must be a constant in 1..=65536 and values must hold [off, on]"));
    }
    let depth = depth as usize;
    let shape = cx.shape(&idx);
    let rank = shape.len() + 1;
    let axis = normalize_axis(n.int("axis", -1), rank).map_err(|m| cx.bad(m))?;
    let idx = match cx.ty(&idx).elem.scalar() {
        Some(Scalar::I64) => idx,
        _ => cx.op1(Opcode::Cast, &[idx], Attrs::new().with("to", Attr::Type(Scalar::I64)))?,
    };
    let (off, on) = (values.get_f64(0), values.get_f64(1));
    let table: Vec<f64> = (0..depth * depth).map(|k| if k / depth == k % depth { on } else { off }).collect();
    let vs = values.ty.elem.scalar().unwrap_or(Scalar::F32);
    let table = Cx::filled(vec![depth, depth], vs, table);
    let rows = cx.op1(Opcode::Gather, &[table, idx], Attrs::new().with("axis", Attr::Int(0)))?;
    if axis == rank - 1 {
        return Ok(vec![rows]);
    }
    let mut perm: Vec<usize> = (0..rank - 1).collect();
    perm.insert(axis, rank - 1);
    Ok(vec![cx.transpose(&rows, &perm)?])
}

/// One Einsum operand's subscripts, with `...` spelled out as one
/// placeholder letter per broadcast dimension (`'0'`, `'1'`, ...; aligned
/// to the right, as numpy does).
fn einsum_term(cx: &Cx, term: &str, rank: usize, ellipsis: usize) -> R<Vec<char>> {
    let letters: Vec<char> = term.replace("...", "").chars().collect();
    if letters.iter().any(|c| !c.is_ascii_alphabetic()) {
        return Err(cx.bad(format!("subscripts `{term}` may hold only letters and one `...`")));
    }
    let mut out = vec![];
    if let Some((before, after)) = term.split_once("...") {
        let n = rank.checked_sub(letters.len()).ok_or_else(|| cx.bad(format!("`{term}` names more dimensions than the rank {rank}")))?;
        out.extend(before.chars());
        out.extend((ellipsis - n..ellipsis).map(|i| char::from(b'0' + i as u8)));
        out.extend(after.chars());
    } else {
        out = letters;
    }
    if out.len() != rank {
        return Err(cx.bad(format!("`{term}` names {} dimensions, but the operand has rank {rank}", out.len())));
    }
    if (1..out.len()).any(|i| out[..i].contains(&out[i])) {
        return Err(cx.bad(format!("`{term}` repeats a subscript (diagonals are unsupported)")));
    }
    Ok(out)
}

/// `Einsum` of one or two operands without diagonals: sums over the
/// subscripts only one operand has and the output lacks, then one batched
/// `core.matmul` (`[batch, left, k] · [batch, k, right]`) between
/// transposes and reshapes.
pub fn einsum(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let eq: String = n.str("equation", "").chars().filter(|c| !c.is_whitespace()).collect();
    let operands: Vec<V> = (0..n.inputs.len()).map(|i| cx.need(n, i).cloned()).collect::<R<_>>()?;
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != operands.len() || !(1..=2).contains(&terms.len()) {
        return Err(cx.bad(format!("equation `{eq}` with {} operands: one or two operands are supported", operands.len())));
    }
    let ranks: Vec<usize> = operands.iter().map(|v| cx.shape(v).len()).collect();
    let ellipsis = terms
        .iter()
        .zip(&ranks)
        .map(|(t, &r)| if t.contains("...") { r.saturating_sub(t.replace("...", "").len()) } else { 0 })
        .max()
        .unwrap_or(0);
    if ellipsis > 10 {
        return Err(cx.bad(format!("`...` stands for {ellipsis} dimensions; at most 10 are supported")));
    }
    let mut subs = vec![];
    for (t, &r) in terms.iter().zip(&ranks) {
        subs.push(einsum_term(cx, t, r, ellipsis)?);
    }
    let out: Vec<char> = match &rhs {
        Some(r) => {
            let rank = r.replace("...", "").len() + if r.contains("...") { ellipsis } else { 0 };
            einsum_term(cx, r, rank, ellipsis)?
        }
        None => {
            // Implicit output: the broadcast dimensions, then the letters
            // that occur once, in alphabetical order.
            let all: Vec<char> = subs.concat();
            let mut once: Vec<char> = all.iter().copied().filter(|c| c.is_ascii_alphabetic() && all.iter().filter(|d| *d == c).count() == 1).collect();
            once.sort();
            (0..ellipsis).map(|i| char::from(b'0' + i as u8)).chain(once).collect()
        }
    };
    // Dimension sizes, which every occurrence must agree on.
    let mut size: std::collections::HashMap<char, usize> = std::collections::HashMap::new();
    for (s, v) in subs.iter().zip(&operands) {
        for (c, d) in s.iter().zip(cx.shape(v)) {
            if *size.entry(*c).or_insert(d) != d {
                return Err(cx.bad(format!("subscript `{c}` has sizes {} and {d} (broadcasting is unsupported)", size[c])));
            }
        }
    }
    if let Some(c) = out.iter().find(|c| !size.contains_key(c)) {
        return Err(cx.bad(format!("output subscript `{c}` names no input dimension")));
    }
    // Sum away what only one operand has and the output does not.
    let mut vals: Vec<(V, Vec<char>)> = operands.iter().cloned().zip(subs).collect();
    for i in 0..vals.len() {
        let others: Vec<char> = vals.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, (_, s))| s.clone()).collect();
        let (v, s) = vals[i].clone();
        let gone: Vec<i64> = (0..s.len()).filter(|&k| !out.contains(&s[k]) && !others.contains(&s[k])).map(|k| k as i64).collect();
        if gone.is_empty() {
            continue;
        }
        let attrs = Attrs::new().with("axes", Attr::Ints(gone.clone())).with("keepdims", Attr::Bool(false));
        let summed = cx.op1(Opcode::ReduceSum, &[v], attrs)?;
        let kept: Vec<char> = s.iter().enumerate().filter(|(k, _)| !gone.contains(&(*k as i64))).map(|(_, c)| *c).collect();
        vals[i] = (summed, kept);
    }
    let arrange = |cx: &mut Cx, v: &V, from: &[char], to: &[char]| -> R<V> {
        let perm: Vec<usize> = to.iter().filter_map(|c| from.iter().position(|d| d == c)).collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) { Ok(v.clone()) } else { cx.transpose(v, &perm) }
    };
    let dims = |cs: &[char]| cs.iter().map(|c| size[c]).collect::<Vec<usize>>();
    let result = if let [(a, sa), (b, sb)] = &vals[..] {
        let batch: Vec<char> = sa.iter().copied().filter(|c| sb.contains(c) && out.contains(c)).collect();
        let contract: Vec<char> = sa.iter().copied().filter(|c| sb.contains(c) && !out.contains(c)).collect();
        let left: Vec<char> = sa.iter().copied().filter(|c| !sb.contains(c)).collect();
        let right: Vec<char> = sb.iter().copied().filter(|c| !sa.contains(c)).collect();
        let prod = |cs: &[char]| dims(cs).iter().product::<usize>();
        let (nb, nl, nk, nr) = (prod(&batch), prod(&left), prod(&contract), prod(&right));
        let a = arrange(cx, a, sa, &[batch.clone(), left.clone(), contract.clone()].concat())?;
        let a = cx.reshape(&a, &[nb, nl, nk])?;
        let b = arrange(cx, b, sb, &[batch.clone(), contract.clone(), right.clone()].concat())?;
        let b = cx.reshape(&b, &[nb, nk, nr])?;
        let p = cx.bin(Opcode::MatMul, &a, &b)?;
        let order = [batch, left, right].concat();
        let p = cx.reshape(&p, &dims(&order))?;
        arrange(cx, &p, &order, &out)?
    } else {
        let (v, s) = &vals[0];
        arrange(cx, v, s, &out)?
    };
    Ok(vec![cx.reshape(&result, &dims(&out))?])
}

/// An i64 scalar constant.
fn int_scalar(v: i64) -> V {
    V::konst(Tensor::from_i64(TensorType::new(vec![], Scalar::I64), vec![v]))
}

/// `GatherElements`: `out[i] = data[i with i[axis] = indices[i]]`. Each
/// index becomes a flat offset into `data` (a negative index counts from
/// the end of the axis; one outside the axis becomes the offset one past
/// the end, so the gather reports it at run time instead of reading
/// another row), added to the constant offset of its position's other
/// coordinates; one `core.gather` then reads the flattened data.
pub fn gather_elements(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let data = cx.need(n, 0)?.clone();
    let idx = cx.need(n, 1)?.clone();
    let (ds, is) = (cx.shape(&data), cx.shape(&idx));
    let axis = normalize_axis(n.int("axis", 0), ds.len().max(1)).map_err(|m| cx.bad(m))?;
    let (flat, bad) = element_offsets(cx, idx, &ds, &is, axis)?;
    let total: usize = ds.iter().product();
    let flat = cx.op1(Opcode::Where, &[bad, int_scalar(total as i64), flat], Attrs::new())?;
    let data = cx.reshape(&data, &[total])?;
    Ok(vec![cx.op1(Opcode::Gather, &[data, flat], Attrs::new().with("axis", Attr::Int(0)))?])
}

/// `GatherND`: the last axis of `indices` holds `last` coordinates into
/// `data` (after `batch_dims` shared batch axes). Each coordinate is
/// normalized (negative from the end; one outside its axis becomes the
/// offset one past the end, a run-time error of the gather) and scaled by
/// its stride; with the batch offset of its position that is one flat row
/// of `data` viewed as `[rows] + data.shape[batch_dims + last..]`, and one
/// `core.gather` reads the rows.
pub fn gather_nd(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let data = cx.need(n, 0)?.clone();
    let idx = cx.need(n, 1)?.clone();
    let (ds, is) = (cx.shape(&data), cx.shape(&idx));
    let b = usize::try_from(n.int("batch_dims", 0)).map_err(|_| cx.bad("`batch_dims` must not be negative"))?;
    let Some(&last) = is.last() else {
        return Err(cx.bad("indices must have rank 1 or more"));
    };
    if b >= is.len() || b + last > ds.len() || is[..b] != ds[..b] {
        return Err(cx.bad(format!(
            "indices {is:?} do not fit data {ds:?} with batch_dims {b} (at most {} coordinates, equal batch dimensions)",
            ds.len().saturating_sub(b)
        )));
    }
    let idx = as_i64_indices(cx, idx)?;
    let lead = &is[..is.len() - 1];
    let used = b + last;
    let strides = row_major_strides(&ds[..used]);
    let rows: usize = ds[..used].iter().product();
    // The batch coordinates' offset of every position, known at import.
    let base = position_offsets(lead, |d| if d < b { strides[d] } else { 0 });
    let mut flat = int_tensor(lead.to_vec(), base);
    let mut bad = bool_const(false);
    let q = is.len() as i64;
    for k in 0..last {
        let attrs = Attrs::new()
            .with("starts", Attr::Ints(vec![k as i64]))
            .with("ends", Attr::Ints(vec![k as i64 + 1]))
            .with("axes", Attr::Ints(vec![q - 1]));
        let c = cx.op1(Opcode::Slice, std::slice::from_ref(&idx), attrs)?;
        let c = cx.reshape(&c, lead)?;
        let (fixed, out) = normalized_index(cx, &c, ds[b + k] as i64)?;
        let scaled = cx.bin(Opcode::Mul, &fixed, &int_scalar(strides[b + k]))?;
        flat = cx.bin(Opcode::Add, &flat, &scaled)?;
        bad = cx.op1(Opcode::Where, &[out, bool_const(true), bad], Attrs::new())?;
    }
    let flat = cx.op1(Opcode::Where, &[bad, int_scalar(rows as i64), flat], Attrs::new())?;
    let view: Vec<usize> = std::iter::once(rows).chain(ds[used..].iter().copied()).collect();
    let data = cx.reshape(&data, &view)?;
    Ok(vec![cx.op1(Opcode::Gather, &[data, flat], Attrs::new().with("axis", Attr::Int(0)))?])
}

/// A constant tensor of i64 values.
fn int_tensor(shape: Vec<usize>, values: Vec<i64>) -> V {
    V::konst(Tensor::from_i64(TensorType::new(shape, Scalar::I64), values))
}

/// The constant indices of a scatter node, as i64.
fn scatter_indices(cx: &Cx, n: &Node) -> R<Tensor> {
    match n.input(1) {
        Some(V::C(t)) => Ok((**t).clone()),
        Some(_) => Err(cx.bad(
            "indices computed at run time are not supported yet (constant indices, or ones that fold at import time, are)",
        )),
        None => Err(cx.bad("input 1 (indices) is required")),
    }
}

/// `out = data` with the updates written at flat offsets `targets[k]`
/// (one per update element, in ONNX's order), combined by `reduction`.
fn scatter_flat(cx: &mut Cx, n: &Node, data: V, updates: V, targets: &[usize]) -> R<V> {
    let shape = cx.shape(&data);
    let total: usize = shape.iter().product();
    let reduce = match n.str("reduction", "none").as_str() {
        "none" => None,
        "add" => Some(Opcode::Add),
        "mul" => Some(Opcode::Mul),
        "max" => Some(Opcode::Max),
        "min" => Some(Opcode::Min),
        r => return Err(cx.bad(format!("unknown reduction `{r}` (none, add, mul, max or min)"))),
    };
    if cx.ty(&data).elem != cx.ty(&updates).elem {
        return Err(cx.bad(format!("updates ({}) must have data's element type ({})", cx.ty(&updates), cx.ty(&data))));
    }
    let flat_data = cx.reshape(&data, &[total])?;
    let flat_upd = cx.reshape(&updates, &[targets.len()])?;
    let both = cx.op1(Opcode::Concat, &[flat_data, flat_upd], Attrs::new().with("axis", Attr::Int(0)))?;
    // Layer l holds each target's l-th update in order (reduction none
    // keeps only the last, as ONNX's reference writes them in order).
    let mut layers: Vec<Vec<i64>> = vec![];
    let mut seen = vec![0usize; total];
    for (k, &t) in targets.iter().enumerate() {
        let l = if reduce.is_some() { seen[t] } else { 0 };
        seen[t] += 1;
        if layers.len() <= l {
            layers.push((0..total as i64).collect());
        }
        layers[l][t] = (total + k) as i64;
    }
    let Some(op) = reduce else {
        let sel = layers.pop().unwrap_or_else(|| (0..total as i64).collect());
        let g = cx.op1(Opcode::Gather, &[both, int_tensor(vec![total], sel)], Attrs::new().with("axis", Attr::Int(0)))?;
        return cx.reshape(&g, &shape);
    };
    let mut out = cx.reshape(&data, &[total])?;
    for sel in layers {
        let mask: Vec<f64> = sel.iter().map(|&s| (s >= total as i64) as i64 as f64).collect();
        let mask = Cx::filled(vec![total], Scalar::I1, mask);
        let upd = cx.op1(Opcode::Gather, &[both.clone(), int_tensor(vec![total], sel)], Attrs::new().with("axis", Attr::Int(0)))?;
        let combined = cx.bin(op, &out, &upd)?;
        out = cx.op1(Opcode::Where, &[mask, combined, out], Attrs::new())?;
    }
    cx.reshape(&out, &shape)
}

/// `ScatterElements` (and opset-9 `Scatter`) with constant indices.
pub fn scatter_elements(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let data = cx.need(n, 0)?.clone();
    let updates = cx.need(n, 2)?.clone();
    if !matches!(n.input(1), Some(V::C(_))) {
        let idx = cx.need(n, 1)?.clone();
        let (ds, is, us) = (cx.shape(&data), cx.shape(&idx), cx.shape(&updates));
        if is != us {
            return Err(cx.bad(format!("indices {is:?} and updates {us:?} must have one shape")));
        }
        let axis = normalize_axis(n.int("axis", 0), ds.len().max(1)).map_err(|m| cx.bad(m))?;
        let (flat, bad) = element_offsets(cx, idx, &ds, &is, axis)?;
        return Ok(vec![scatter_run_time(cx, n, data, updates, flat, bad)?]);
    }
    let idx = scatter_indices(cx, n)?;
    let (ds, is, us) = (cx.shape(&data), idx.shape().to_vec(), cx.shape(&updates));
    if ds.is_empty() || ds.len() != is.len() || is != us {
        return Err(cx.bad(format!(
            "indices {is:?} and updates {us:?} must have one shape, of data's rank ({})",
            ds.len()
        )));
    }
    let rank = ds.len();
    let axis = normalize_axis(n.int("axis", 0), rank).map_err(|m| cx.bad(m))?;
    if let Some(d) = (0..rank).find(|&d| d != axis && is[d] > ds[d]) {
        return Err(cx.bad(format!("indices dimension {d} ({}) must not exceed data's ({}) off the axis", is[d], ds[d])));
    }
    let mut strides = vec![1usize; rank];
    for d in (0..rank - 1).rev() {
        strides[d] = strides[d + 1] * ds[d + 1];
    }
    let dim = ds[axis] as i64;
    let mut targets = Vec::with_capacity(idx.len());
    for k in 0..idx.len() {
        let v = idx.get_i64(k);
        let i = if v < 0 { v + dim } else { v };
        if !(0..dim).contains(&i) {
            return Err(cx.bad(format!("index {v} is out of range for axis {axis} of size {dim}")));
        }
        let (mut rest, mut off) = (k, 0);
        for d in (0..rank).rev() {
            let c = rest % is[d];
            rest /= is[d];
            off += if d == axis { i as usize } else { c } * strides[d];
        }
        targets.push(off);
    }
    Ok(vec![scatter_flat(cx, n, data, updates, &targets)?])
}

/// `ScatterND` with constant indices: each index tuple (the last indices
/// dimension, `q` long) names a slice of data's trailing dimensions.
pub fn scatter_nd(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let data = cx.need(n, 0)?.clone();
    let updates = cx.need(n, 2)?.clone();
    if !matches!(n.input(1), Some(V::C(_))) {
        let idx = cx.need(n, 1)?.clone();
        return Ok(vec![scatter_nd_run_time(cx, n, data, idx, updates)?]);
    }
    let idx = scatter_indices(cx, n)?;
    let (ds, is, us) = (cx.shape(&data), idx.shape().to_vec(), cx.shape(&updates));
    let q = is.last().copied().unwrap_or(0);
    if is.is_empty() || q == 0 || q > ds.len() {
        return Err(cx.bad(format!("indices {is:?} must end in a dimension of 1..={} (data's rank)", ds.len())));
    }
    let want: Vec<usize> = is[..is.len() - 1].iter().chain(&ds[q..]).copied().collect();
    if us != want {
        return Err(cx.bad(format!("updates must have shape {want:?}, found {us:?}")));
    }
    let slice: usize = ds[q..].iter().product();
    let mut strides = vec![1usize; ds.len()];
    for d in (0..ds.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * ds[d + 1];
    }
    let tuples = idx.len() / q;
    let mut targets = Vec::with_capacity(tuples * slice);
    for t in 0..tuples {
        let mut off = 0;
        for d in 0..q {
            let v = idx.get_i64(t * q + d);
            let dim = ds[d] as i64;
            let i = if v < 0 { v + dim } else { v };
            if !(0..dim).contains(&i) {
                return Err(cx.bad(format!("index {v} is out of range for dimension {d} of size {dim}")));
            }
            off += i as usize * strides[d];
        }
        targets.extend(off..off + slice);
    }
    Ok(vec![scatter_flat(cx, n, data, updates, &targets)?])
}

/// The largest `k` `TopK` unrolls (each round is six ops).
pub const TOPK_MAX_K: usize = 64;

/// `TopK` on floats with a constant `k`: round `t` takes the extreme of
/// what is left along the axis and the least index holding it, then
/// replaces that element by -inf (+inf for the smallest) for the next
/// round; the rounds' values and indices are concatenated along the axis.
/// Results come sorted whatever `sorted` says (ONNX allows any order
/// then). Inputs holding infinities or NaN may rank differently from
/// ONNX Runtime.
pub fn top_k(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let elem = cx.float_elem(&x)?;
    let shape = cx.shape(&x);
    if shape.is_empty() {
        return Err(cx.bad("input must have at least one dimension"));
    }
    let axis = normalize_axis(n.int("axis", -1), shape.len()).map_err(|m| cx.bad(m))?;
    let k = if cx.opset >= 10 {
        let t = cx.const_input(n, 1, "k")?;
        if t.len() != 1 {
            return Err(cx.bad("k must hold one value"));
        }
        t.get_i64(0)
    } else {
        n.int("k", -1)
    };
    let len = shape[axis];
    if k < 1 || k as usize > len || k as usize > TOPK_MAX_K {
        return Err(cx.bad(format!("k must be in 1..={} (the axis has {len} elements; larger k is not supported yet), found {k}", len.min(TOPK_MAX_K))));
    }
    if len > 1 << 24 {
        return Err(cx.bad(format!("the axis has {len} elements, more than 2^24")));
    }
    let largest = n.int("largest", 1) != 0;
    let extreme = if largest { Opcode::ReduceMax } else { Opcode::ReduceMin };
    let keep = Attrs::new().with("axes", Attr::Ints(vec![axis as i64])).with("keepdims", Attr::Bool(true));
    let mut idx_shape = vec![1; shape.len()];
    idx_shape[axis] = len;
    let index = Cx::filled(idx_shape, elem, (0..len).map(|i| i as f64).collect());
    let miss = Cx::filled(vec![], elem, vec![len as f64]);
    let gone = Cx::filled(vec![], elem, vec![if largest { f64::NEG_INFINITY } else { f64::INFINITY }]);
    let (mut vals, mut idxs) = (vec![], vec![]);
    let mut cur = x;
    for t in 0..k as usize {
        let m = cx.op1(extreme, std::slice::from_ref(&cur), keep.clone())?;
        let hit = cx.bin(Opcode::Equal, &cur, &m)?;
        let cand = cx.op1(Opcode::Where, &[hit, index.clone(), miss.clone()], Attrs::new())?;
        let i = cx.op1(Opcode::ReduceMin, &[cand], keep.clone())?;
        if t + 1 < k as usize {
            let taken = cx.bin(Opcode::Equal, &index, &i)?;
            cur = cx.op1(Opcode::Where, &[taken, gone.clone(), cur], Attrs::new())?;
        }
        vals.push(m);
        idxs.push(i);
    }
    let cat = Attrs::new().with("axis", Attr::Int(axis as i64));
    let (values, indices) = if vals.len() == 1 {
        (vals.remove(0), idxs.remove(0))
    } else {
        (cx.op1(Opcode::Concat, &vals, cat.clone())?, cx.op1(Opcode::Concat, &idxs, cat)?)
    };
    let indices = cx.op1(Opcode::Cast, &[indices], Attrs::new().with("to", Attr::Type(Scalar::I64)))?;
    Ok(vec![values, indices])
}

/// Run-time `indices` (of shape `is`, along `axis` of data shaped `ds`)
/// as flat element offsets into data (negative indices count from the
/// end) and a bool of the indices outside the axis.
fn element_offsets(cx: &mut Cx, idx: V, ds: &[usize], is: &[usize], axis: usize) -> R<(V, V)> {
    let rank = ds.len();
    if rank == 0 || rank != is.len() {
        return Err(cx.bad(format!("indices must have the rank of data ({rank}), found rank {}", is.len())));
    }
    if let Some(d) = (0..rank).find(|&d| d != axis && is[d] > ds[d]) {
        return Err(cx.bad(format!("indices dimension {d} ({}) must not exceed data's ({}) off the axis", is[d], ds[d])));
    }
    let idx = as_i64_indices(cx, idx)?;
    let strides = row_major_strides(ds);
    let base = int_tensor(is.to_vec(), position_offsets(is, |d| if d != axis { strides[d] } else { 0 }));
    let (fixed, bad) = normalized_index(cx, &idx, ds[axis] as i64)?;
    let scaled = cx.bin(Opcode::Mul, &fixed, &int_scalar(strides[axis]))?;
    Ok((cx.bin(Opcode::Add, &scaled, &base)?, bad))
}

/// The row-major element strides of `dims`.
fn row_major_strides(dims: &[usize]) -> Vec<i64> {
    let mut strides = vec![1i64; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1] as i64;
    }
    strides
}

/// For every position of a tensor of `shape` (row-major order), the sum of
/// its coordinates times `stride(d)` of their dimension.
fn position_offsets(shape: &[usize], stride: impl Fn(usize) -> i64) -> Vec<i64> {
    let count: usize = shape.iter().product();
    (0..count)
        .map(|mut k| {
            let mut off = 0;
            for d in (0..shape.len()).rev() {
                off += (k % shape[d]) as i64 * stride(d);
                k /= shape[d];
            }
            off
        })
        .collect()
}

/// Indices as i64 (int32 ones cast).
fn as_i64_indices(cx: &mut Cx, idx: V) -> R<V> {
    match cx.ty(&idx).elem.scalar() {
        Some(Scalar::I64) => Ok(idx),
        Some(Scalar::I32) => cx.op1(Opcode::Cast, &[idx], Attrs::new().with("to", Attr::Type(Scalar::I64))),
        _ => Err(cx.bad(format!("indices must be int32 or int64, found {}", cx.ty(&idx)))),
    }
}

/// `idx` with negative values counted from the end of an axis of `dim`,
/// and a bool of those outside it.
fn normalized_index(cx: &mut Cx, idx: &V, dim: i64) -> R<(V, V)> {
    let zero = int_scalar(0);
    let neg = cx.bin(Opcode::Less, idx, &zero)?;
    let wrapped = cx.bin(Opcode::Add, idx, &int_scalar(dim))?;
    let fixed = cx.op1(Opcode::Where, &[neg, wrapped, idx.clone()], Attrs::new())?;
    let low = cx.bin(Opcode::Less, &fixed, &zero)?;
    let high = cx.bin(Opcode::Greater, &fixed, &int_scalar(dim - 1))?;
    let bad = cx.op1(Opcode::Where, &[low, bool_const(true), high], Attrs::new())?;
    Ok((fixed, bad))
}


/// The largest `positions × updates` a scatter with run-time indices
/// compares (it builds that many booleans).
const SCATTER_MAX_PAIRS: usize = 1 << 24;

/// A scatter with run-time flat offsets `flat` (one per update element)
/// into float `data`: every output position is compared with every
/// offset; the last update that hits a position wins (reduction none), or
/// the hits are summed (add; in another order than ONNX's sequential
/// one), or their extreme combined with the data (max, min). An index
/// outside its axis (`bad`) makes the gather of the updates fail at run
/// time. `mul` needs constant indices.
fn scatter_run_time(cx: &mut Cx, n: &Node, data: V, updates: V, flat: V, bad: V) -> R<V> {
    let shape = cx.shape(&data);
    let elem = cx.float_elem(&data).map_err(|_| {
        cx.bad(format!("integer data ({}) needs constant indices", cx.ty(&data)))
    })?;
    if cx.ty(&updates).elem != cx.ty(&data).elem {
        return Err(cx.bad(format!("updates ({}) must have data's element type ({})", cx.ty(&updates), cx.ty(&data))));
    }
    let total: usize = shape.iter().product();
    let k: usize = cx.shape(&flat).iter().product();
    if total.saturating_mul(k) > SCATTER_MAX_PAIRS || total + k > 1 << 24 {
        return Err(cx.bad(format!(
            "{total} positions × {k} updates are too many for run-time indices (at most {SCATTER_MAX_PAIRS} pairs)"
        )));
    }
    let reduction = n.str("reduction", "none");
    if !matches!(reduction.as_str(), "none" | "add" | "max" | "min") {
        return Err(cx.bad(format!("reduction `{reduction}` needs constant indices (none, add, max and min take run-time ones)")));
    }
    // The updates, gathered through an index that is out of range where
    // the scatter index is: a run-time error instead of a lost write.
    let flat = cx.reshape(&flat, &[1, k])?;
    let bad = cx.reshape(&bad, &[k])?;
    let iota_k = int_tensor(vec![k], (0..k as i64).collect());
    let pick = cx.op1(Opcode::Where, &[bad, int_scalar(k as i64), iota_k], Attrs::new())?;
    let upd = cx.reshape(&updates, &[k])?;
    let upd = cx.op1(Opcode::Gather, &[upd, pick], Attrs::new().with("axis", Attr::Int(0)))?;
    let upd = cx.reshape(&upd, &[1, k])?;
    let pos = int_tensor(vec![total, 1], (0..total as i64).collect());
    let hit = cx.bin(Opcode::Equal, &pos, &flat)?;
    let row = |keep: bool| Attrs::new().with("axes", Attr::Ints(vec![1])).with("keepdims", Attr::Bool(keep));
    let kf = Cx::filled(vec![1, k], Scalar::F32, (0..k).map(|i| i as f64).collect());
    let none = Cx::filled(vec![], Scalar::F32, vec![-1.0]);
    let last = cx.op1(Opcode::Where, &[hit.clone(), kf, none], Attrs::new())?;
    let last = cx.op1(Opcode::ReduceMax, &[last], row(false))?;
    let has = cx.bin(Opcode::Greater, &last, &Cx::filled(vec![], Scalar::F32, vec![-0.5]))?;
    let flat_data = cx.reshape(&data, &[total])?;
    let out = match reduction.as_str() {
        "none" => {
            let posf = Cx::filled(vec![total], Scalar::F32, (0..total).map(|i| i as f64).collect());
            let from = cx.bin(Opcode::Add, &last, &Cx::filled(vec![], Scalar::F32, vec![total as f64]))?;
            let sel = cx.op1(Opcode::Where, &[has, from, posf], Attrs::new())?;
            let sel = cx.op1(Opcode::Cast, &[sel], Attrs::new().with("to", Attr::Type(Scalar::I64)))?;
            let upd = cx.reshape(&upd, &[k])?;
            let both = cx.op1(Opcode::Concat, &[flat_data, upd], Attrs::new().with("axis", Attr::Int(0)))?;
            cx.op1(Opcode::Gather, &[both, sel], Attrs::new().with("axis", Attr::Int(0)))?
        }
        r => {
            let (fill, red, comb) = match r {
                "add" => (0.0, Opcode::ReduceSum, Opcode::Add),
                "max" => (f64::NEG_INFINITY, Opcode::ReduceMax, Opcode::Max),
                _ => (f64::INFINITY, Opcode::ReduceMin, Opcode::Min),
            };
            let vals = cx.op1(Opcode::Where, &[hit, upd, Cx::filled(vec![], elem, vec![fill])], Attrs::new())?;
            let acc = cx.op1(red, &[vals], row(false))?;
            let combined = cx.bin(comb, &flat_data, &acc)?;
            cx.op1(Opcode::Where, &[has, combined, flat_data], Attrs::new())?
        }
    };
    cx.reshape(&out, &shape)
}

/// `ScatterND` with run-time indices: each index tuple's slice offset
/// (normalized per dimension), plus the positions inside the slice.
fn scatter_nd_run_time(cx: &mut Cx, n: &Node, data: V, idx: V, updates: V) -> R<V> {
    let (ds, is, us) = (cx.shape(&data), cx.shape(&idx), cx.shape(&updates));
    let q = is.last().copied().unwrap_or(0);
    if is.is_empty() || q == 0 || q > ds.len() {
        return Err(cx.bad(format!("indices {is:?} must end in a dimension of 1..={} (data's rank)", ds.len())));
    }
    let want: Vec<usize> = is[..is.len() - 1].iter().chain(&ds[q..]).copied().collect();
    if us != want {
        return Err(cx.bad(format!("updates must have shape {want:?}, found {us:?}")));
    }
    let idx = as_i64_indices(cx, idx)?;
    let tuples: usize = is[..is.len() - 1].iter().product();
    let idx = cx.reshape(&idx, &[tuples, q])?;
    let slice: usize = ds[q..].iter().product();
    let mut strides = vec![1i64; ds.len()];
    for d in (0..ds.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * ds[d + 1] as i64;
    }
    let mut off: Option<V> = None;
    let mut any_bad: Option<V> = None;
    for d in 0..q {
        let col = cx.op1(Opcode::Gather, &[idx.clone(), int_tensor(vec![1], vec![d as i64])], Attrs::new().with("axis", Attr::Int(1)))?;
        let (fixed, bad) = normalized_index(cx, &col, ds[d] as i64)?;
        let part = cx.bin(Opcode::Mul, &fixed, &int_scalar(strides[d]))?;
        off = Some(match off {
            Some(o) => cx.bin(Opcode::Add, &o, &part)?,
            None => part,
        });
        any_bad = Some(match any_bad {
            Some(b) => cx.op1(Opcode::Where, &[b, bool_const(true), bad], Attrs::new())?,
            None => bad,
        });
    }
    let (Some(off), Some(bad)) = (off, any_bad) else {
        return Err(cx.bad("indices must name at least one dimension"));
    };
    let inner = int_tensor(vec![1, slice], (0..slice as i64).collect());
    let flat = cx.bin(Opcode::Add, &off, &inner)?;
    let bad = cx.op1(Opcode::Where, &[bad, bool_const(true), Cx::filled(vec![1, slice], Scalar::I1, vec![0.0; slice])], Attrs::new())?;
    let flat = cx.reshape(&flat, &[tuples * slice])?;
    let bad = cx.reshape(&bad, &[tuples * slice])?;
    scatter_run_time(cx, n, data, updates, flat, bad)
}
