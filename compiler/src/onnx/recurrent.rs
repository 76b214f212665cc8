//! `RNN`, `GRU` and `LSTM` as `core.rnn`, `core.gru` and `core.lstm`.
//!
//! The ops take the sequence axis first (ONNX's `layout = 0`); `layout =
//! 1` models get transposes around them. Absent optional inputs before a
//! given one are filled with what ONNX defines them to be (zero biases,
//! full sequence lengths, zero states, zero peepholes); trailing absent
//! ones stay absent.

use super::context::{Cx, Node, R, V};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::kind::Cell;
use aoc_ir::{Opcode, Scalar, Tensor, TensorType};

pub fn recurrent(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let (cell, opcode) = match n.op_type {
        "RNN" => (Cell::Rnn, Opcode::Rnn),
        "GRU" => (Cell::Gru, Opcode::Gru),
        _ => (Cell::Lstm, Opcode::Lstm),
    };
    let layout = n.int("layout", 0);
    if !matches!(layout, 0 | 1) {
        return Err(cx.bad(format!("layout must be 0 or 1, found {layout}")));
    }
    let transpose = |cx: &mut Cx, v: &V, perm: &[i64]| {
        cx.op1(Opcode::Transpose, std::slice::from_ref(v), Attrs::new().with("perm", Attr::Ints(perm.to_vec())))
    };
    let mut x = cx.need(n, 0)?.clone();
    if cx.shape(&x).len() != 3 {
        return Err(cx.bad(format!("X must have rank 3, found {:?}", cx.shape(&x))));
    }
    if layout == 1 {
        x = transpose(cx, &x, &[1, 0, 2])?;
    }
    let w = cx.need(n, 1)?.clone();
    let r = cx.need(n, 2)?.clone();
    let (xs, rs) = (cx.shape(&x), cx.shape(&r));
    if rs.len() != 3 || rs[1] % cell.gates() != 0 {
        return Err(cx.bad(format!("R must be [directions, {}*hidden_size, hidden_size], found {rs:?}", cell.gates())));
    }
    let (seq, batch, dirs, hidden) = (xs[0], xs[1], rs[0], rs[1] / cell.gates());
    if let Some(hs) = n.opt_int("hidden_size")
        && hs != hidden as i64
    {
        return Err(cx.bad(format!("hidden_size is {hs}, but R gives {hidden}")));
    }
    let elem = cx.ty(&x).elem.scalar().unwrap_or(Scalar::F32);
    let last = if cell == Cell::Lstm { 7 } else { 5 };
    let present = (3..=last).filter(|&i| n.input(i).is_some()).max();
    let mut operands = vec![x, w, r];
    for i in 3..=present.unwrap_or(2) {
        let v = match n.input(i) {
            Some(v) if layout == 1 && matches!(i, 5 | 6) => transpose(cx, v, &[1, 0, 2])?,
            Some(v) => v.clone(),
            None => {
                let (shape, scalar, fill) = match i {
                    3 => (vec![dirs, 2 * cell.gates() * hidden], elem, 0.0),
                    4 => (vec![batch], Scalar::I32, seq as f64),
                    7 => (vec![dirs, 3 * hidden], elem, 0.0),
                    _ => (vec![dirs, batch, hidden], elem, 0.0),
                };
                V::konst(Tensor::splat(TensorType::new(shape, scalar), fill))
            }
        };
        operands.push(v);
    }
    let mut attrs = Attrs::new().with("direction", Attr::Str(n.str("direction", "forward")));
    if let Some(a) = n.attr("activations") {
        let names: Vec<String> = a.strings.iter().map(|s| String::from_utf8_lossy(s).to_ascii_lowercase()).collect();
        attrs.set("activations", Attr::Str(names.join(",")));
    }
    for name in ["activation_alpha", "activation_beta"] {
        if let Some(v) = n.floats(name) {
            attrs.set(name, Attr::Floats(v));
        }
    }
    if n.attr("clip").is_some() {
        attrs.set("clip", Attr::Float(n.float("clip", 0.0)));
    }
    match cell {
        Cell::Lstm => attrs.set("input_forget", Attr::Bool(n.int("input_forget", 0) != 0)),
        Cell::Gru => attrs.set("linear_before_reset", Attr::Bool(n.int("linear_before_reset", 0) != 0)),
        Cell::Rnn => {}
    }
    let mut outs = cx.op(opcode, &operands, attrs, None)?;
    if layout == 1 {
        outs[0] = transpose(cx, &outs[0], &[2, 0, 1, 3])?;
        for o in &mut outs[1..] {
            *o = transpose(cx, o, &[1, 0, 2])?;
        }
    }
    Ok(outs)
}
