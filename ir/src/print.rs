//! The canonical `.air` printer.
//!
//! Canonical form: weights declarations first (one per line), then
//! functions in order, a blank line between top-level items; 2-space
//! indentation; attributes in op-table order with defaults omitted (an
//! empty dictionary is not printed); floats written so they read back to the
//! same `f64`; dense payloads nested by shape, or a splat when every element
//! is equal; `loc("...")` only when the op has a name.
//!
//! Invariant: for every module the parser produces,
//! `print(parse(print(m))) == print(m)` byte for byte. Printing never panics,
//! even on a module that does not verify.

use crate::attr::{Attr, AttrKind, ConstValue, DenseData};
use crate::module::{Block, Func, Module, OpData};
use crate::ops::Format;
use crate::types::{Scalar, TensorType, write_float};
use std::fmt::Write;

/// Prints a module in canonical form.
pub fn print_module(module: &Module) -> String {
    let mut out = String::new();
    for w in &module.weights {
        let _ = writeln!(out, "weights {} = {}", symbol(&w.name), quoted(&w.path));
    }
    for (i, f) in module.funcs.iter().enumerate() {
        if i > 0 || !module.weights.is_empty() {
            out.push('\n');
        }
        print_func(&mut out, f);
    }
    out
}

/// Prints one function (as it appears in a module).
pub fn print_func(out: &mut String, f: &Func) {
    let _ = write!(out, "func {}(", symbol(&f.name));
    for (i, &p) in f.params().iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "%{}: {}", f.name_of(p), f.ty(p));
        // The external name, where it is not the SSA name (an ONNX input
        // `input:0` becomes `%input_0` with `loc("input:0")`).
        if let Some(name) = &f.values[p].loc.name
            && name != f.name_of(p)
        {
            let _ = write!(out, " loc({})", quoted(name));
        }
    }
    out.push(')');
    // A result type with its external name, when it has one.
    let result = |out: &mut String, i: usize, t: &crate::types::TensorType| {
        let _ = write!(out, "{t}");
        if let Some(Some(name)) = f.result_names.get(i) {
            let _ = write!(out, " loc({})", quoted(name));
        }
    };
    match f.result_types.as_slice() {
        [] => {}
        [t] => {
            out.push_str(" -> ");
            result(out, 0, t);
        }
        ts => {
            out.push_str(" -> (");
            for (i, t) in ts.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                result(out, i, t);
            }
            out.push(')');
        }
    }
    out.push_str(" {\n");
    print_block_body(out, f, &f.body, 1, "return");
    out.push_str("}\n");
}

fn print_block_body(out: &mut String, f: &Func, block: &Block, depth: usize, terminator: &str) {
    for &op in &block.ops {
        match f.ops.get(op) {
            Some(data) => print_op(out, f, data, depth),
            None => {
                let _ = writeln!(out, "{}// invalid op id {op:?}", indent(depth));
            }
        }
    }
    let _ = write!(out, "{}{terminator}", indent(depth));
    if !block.terminator.is_empty() {
        out.push(' ');
        write_values(out, f, &block.terminator);
        out.push_str(" : ");
        write_types(out, block.terminator.iter().map(|&v| f.ty(v)));
    }
    out.push('\n');
}

fn print_op(out: &mut String, f: &Func, op: &OpData, depth: usize) {
    let info = op.opcode.info();
    out.push_str(&indent(depth));
    if !op.results.is_empty() {
        write_values(out, f, &op.results);
        out.push_str(" = ");
    }
    out.push_str(info.name);
    // The payload of a `Format::Const` op is written after the name, not in
    // the dictionary.
    let payload_attr = match info.format {
        Format::Const => info
            .attrs
            .iter()
            .find(|a| a.kind == AttrKind::Const)
            .map(|a| a.name)
            .filter(|name| matches!(op.attrs.get(name), Some(Attr::Const(_)))),
        Format::Generic => None,
    };
    if let Some(Attr::Const(c)) = payload_attr.and_then(|n| op.attrs.get(n)) {
        out.push(' ');
        let ty = op.results.first().map(|&v| f.ty(v));
        write_const(out, c, ty);
    }
    if !op.operands.is_empty() {
        out.push(' ');
        write_values(out, f, &op.operands);
    }
    let shown: Vec<(&str, &Attr)> = op
        .attrs
        .iter()
        .filter(|(name, value)| Some(*name) != payload_attr && !info.is_default(name, value))
        .collect();
    if !shown.is_empty() {
        out.push_str(" {");
        for (i, (name, value)) in shown.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{name} = {value}");
        }
        out.push('}');
    }
    if !op.regions.is_empty() {
        out.push_str(" (");
        for (i, region) in op.regions.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str("{\n");
            if !region.args.is_empty() {
                let _ = write!(out, "{}^bb0(", indent(depth));
                for (j, &a) in region.args.iter().enumerate() {
                    if j > 0 {
                        out.push_str(", ");
                    }
                    let _ = write!(out, "%{}: {}", f.name_of(a), f.ty(a));
                }
                out.push_str("):\n");
            }
            print_block_body(out, f, region, depth + 1, "yield");
            let _ = write!(out, "{}}}", indent(depth));
        }
        out.push(')');
    }
    if !op.results.is_empty() {
        out.push_str(" : ");
        write_types(out, op.results.iter().map(|&v| f.ty(v)));
    }
    if let Some(name) = &op.loc.name {
        let _ = write!(out, " loc({})", quoted(name));
    }
    out.push('\n');
}

