//! ONNX `Attention` (opset 23) as the composition its definition gives:
//! `softmax(softcap(Q·Kᵀ·scale) + bias)·V`. The optimizer then fuses the
//! products, the softmax and the mask into `core.attention` where the
//! target has a kernel for it, as for an exported model written out by
//! hand.
//!
//! - Q, K, V are 4-D `[batch, heads, seq, head size]`, or 3-D `[batch,
//!   seq, heads·head size]` with `q_num_heads` and `kv_num_heads`; the
//!   result has Q's rank.
//! - `past_key`/`past_value` are concatenated before K and V along the
//!   sequence; `present_key`/`present_value` are those concatenations.
//! - Grouped heads (fewer K/V heads than Q heads) repeat each K/V head for
//!   its group of Q heads.
//! - The bias is the sum of `attn_mask` (boolean: false is −inf; float:
//!   added; a mask shorter than the key sequence is padded with −inf), and
//!   −inf outside the causal triangle (`is_causal`) and the sliding window
//!   (`left_window_size`, `right_window_size`), both aligned after the past
//!   keys: query `i` sits at key position `past + i`, as ONNX's reference.
//! - `softcap > 0` maps the scaled product `s` to `softcap·tanh(s/softcap)`
//!   before the bias, so masked scores stay −inf.
//! - A row the bias masks entirely gives zeros, not the softmax's NaN.
//! - The fourth output follows ONNX's reference for
//!   `qk_matmul_output_mode`: 0 and 1 the (softcapped) product, 2 with the
//!   bias, 3 after the softmax.
//!
//! Refused: `nonpad_kv_seqlen` (opset 24), and a mask longer than the key
//! sequence.

use super::context::{Cx, Node, R, V};
use super::elementwise::scalar_like;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::{Opcode, Tensor, TensorType};

impl Cx<'_> {
    /// A 3-D `[b, s, heads·d]` input as 4-D `[b, heads, s, d]`.
    fn split_heads(&mut self, v: &V, heads: i64, what: &str) -> R<V> {
        let s = self.shape(v);
        if heads <= 0 || s[2] % heads as usize != 0 {
            return Err(self.bad(format!("{what}'s hidden size {} is not a multiple of its head count {heads}", s[2])));
        }
        let h = heads as usize;
        let r = self.reshape(v, &[s[0], s[1], h, s[2] / h])?;
        self.transpose(&r, &[0, 2, 1, 3])
    }
}

/// `Attention`.
pub fn attention(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let (q, k, v) = (cx.need(n, 0)?.clone(), cx.need(n, 1)?.clone(), cx.need(n, 2)?.clone());
    if n.input(6).is_some() {
        return Err(cx.bad("`nonpad_kv_seqlen` is unsupported"));
    }
    let rank = cx.shape(&q).len();
    if !matches!(rank, 3 | 4) || cx.shape(&k).len() != rank || cx.shape(&v).len() != rank {
        return Err(cx.bad("Q, K and V must all be 3-D or all 4-D"));
    }
    let elem = cx.ty(&q).elem;
    if !elem.scalar().is_some_and(|s| s.is_float()) {
        return Err(cx.bad(format!("Q must be a float tensor, found {}", cx.ty(&q))));
    }
    let (q, mut k, mut v) = if rank == 3 {
        let need = |name: &str| n.opt_int(name).ok_or_else(|| cx.bad(format!("3-D inputs need `{name}`")));
        let (hq, hkv) = (need("q_num_heads")?, need("kv_num_heads")?);
        (cx.split_heads(&q, hq, "Q")?, cx.split_heads(&k, hkv, "K")?, cx.split_heads(&v, hkv, "V")?)
    } else {
        (q, k, v)
    };
    // Past keys and values go first along the sequence.
    for (i, cur) in [(4, &mut k), (5, &mut v)] {
        if let Some(past) = n.input(i).cloned() {
            *cur = cx.op1(Opcode::Concat, &[past, cur.clone()], Attrs::new().with("axis", Attr::Int(2)))?;
        }
    }
    let (present_k, present_v) = (k.clone(), v.clone());
    let (qs, ks, vs) = (cx.shape(&q), cx.shape(&k), cx.shape(&v));
    let (b, hq, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, skv) = (ks[1], ks[2]);
    if ks[3] != d || vs[1] != hkv || vs[2] != skv || ks[0] != b || vs[0] != b {
        return Err(cx.bad(format!("K {ks:?} and V {vs:?} do not match Q {qs:?}")));
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(cx.bad(format!("Q's {hq} heads are not a multiple of K's {hkv}")));
    }
    // Grouped heads: each K/V head serves `group` consecutive Q heads.
    let group = hq / hkv;
    let repeat = |cx: &mut Cx, t: &V, last: usize| -> R<V> {
        if group == 1 {
            return Ok(t.clone());
        }
        let r = cx.reshape(t, &[b, hkv, 1, skv, last])?;
        let e = cx.op1(Opcode::Expand, &[r], Attrs::new().with("shape", Attr::Ints(vec![b as i64, hkv as i64, group as i64, skv as i64, last as i64])))?;
        cx.reshape(&e, &[b, hq, skv, last])
    };
    let (kr, vr) = (repeat(cx, &k, d)?, repeat(cx, &v, vs[3])?);
    // The product times the scale (the definition scales Q and K by √scale
    // each: equal in f32), the form the attention fusion matches.
    let scale = n.float("scale", 1.0 / (d as f64).sqrt());
    let kt = cx.transpose(&kr, &[0, 1, 3, 2])?;
    let prod = cx.bin(Opcode::MatMul, &q, &kt)?;
    let c = scalar_like(cx, &prod, scale);
    let mut qk = cx.bin(Opcode::Mul, &prod, &c)?;
    // The softcap comes before the bias, so masked scores stay −inf.
    let softcap = n.float("softcap", 0.0);
    if softcap > 0.0 {
        let c = scalar_like(cx, &qk, softcap);
        let t = cx.bin(Opcode::Div, &qk, &c)?;
        let t = cx.op1(Opcode::Tanh, &[t], Attrs::new())?;
        qk = cx.bin(Opcode::Mul, &t, &c)?;
    }
    let past = n.input(4).map_or(0, |p| cx.shape(p).get(2).copied().unwrap_or(0));
    let bias = attention_bias(cx, n, &elem, sq, skv, past)?;
    let biased = match &bias {
        None => qk.clone(),
        Some(bias) => cx.bin(Opcode::Add, &qk, bias)?,
    };
    let mut p = cx.op1(Opcode::Softmax, std::slice::from_ref(&biased), Attrs::new().with("axis", Attr::Int(-1)))?;
    // A row whose bias is −inf everywhere attends to nothing: zeros, not the
    // softmax's NaN. A constant bias (causal, window) with no such row needs
    // no guard (and keeps the attention fusable).
    let guarded = match &bias {
        None => None,
        Some(V::C(t)) if !t.to_f64().chunks(skv.max(1)).any(|row| row.iter().all(|&x| x == f64::NEG_INFINITY)) => None,
        Some(bias) => Some(bias),
    };
    if let Some(bias) = guarded {
        let last = cx.shape(bias).len() - 1;
        let top = cx.reduce_keep(Opcode::ReduceMax, bias, &[last])?;
        let ninf = scalar_like(cx, &qk, f64::NEG_INFINITY);
        let none = cx.bin(Opcode::Equal, &top, &ninf)?;
        let zero = scalar_like(cx, &qk, 0.0);
        p = cx.select(&none, &zero, &p)?;
    }
    let y4 = cx.bin(Opcode::MatMul, &p, &vr)?;
    let y = if rank == 3 {
        let t = cx.transpose(&y4, &[0, 2, 1, 3])?;
        cx.reshape(&t, &[b, sq, hq * vs[3]])?
    } else {
        y4
    };
    let mut outs = vec![y, present_k, present_v];
    if n.n_outputs() > 3 {
        // As ONNX's reference: modes 0 and 1 give the (softcapped)
        // product, 2 adds the bias, 3 the softmax.
        outs.push(match n.int("qk_matmul_output_mode", 0) {
            0 | 1 => qk,
            2 => biased,
            3 => p,
            m => return Err(cx.bad(format!("`qk_matmul_output_mode` must be 0 to 3, found {m}"))),
        });
    }
    Ok(outs)
}

