//! Attribute values, their kinds, and dense constant payloads.
//!
//! Invariant: an op's attribute list always holds every attribute its op
//! table entry declares that has a default (defaults are filled when the op is
//! built or parsed), in table order; optional attributes without a default are
//! simply absent. So lookups of defaulted attributes never fail after
//! verification.

use crate::types::{write_float, Scalar};
use std::fmt;

/// The kind of value an attribute holds (checked by the verifier).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum AttrKind {
    Int,
    Float,
    Bool,
    Str,
    Ints,
    Floats,
    /// A scalar element type, e.g. `to = f16` on `core.cast`.
    Type,
    /// A constant payload: `dense<...>` or `@weights["name"]`.
    Const,
}

impl AttrKind {
    pub fn name(self) -> &'static str {
        match self {
            AttrKind::Int => "integer",
            AttrKind::Float => "float",
            AttrKind::Bool => "bool",
            AttrKind::Str => "string",
            AttrKind::Ints => "integer list",
            AttrKind::Floats => "float list",
            AttrKind::Type => "element type",
            AttrKind::Const => "constant",
        }
    }
}

/// The numbers of an inline `dense<...>` constant, flattened in row-major order.
/// A single value is a splat over the whole type.
#[derive(Clone, PartialEq, Debug)]
pub enum DenseData {
    Floats(Vec<f64>),
    Ints(Vec<i64>),
}

impl DenseData {
    pub fn len(&self) -> usize {
        match self {
            DenseData::Floats(v) => v.len(),
            DenseData::Ints(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A named tensor in an external weights file: `@weights["conv1.weight"]`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct WeightRef {
    /// The module-level `weights @name = "file"` declaration this refers to.
    pub file: String,
    /// The tensor's key inside that file.
    pub key: String,
}

/// A constant's payload.
#[derive(Clone, PartialEq, Debug)]
pub enum ConstValue {
    Dense(DenseData),
    Weight(WeightRef),
    /// Values computed in memory by a pass (folded weights). Its tensor's
    /// type must equal the constant's declared type. It prints as `dense<...>`
    /// (so text never holds it); the driver moves large ones into a weights
    /// file with `aoc_ir::weights::externalize_constants` before writing.
    Tensor(std::sync::Arc<crate::tensor::Tensor>),
}

impl ConstValue {
    /// An in-memory payload holding `t`.
    pub fn tensor(t: crate::tensor::Tensor) -> ConstValue {
        ConstValue::Tensor(std::sync::Arc::new(t))
    }

    /// The inline numbers of an in-memory payload, as a dense payload would
    /// hold them.
    pub fn tensor_dense(t: &crate::tensor::Tensor) -> DenseData {
        match &t.data {
            crate::tensor::Data::F(v) => DenseData::Floats(v.clone()),
            crate::tensor::Data::I(v) => DenseData::Ints(v.clone()),
        }
    }
}

/// An attribute value.
#[derive(Clone, PartialEq, Debug)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Type(Scalar),
    Const(ConstValue),
}

impl Attr {
    pub fn kind(&self) -> AttrKind {
        match self {
            Attr::Int(_) => AttrKind::Int,
            Attr::Float(_) => AttrKind::Float,
            Attr::Bool(_) => AttrKind::Bool,
            Attr::Str(_) => AttrKind::Str,
            Attr::Ints(_) => AttrKind::Ints,
            Attr::Floats(_) => AttrKind::Floats,
            Attr::Type(_) => AttrKind::Type,
            Attr::Const(_) => AttrKind::Const,
        }
    }

    /// Converts a parsed value to `kind` where the text is ambiguous: an
    /// integer literal for a float attribute, `[]` for a float list, an
    /// integer list written for a float list.
    pub fn coerce(self, kind: AttrKind) -> Attr {
        match (self, kind) {
            (Attr::Int(i), AttrKind::Float) => Attr::Float(i as f64),
            (Attr::Ints(v), AttrKind::Floats) => Attr::Floats(v.into_iter().map(|i| i as f64).collect()),
            (Attr::Floats(v), AttrKind::Ints) if v.is_empty() => Attr::Ints(vec![]),
            (a, _) => a,
        }
    }
}

/// A default value in the op table (const-constructible).
#[derive(Copy, Clone, Debug)]
pub enum AttrDefault {
    /// The attribute must be given.
    Required,
    /// The attribute may be absent; the op's hooks handle its absence.
    Optional,
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(&'static str),
    Ints(&'static [i64]),
    Floats(&'static [f64]),
}

impl AttrDefault {
    pub fn value(self) -> Option<Attr> {
        Some(match self {
            AttrDefault::Required | AttrDefault::Optional => return None,
            AttrDefault::Int(i) => Attr::Int(i),
            AttrDefault::Float(x) => Attr::Float(x),
            AttrDefault::Bool(b) => Attr::Bool(b),
            AttrDefault::Str(s) => Attr::Str(s.to_string()),
            AttrDefault::Ints(v) => Attr::Ints(v.to_vec()),
            AttrDefault::Floats(v) => Attr::Floats(v.to_vec()),
        })
    }
}

/// An op's attributes, in op-table order.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Attrs(pub Vec<(String, Attr)>);

impl Attrs {
    pub fn new() -> Attrs {
        Attrs(Vec::new())
    }
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }
    pub fn set(&mut self, name: &str, value: Attr) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }
    pub fn with(mut self, name: &str, value: Attr) -> Attrs {
        self.set(name, value);
        self
    }
    pub fn remove(&mut self, name: &str) -> Option<Attr> {
        let i = self.0.iter().position(|(n, _)| n == name)?;
        Some(self.0.remove(i).1)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Attr)> {
        self.0.iter().map(|(n, a)| (n.as_str(), a))
    }
}

fn write_list<T>(f: &mut fmt::Formatter<'_>, items: &[T], mut each: impl FnMut(&mut fmt::Formatter<'_>, &T) -> fmt::Result) -> fmt::Result {
    f.write_str("[")?;
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        each(f, x)?;
    }
    f.write_str("]")
}

fn write_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    write!(f, "\"{}\"", s.escape_default())
}

impl fmt::Display for WeightRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}[", self.file)?;
        write_string(f, &self.key)?;
        f.write_str("]")
    }
}

impl fmt::Display for Attr {
    /// The attribute's value as written after `name = ` in an attribute
    /// dictionary. Dense payloads print flat here; the printer prints them
    /// nested by shape.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(i) => write!(f, "{i}"),
            Attr::Float(x) => write_float(f, *x),
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Str(s) => write_string(f, s),
            Attr::Ints(v) => write_list(f, v, |f, i| write!(f, "{i}")),
            Attr::Floats(v) => write_list(f, v, |f, x| write_float(f, *x)),
            Attr::Type(s) => write!(f, "{s}"),
            Attr::Const(ConstValue::Weight(w)) => write!(f, "{w}"),
            Attr::Const(ConstValue::Tensor(t)) => {
                write!(f, "{}", Attr::Const(ConstValue::Dense(ConstValue::tensor_dense(t))))
            }
            Attr::Const(ConstValue::Dense(DenseData::Floats(v))) => {
                f.write_str("dense<")?;
                write_list(f, v, |f, x| write_float(f, *x))?;
                f.write_str(">")
            }
            Attr::Const(ConstValue::Dense(DenseData::Ints(v))) => {
                f.write_str("dense<")?;
                write_list(f, v, |f, i| write!(f, "{i}"))?;
                f.write_str(">")
            }
        }
    }
}
