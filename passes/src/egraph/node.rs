//! The e-graph language, derived from the op table.
//!
//! A node is a function parameter, a constant (an index into the analysis's
//! side table, so weight payloads are never hashed or cloned by egg), or an
//! op: its `Opcode`, its attributes in a hashable form (floats compared by
//! bits) and, for ops whose result type is declared rather than inferred
//! (`quant.quantize`), that type. Nothing here lists ops: any opcode of the
//! table is a node, with the arity the table allows, so new ops (fused ops,
//! integer quant ops) need no edit here.
//!
//! Invariants: nodes in the e-graph always carry complete attributes
//! (`attrs: Some`); `attrs: None` appears only in rule left-hand sides, where
//! it matches any attributes. Such a wildcard is seen by `matches` only, not
//! by `Eq`/`Hash`, so left-hand sides are searched through `pattern::Lhs`,
//! which never lets egg look a pattern node up in the hash-cons. The discriminant is the opcode, and the derived
//! order sorts by it first, as egg's matcher for large classes requires.

use aoc_ir::attr::{Attr, Attrs, ConstValue, DenseData, WeightRef};
use aoc_ir::ops::check_operand_count;
use aoc_ir::ops::fused::Step;
use aoc_ir::{Opcode, Scalar, TensorType};
use egg::Id;
use std::fmt;
use std::sync::Arc;

/// An index into the constant side table (`TensorAnalysis::consts`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ConstId(pub u32);

/// An attribute value in hashable form (floats by bits).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum AttrVal {
    Int(i64),
    Float(u64),
    Bool(bool),
    Str(Box<str>),
    Ints(Box<[i64]>),
    Floats(Box<[u64]>),
    Type(Scalar),
    Dense(Box<[u64]>, bool),
    Weight(Box<str>, Box<str>),
}

impl AttrVal {
    pub fn from_attr(a: &Attr) -> AttrVal {
        match a {
            Attr::Int(i) => AttrVal::Int(*i),
            Attr::Float(x) => AttrVal::Float(x.to_bits()),
            Attr::Bool(b) => AttrVal::Bool(*b),
            Attr::Str(s) => AttrVal::Str(s.as_str().into()),
            Attr::Ints(v) => AttrVal::Ints(v.as_slice().into()),
            Attr::Floats(v) => AttrVal::Floats(v.iter().map(|x| x.to_bits()).collect()),
            Attr::Type(s) => AttrVal::Type(*s),
            Attr::Const(ConstValue::Dense(DenseData::Floats(v))) => {
                AttrVal::Dense(v.iter().map(|x| x.to_bits()).collect(), true)
            }
            Attr::Const(ConstValue::Dense(DenseData::Ints(v))) => {
                AttrVal::Dense(v.iter().map(|&x| x as u64).collect(), false)
            }
            Attr::Const(ConstValue::Weight(w)) => {
                AttrVal::Weight(w.file.as_str().into(), w.key.as_str().into())
            }
            // An in-memory payload compares by its numbers, as the dense
            // payload it prints as.
            Attr::Const(ConstValue::Tensor(t)) => {
                AttrVal::from_attr(&Attr::Const(ConstValue::Dense(ConstValue::tensor_dense(t))))
            }
        }
    }

    pub fn to_attr(&self) -> Attr {
        match self {
            AttrVal::Int(i) => Attr::Int(*i),
            AttrVal::Float(b) => Attr::Float(f64::from_bits(*b)),
            AttrVal::Bool(b) => Attr::Bool(*b),
            AttrVal::Str(s) => Attr::Str(s.to_string()),
            AttrVal::Ints(v) => Attr::Ints(v.to_vec()),
            AttrVal::Floats(v) => Attr::Floats(v.iter().map(|b| f64::from_bits(*b)).collect()),
            AttrVal::Type(s) => Attr::Type(*s),
            AttrVal::Dense(v, true) => Attr::Const(ConstValue::Dense(DenseData::Floats(
                v.iter().map(|b| f64::from_bits(*b)).collect(),
            ))),
            AttrVal::Dense(v, false) => Attr::Const(ConstValue::Dense(DenseData::Ints(
                v.iter().map(|&b| b as i64).collect(),
            ))),
            AttrVal::Weight(file, key) => Attr::Const(ConstValue::Weight(WeightRef {
                file: file.to_string(),
                key: key.to_string(),
            })),
        }
    }
}