/// The additive bias of the scores, `[.., sq, skv]`, or `None` when there
/// is none: `attn_mask` (padded with −inf to the key length; boolean false
/// is −inf), the causal triangle and the sliding window, both aligned so
/// that query `i` sits at key position `i + past`.
fn attention_bias(cx: &mut Cx, n: &Node, elem: &aoc_ir::ElemType, sq: usize, skv: usize, past: usize) -> R<Option<V>> {
    let mut bias: Option<V> = None;
    if let Some(mask) = n.input(3).cloned() {
        let mut ms = cx.shape(&mask);
        let last = *ms.last().ok_or_else(|| cx.bad("the mask must have rank 1 or more"))?;
        let bool_mask = cx.ty(&mask).elem.is_bool();
        let mut m = if bool_mask {
            let zero = V::konst(Tensor::from_f64(TensorType::new(vec![], elem.clone()), vec![0.0]));
            let ninf = V::konst(Tensor::from_f64(TensorType::new(vec![], elem.clone()), vec![f64::NEG_INFINITY]));
            cx.op1(Opcode::Where, &[mask, zero, ninf], Attrs::new())?
        } else {
            mask
        };
        if last > skv {
            return Err(cx.bad(format!("the mask's last dimension {last} is longer than the key sequence {skv}")));
        }
        if last < skv {
            // Keys past the mask's end are masked.
            let axis = ms.len() - 1;
            ms[axis] = skv - last;
            let count = ms.iter().product();
            let pad = V::konst(Tensor::from_f64(TensorType::new(ms, elem.clone()), vec![f64::NEG_INFINITY; count]));
            let axis = axis as i64;
            m = cx.op1(Opcode::Concat, &[m, pad], Attrs::new().with("axis", Attr::Int(axis)))?;
        }
        bias = Some(m);
    }
    let causal = n.int("is_causal", 0) != 0;
    let (left, right) = (n.int("left_window_size", -1), n.int("right_window_size", -1));
    if causal || left >= 0 || right >= 0 {
        let allowed = |i: usize, j: usize| {
            let diff = (i + past) as i64 - j as i64;
            (!causal || diff >= 0) && (left < 0 || diff <= left) && (right < 0 || -diff <= right)
        };
        let tri: Vec<f64> =
            (0..sq).flat_map(|i| (0..skv).map(move |j| if allowed(i, j) { 0.0 } else { f64::NEG_INFINITY })).collect();
        let t = V::konst(Tensor::from_f64(TensorType::new(vec![sq, skv], elem.clone()), tri));
        bias = Some(match bias {
            None => t,
            Some(m) => cx.bin(Opcode::Add, &m, &t)?,
        });
    }
    Ok(bias)
}