fn write_const(out: &mut String, c: &ConstValue, ty: Option<&TensorType>) {
    match c {
        ConstValue::Weight(w) => {
            let _ = write!(out, "{}[{}]", symbol(&w.file), quoted(&w.key));
        }
        ConstValue::Dense(d) => {
            out.push_str("dense<");
            write_dense(out, d, ty);
            out.push('>');
        }
        // In-memory values print as the dense payload they equal, so the
        // text reads back to the same numbers.
        ConstValue::Tensor(t) => {
            out.push_str("dense<");
            write_dense(out, &ConstValue::tensor_dense(t), ty);
            out.push('>');
        }
    }
}

/// A dense payload: a splat when all elements are equal (bitwise, so NaN
/// splats too), else nested lists by shape. Payloads whose length does not
/// match the type print flat (such modules do not verify).
fn write_dense(out: &mut String, d: &DenseData, ty: Option<&TensorType>) {
    let storage = ty.map(|t| t.elem.storage());
    let bools = storage == Some(Scalar::I1);
    let narrow = storage.is_some_and(|s| s.is_float() && s != Scalar::F64);
    let elem = |out: &mut String, i: usize| match d {
        DenseData::Floats(v) => write_elem_float(out, v[i], narrow),
        DenseData::Ints(v) if bools && (v[i] == 0 || v[i] == 1) => {
            out.push_str(if v[i] == 1 { "true" } else { "false" })
        }
        DenseData::Ints(v) => {
            let _ = write!(out, "{}", v[i]);
        }
    };
    let n = d.len();
    let all_equal = match d {
        DenseData::Floats(v) => v.iter().all(|x| x.to_bits() == v[0].to_bits()),
        DenseData::Ints(v) => v.iter().all(|x| *x == v[0]),
    };
    if n > 0 && all_equal {
        elem(out, 0);
        return;
    }
    let shape = match ty {
        Some(t) if t.num_elements() == n && n > 0 => t.shape.as_slice(),
        _ => &[n][..],
    };
    // `block[k]`: how many elements one list at depth `k` holds.
    let mut block = vec![1usize; shape.len()];
    for k in (0..shape.len()).rev() {
        block[k] = shape[k] * block.get(k + 1).copied().unwrap_or(1);
    }
    if n == 0 {
        out.push_str("[]");
        return;
    }
    for i in 0..n {
        if i > 0 {
            out.push_str(", ");
        }
        for &b in &block {
            if i % b == 0 {
                out.push('[');
            }
        }
        elem(out, i);
        for &b in block.iter().rev() {
            if (i + 1) % b == 0 {
                out.push(']');
            }
        }
    }
}

/// A float element. Values of types narrower than f64 are exactly
/// representable as f32, and f32's shortest round-trip text reads back (and
/// rounds back) to the same value, so `0.1` prints as `0.1`, not as the f64
/// expansion of its f32 rounding.
fn write_elem_float(out: &mut String, v: f64, narrow: bool) {
    if !narrow || !v.is_finite() {
        let _ = write_float(out, v);
        return;
    }
    let s = format!("{:?}", v as f32);
    out.push_str(&s);
    if !s.contains(['.', 'e', 'E']) {
        out.push_str(".0");
    }
}

fn write_values(out: &mut String, f: &Func, values: &[crate::module::ValueId]) {
    for (i, &v) in values.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "%{}", f.name_of(v));
    }
}

fn write_types<'a>(out: &mut String, types: impl Iterator<Item = &'a TensorType>) {
    for (i, t) in types.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{t}");
    }
}

fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

/// `"..."` with Rust's `escape_default`, which the parser reads back.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.escape_default())
}

/// `@name`, or `@"name"` when it holds characters a bare symbol cannot.
fn symbol(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '-'));
    if bare {
        format!("@{name}")
    } else {
        format!("@{}", quoted(name))
    }
}