/// A declared result type, compared by its canonical text (which
/// round-trips exactly, floats included).
#[derive(Clone, Debug)]
pub struct DeclType {
    pub ty: TensorType,
    key: Box<str>,
}

impl DeclType {
    pub fn new(ty: TensorType) -> DeclType {
        let key = ty.to_string().into();
        DeclType { ty, key }
    }
}

impl PartialEq for DeclType {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl Eq for DeclType {}
impl std::hash::Hash for DeclType {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.key.hash(h)
    }
}
impl PartialOrd for DeclType {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for DeclType {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key.cmp(&o.key)
    }
}

/// An op's complete attributes (op-table order), declared result type and,
/// for ops with an epilogue region, its steps.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct OpAttrs {
    pub values: Box<[(&'static str, AttrVal)]>,
    pub declared: Option<DeclType>,
    /// The epilogue region's steps (`aoc_ir::ops::fused`), empty for ops
    /// without one: the e-graph holds a region as the chain it decodes to.
    pub epilogue: Box<[StepKey]>,
}

/// An epilogue step in hashable form.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct StepKey {
    pub opcode: Opcode,
    /// `None` for a unary step; for a binary one, whether the extra operand
    /// is the left-hand side.
    pub reversed: Option<bool>,
    /// Unary steps: their complete attributes.
    pub attrs: Box<[(&'static str, AttrVal)]>,
}

fn table_values(opcode: Opcode, attrs: &Attrs) -> Box<[(&'static str, AttrVal)]> {
    let info = opcode.info();
    attrs
        .iter()
        .filter_map(|(n, a)| info.attr_info(n).map(|i| (i.name, AttrVal::from_attr(a))))
        .collect()
}

impl StepKey {
    pub fn new(step: &Step) -> StepKey {
        match step {
            Step::Unary { opcode, attrs } => StepKey {
                opcode: *opcode,
                reversed: None,
                attrs: table_values(*opcode, attrs),
            },
            Step::Binary { opcode, reversed } => StepKey {
                opcode: *opcode,
                reversed: Some(*reversed),
                attrs: Box::new([]),
            },
        }
    }

    pub fn step(&self) -> Step {
        if let Some(reversed) = self.reversed {
            Step::Binary {
                opcode: self.opcode,
                reversed,
            }
        } else {
            let attrs = Attrs(
                self.attrs
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_attr()))
                    .collect(),
            );
            Step::Unary {
                opcode: self.opcode,
                attrs,
            }
        }
    }
}

impl OpAttrs {
    /// Completes `attrs` against the op table (defaults filled, kinds
    /// checked) and converts them. Errors name the op.
    pub fn new(
        opcode: Opcode,
        attrs: Attrs,
        declared: Option<TensorType>,
    ) -> Result<OpAttrs, String> {
        let info = opcode.info();
        let full = info.complete_attrs(attrs)?;
        let values = full
            .iter()
            .map(|(n, a)| {
                let name = info
                    .attr_info(n)
                    .map(|i| i.name)
                    .expect("complete_attrs keeps table names");
                (name, AttrVal::from_attr(a))
            })
            .collect();
        Ok(OpAttrs {
            values,
            declared: declared.map(DeclType::new),
            epilogue: Box::new([]),
        })
    }

    /// These attributes with `steps` as the epilogue.
    pub fn with_epilogue(mut self, steps: &[Step]) -> OpAttrs {
        self.epilogue = steps.iter().map(StepKey::new).collect();
        self
    }

    /// The epilogue's steps (empty for ops without one).
    pub fn steps(&self) -> Vec<Step> {
        self.epilogue.iter().map(StepKey::step).collect()
    }

    pub fn to_attrs(&self) -> Attrs {
        Attrs(
            self.values
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_attr()))
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<Attr> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_attr())
    }
}

