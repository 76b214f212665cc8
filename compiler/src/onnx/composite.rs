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
//! - `Einsum` (one or two operands, no diagonals): sums, transposes and one
//!   batched matrix product.

use super::context::{Cx, Node, R, V};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::normalize_axis;
use aoc_ir::{Opcode, Scalar, Tensor, TensorType};

impl Cx<'_> {
    fn transpose(&mut self, v: &V, perm: &[usize]) -> R<V> {
        let p = perm.iter().map(|&d| d as i64).collect();
        self.op1(Opcode::Transpose, std::slice::from_ref(v), Attrs::new().with("perm", Attr::Ints(p)))
    }
    fn binary(&mut self, opcode: Opcode, a: &V, b: &V) -> R<V> {
        self.op1(opcode, &[a.clone(), b.clone()], Attrs::new())
    }
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
            let wide = cx.binary(Opcode::Expand, &g, &shape)?;
            cx.reshape(&wide, &[c, 1])
        } else {
            Err(cx.bad(format!("{what} has {len} elements, expected {c} (channels) or {groups} (groups)")))
        }
    };
    let scale = column(cx, 1, "scale")?;
    let bias = column(cx, 2, "bias")?;
    let scaled = cx.binary(Opcode::Mul, &per_channel, &scale)?;
    let shifted = cx.binary(Opcode::Add, &scaled, &bias)?;
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
    let summed = cx.binary(Opcode::MatMul, &moved, &tri)?;
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
    let hit = cx.binary(Opcode::Equal, &x, &m)?;
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
        let p = cx.binary(Opcode::MatMul, &a, &b)?;
        let order = [batch, left, right].concat();
        let p = cx.reshape(&p, &dims(&order))?;
        arrange(cx, &p, &order, &out)?
    } else {
        let (v, s) = &vals[0];
        arrange(cx, v, s, &out)?
    };
    Ok(vec![cx.reshape(&result, &dims(&out))?])
}