/// An op node: opcode, attributes (`None` only in patterns), operands.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct OpNode {
    pub opcode: Opcode,
    pub attrs: Option<Arc<OpAttrs>>,
    pub children: Vec<Id>,
}

/// A node of the e-graph.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Node {
    /// Function parameter `i`.
    Param(u32),
    /// A constant from the side table.
    Const(ConstId),
    Op(OpNode),
}

/// What egg groups nodes by: one kind per opcode, parameter and constant.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Disc {
    Param(u32),
    Const(ConstId),
    Op(Opcode),
}

impl Node {
    /// An op node with complete attributes.
    pub fn op(opcode: Opcode, attrs: OpAttrs, children: Vec<Id>) -> Node {
        Node::Op(OpNode {
            opcode,
            attrs: Some(Arc::new(attrs)),
            children,
        })
    }

    pub fn opcode(&self) -> Option<Opcode> {
        match self {
            Node::Op(o) => Some(o.opcode),
            Node::Param(_) | Node::Const(_) => None,
        }
    }
}

impl egg::Language for Node {
    type Discriminant = Disc;

    fn discriminant(&self) -> Disc {
        match self {
            Node::Param(i) => Disc::Param(*i),
            Node::Const(c) => Disc::Const(*c),
            Node::Op(o) => Disc::Op(o.opcode),
        }
    }

    /// Same opcode and arity, and equal attributes unless either side is a
    /// pattern node without attributes.
    fn matches(&self, other: &Self) -> bool {
        match (self, other) {
            (Node::Param(a), Node::Param(b)) => a == b,
            (Node::Const(a), Node::Const(b)) => a == b,
            (Node::Op(a), Node::Op(b)) => {
                a.opcode == b.opcode
                    && a.children.len() == b.children.len()
                    && match (&a.attrs, &b.attrs) {
                        (Some(x), Some(y)) => x == y,
                        _ => true,
                    }
            }
            _ => false,
        }
    }

    fn children(&self) -> &[Id] {
        match self {
            Node::Op(o) => &o.children,
            Node::Param(_) | Node::Const(_) => &[],
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            Node::Op(o) => &mut o.children,
            Node::Param(_) | Node::Const(_) => &mut [],
        }
    }
}

impl fmt::Display for Node {
    /// The op mnemonic (`core.relu`), `param:N` or `const:N`; the same
    /// spellings `FromOp` reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Param(i) => write!(f, "param:{i}"),
            Node::Const(c) => write!(f, "const:{}", c.0),
            Node::Op(o) => f.write_str(o.opcode.name()),
        }
    }
}

impl egg::FromOp for Node {
    type Error = String;

    /// Reads an op mnemonic into a pattern node (attributes unspecified),
    /// checking the operand count against the op table.
    fn from_op(op: &str, children: Vec<Id>) -> Result<Self, String> {
        if let Some(i) = op.strip_prefix("param:") {
            return i
                .parse()
                .map(Node::Param)
                .map_err(|_| format!("bad parameter `{op}`"));
        }
        if let Some(i) = op.strip_prefix("const:") {
            return i
                .parse()
                .map(|i| Node::Const(ConstId(i)))
                .map_err(|_| format!("bad constant `{op}`"));
        }
        let opcode = Opcode::from_name(op).ok_or_else(|| format!("unknown op `{op}`"))?;
        if opcode == Opcode::Const {
            return Err("`const` cannot be written in a pattern; match constants with a variable and a condition".into());
        }
        check_operand_count(opcode, children.len())?;
        Ok(Node::Op(OpNode {
            opcode,
            attrs: None,
            children,
        }))
    }
}
