//! The op table: the one list of aoc's ops.
//!
//! Each entry declares an op once: its mnemonic, summary, example, operands,
//! attributes with kinds and defaults, traits, text format, and two hooks —
//! `infer` (shape and dtype inference plus attribute checks, used by the
//! verifier and by builders) and `eval` (the op's meaning, used by the
//! reference interpreter). From this table come the `Opcode` enum, name
//! lookup, structural verification, parse/print, interpreter dispatch, the
//! egg language (in `aoc-passes`) and `docs/ops.md`.
//!
//! Adding an op: add an entry here and write its two hooks beside the ops of
//! its family (`elementwise.rs`, `nn.rs`, ...). Nothing else lists ops.

use crate::attr::{Attr, AttrDefault, AttrKind, Attrs, ConstValue};
use crate::interp::WeightSource;
use crate::tensor::Tensor;
use crate::types::{Scalar, TensorType};
pub use kind::OpKind;

pub mod constant;
pub mod control;
pub mod elementwise;
pub mod fused;
pub mod grid_sample;
pub mod kind;
pub mod nn;
pub mod quant;
pub mod quant_compute;
pub mod recurrent;
pub mod reduce;
pub mod resize;
pub mod shape;
pub mod sparse;
pub mod winograd;

/// How many values an operand slot takes.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Arity {
    One,
    /// May be absent; only trailing slots are optional.
    Optional,
    /// Any number (at least one); only the last slot is variadic.
    Variadic,
    /// Any number, none included; only the last slot.
    Many,
}

#[derive(Copy, Clone, Debug)]
pub struct OperandInfo {
    pub name: &'static str,
    pub arity: Arity,
}

#[derive(Copy, Clone, Debug)]
pub struct AttrInfo {
    pub name: &'static str,
    pub kind: AttrKind,
    pub default: AttrDefault,
    pub doc: &'static str,
}

/// Properties passes and backends may rely on.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Trait {
    /// No side effects: may be removed when unused, deduplicated, reordered.
    Pure,
    /// Computes each output element from the same-index input elements
    /// (after broadcasting).
    Elementwise,
    /// Operands may be swapped.
    Commutative,
    /// Moves or selects elements without changing their values.
    DataMovement,
    /// The result is the operand's bytes reinterpreted: the same elements in
    /// the same row-major order, so it may share the operand's memory.
    View,
    /// The result type is not implied by the operands; it is written in the
    /// text (or given to the builder) and checked by `infer`.
    DeclaredResult,
    /// Carries an epilogue: an optional region of pointwise ops applied to
    /// the core op's result (see `ops/fused.rs`).
    Epilogue,
}

/// How an op is written in text.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Format {
    /// `%r = dialect.op %a, %b {attr = v} : result-type`
    Generic,
    /// `%r = const dense<...> : type` or `%r = const @weights["key"] : type`
    Const,
}

/// What `infer` hooks see.
pub struct InferCx<'a> {
    pub opcode: Opcode,
    pub operands: &'a [TensorType],
    pub attrs: &'a Attrs,
    /// Result types written in the text or given to the builder.
    pub declared: Option<&'a [TensorType]>,
    /// The steps of the op's epilogue region, decoded (`Trait::Epilogue`
    /// ops only; empty for every other op).
    pub epilogue: &'a [fused::Step],
}

/// What `eval` hooks see.
pub struct EvalCx<'a> {
    pub opcode: Opcode,
    pub inputs: &'a [&'a Tensor],
    pub attrs: &'a Attrs,
    /// The verified result types.
    pub result_types: &'a [TensorType],
    pub weights: &'a dyn WeightSource,
    /// The steps of the op's epilogue region, decoded (see `InferCx`).
    pub epilogue: &'a [fused::Step],
}

pub type InferFn = fn(&InferCx) -> Result<Vec<TensorType>, String>;
pub type EvalFn = fn(&EvalCx) -> Result<Vec<Tensor>, String>;

/// Everything the table says about one op.
pub struct OpInfo {
    pub opcode: Opcode,
    pub name: &'static str,
    pub summary: &'static str,
    pub example: &'static str,
    pub operands: &'static [OperandInfo],
    pub results: &'static [&'static str],
    pub attrs: &'static [AttrInfo],
    /// What kind of computation the op is; passes match on this, not on
    /// opcodes.
    pub kind: OpKind,
    pub traits: &'static [Trait],
    pub format: Format,
    pub infer: InferFn,
    pub eval: EvalFn,
}

macro_rules! attr_lookups {
    ($cx:ident) => {
        impl<'a> $cx<'a> {
            /// An attribute, or an error naming it.
            pub fn attr(&self, name: &str) -> Result<&Attr, String> {
                self.attrs.get(name).ok_or_else(|| format!("missing attribute `{name}`"))
            }
            pub fn has(&self, name: &str) -> bool {
                self.attrs.get(name).is_some()
            }
            pub fn int(&self, name: &str) -> Result<i64, String> {
                match self.attr(name)? {
                    Attr::Int(i) => Ok(*i),
                    a => Err(format!("attribute `{name}` must be an integer, found {a}")),
                }
            }
            pub fn float(&self, name: &str) -> Result<f64, String> {
                match self.attr(name)? {
                    Attr::Float(x) => Ok(*x),
                    Attr::Int(i) => Ok(*i as f64),
                    a => Err(format!("attribute `{name}` must be a float, found {a}")),
                }
            }
            pub fn bool(&self, name: &str) -> Result<bool, String> {
                match self.attr(name)? {
                    Attr::Bool(b) => Ok(*b),
                    a => Err(format!("attribute `{name}` must be a bool, found {a}")),
                }
            }
            pub fn str(&self, name: &str) -> Result<&str, String> {
                match self.attr(name)? {
                    Attr::Str(s) => Ok(s),
                    a => Err(format!("attribute `{name}` must be a string, found {a}")),
                }
            }
            pub fn ints(&self, name: &str) -> Result<&[i64], String> {
                match self.attr(name)? {
                    Attr::Ints(v) => Ok(v),
                    a => Err(format!("attribute `{name}` must be an integer list, found {a}")),
                }
            }
            pub fn floats(&self, name: &str) -> Result<&[f64], String> {
                match self.attr(name)? {
                    Attr::Floats(v) => Ok(v),
                    a => Err(format!("attribute `{name}` must be a float list, found {a}")),
                }
            }
            pub fn ty(&self, name: &str) -> Result<Scalar, String> {
                match self.attr(name)? {
                    Attr::Type(s) => Ok(*s),
                    a => Err(format!("attribute `{name}` must be an element type, found {a}")),
                }
            }
            pub fn constant(&self, name: &str) -> Result<&ConstValue, String> {
                match self.attr(name)? {
                    Attr::Const(c) => Ok(c),
                    a => Err(format!("attribute `{name}` must be a constant, found {a}")),
                }
            }
        }
    };
}
attr_lookups!(InferCx);
attr_lookups!(EvalCx);

impl<'a> InferCx<'a> {
    /// Operand `i`'s type, or `None` where an optional operand is absent.
    pub fn operand(&self, i: usize) -> Option<&TensorType> {
        self.operands.get(i)
    }
    /// The single declared result type, required by `DeclaredResult` ops.
    pub fn declared_one(&self) -> Result<&TensorType, String> {
        match self.declared {
            Some([t]) => Ok(t),
            Some(ts) => Err(format!("expected 1 result type, found {}", ts.len())),
            None => Err("the result type must be given".to_string()),
        }
    }
}

impl<'a> EvalCx<'a> {
    pub fn input(&self, i: usize) -> Option<&Tensor> {
        self.inputs.get(i).copied()
    }
    pub fn result_type(&self) -> &TensorType {
        &self.result_types[0]
    }
}

impl OpInfo {
    pub fn attr_info(&self, name: &str) -> Option<&'static AttrInfo> {
        self.attrs.iter().find(|a| a.name == name)
    }

    pub fn has_trait(&self, t: Trait) -> bool {
        self.traits.contains(&t)
    }

    /// The accepted operand counts (min, max); `max` is `None` when variadic.
    pub fn operand_range(&self) -> (usize, Option<usize>) {
        let min = self.operands.iter().filter(|o| matches!(o.arity, Arity::One | Arity::Variadic)).count();
        let variadic = self.operands.iter().any(|o| matches!(o.arity, Arity::Variadic | Arity::Many));
        (min, if variadic { None } else { Some(self.operands.len()) })
    }

    /// Checks attribute names and kinds against the table and returns them in
    /// table order with defaults filled in. Errors name the op.
    pub fn complete_attrs(&self, mut given: Attrs) -> Result<Attrs, String> {
        let mut out = Attrs::new();
        for info in self.attrs {
            match given.remove(info.name) {
                Some(v) => {
                    let v = v.coerce(info.kind);
                    if v.kind() != info.kind {
                        return Err(format!(
                            "{}: attribute `{}` must be a {}, found {}",
                            self.name,
                            info.name,
                            info.kind.name(),
                            v.kind().name()
                        ));
                    }
                    out.set(info.name, v);
                }
                None => match info.default {
                    AttrDefault::Required => {
                        return Err(format!("{}: missing required attribute `{}`", self.name, info.name));
                    }
                    AttrDefault::Optional => {}
                    d => out.set(info.name, d.value().expect("a default with a value")),
                },
            }
        }
        if let Some((name, _)) = given.0.first() {
            let known: Vec<&str> = self.attrs.iter().map(|a| a.name).collect();
            return Err(if known.is_empty() {
                format!("{}: unknown attribute `{name}` (this op takes none)", self.name)
            } else {
                format!("{}: unknown attribute `{name}` (expected one of: {})", self.name, known.join(", "))
            });
        }
        Ok(out)
    }

    /// Whether attribute `name` holds its default value (the printer omits
    /// those).
    pub fn is_default(&self, name: &str, value: &Attr) -> bool {
        self.attr_info(name).and_then(|i| i.default.value()).is_some_and(|d| &d == value)
    }
}

macro_rules! define_ops {
    ($(
        $variant:ident = $name:literal {
            summary: $summary:literal,
            example: $example:literal,
            format: $format:ident,
            operands: [$($oname:ident: $oarity:ident),* $(,)?],
            results: [$($rname:ident),* $(,)?],
            attrs: [$(($aname:ident, $akind:ident, $adefault:expr, $adoc:literal)),* $(,)?],
            kind: $kind:expr,
            traits: [$($trait:ident),* $(,)?],
            infer: $infer:path,
            eval: $eval:path $(,)?
        }
    ),* $(,)?) => {
        /// Every op aoc knows; generated from the op table.
        #[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
        pub enum Opcode {
            $($variant),*
        }

        impl Opcode {
            /// Every opcode, in table order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$variant),*];

            /// The op's table entry.
            pub fn info(self) -> &'static OpInfo {
                match self {
                    $(Opcode::$variant => {
                        static INFO: OpInfo = OpInfo {
                            opcode: Opcode::$variant,
                            name: $name,
                            summary: $summary,
                            example: $example,
                            operands: &[$(OperandInfo { name: stringify!($oname), arity: Arity::$oarity }),*],
                            results: &[$(stringify!($rname)),*],
                            attrs: &[$(AttrInfo {
                                name: stringify!($aname),
                                kind: AttrKind::$akind,
                                default: $adefault,
                                doc: $adoc,
                            }),*],
                            kind: { use kind::*; $kind },
                            traits: &[$(Trait::$trait),*],
                            format: Format::$format,
                            infer: $infer,
                            eval: $eval,
                        };
                        &INFO
                    }),*
                }
            }

            /// What kind of computation the op is (passes match on this).
            pub fn kind(self) -> OpKind {
                self.info().kind
            }

            /// The mnemonic, e.g. `core.conv2d`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Opcode::$variant => $name),*
                }
            }

            /// Looks an op up by its mnemonic.
            pub fn from_name(name: &str) -> Option<Opcode> {
                match name {
                    $($name => Some(Opcode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

use AttrDefault::{Bool, Float, Int, Ints, Optional, Required, Str};

define_ops! {
    Const = "const" {
        summary: "A constant tensor: inline `dense<...>` values, or a named tensor in a weights file declared with `weights @name = \"file.safetensors\"`.",
        example: "%w = const @weights[\"conv1.weight\"] : tensor<64x3x7x7xf32>",
        format: Const,
        operands: [],
        results: [value],
        attrs: [(value, Const, Required, "the payload: `dense<...>` (one value is a splat) or `@file[\"key\"]`")],
        kind: OpKind::Constant,
        traits: [Pure, DeclaredResult],
        infer: constant::infer_const,
        eval: constant::eval_const,
    },
    Identity = "core.identity" {
        summary: "Returns its operand unchanged.",
        example: "%y = core.identity %x : tensor<4xf32>",
        format: Generic,
        operands: [x: One],
        results: [y],
        attrs: [],
        kind: OpKind::Movement(Movement::Identity),
        traits: [Pure, Elementwise, DataMovement, View],
        infer: elementwise::infer_same,
        eval: elementwise::eval_identity,
    },

    // ---- elementwise: unary ----
    Neg = "core.neg" {
        summary: "Negation, elementwise.",
        example: "%y = core.neg %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Neg),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_numeric_unary, eval: elementwise::eval_unary,
    },
    Abs = "core.abs" {
        summary: "Absolute value, elementwise.",
        example: "%y = core.abs %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Abs),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_numeric_unary, eval: elementwise::eval_unary,
    },
    Exp = "core.exp" {
        summary: "Natural exponential, elementwise.",
        example: "%y = core.exp %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Exp),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Log = "core.log" {
        summary: "Natural logarithm, elementwise.",
        example: "%y = core.log %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Log),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Sqrt = "core.sqrt" {
        summary: "Square root, elementwise.",
        example: "%y = core.sqrt %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Sqrt),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Rsqrt = "core.rsqrt" {
        summary: "Reciprocal square root `1 / sqrt(x)`, elementwise.",
        example: "%y = core.rsqrt %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Rsqrt),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Reciprocal = "core.reciprocal" {
        summary: "Reciprocal `1 / x`, elementwise.",
        example: "%y = core.reciprocal %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Reciprocal),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Erf = "core.erf" {
        summary: "Gauss error function, elementwise.",
        example: "%y = core.erf %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Erf),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Tanh = "core.tanh" {
        summary: "Hyperbolic tangent, elementwise.",
        example: "%y = core.tanh %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Tanh),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Sigmoid = "core.sigmoid" {
        summary: "Logistic sigmoid `1 / (1 + exp(-x))`, elementwise.",
        example: "%y = core.sigmoid %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Sigmoid),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Floor = "core.floor" {
        summary: "Round toward negative infinity, elementwise.",
        example: "%y = core.floor %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Floor),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Ceil = "core.ceil" {
        summary: "Round toward positive infinity, elementwise.",
        example: "%y = core.ceil %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Ceil),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Sin = "core.sin" {
        summary: "Sine (radians), elementwise.",
        example: "%y = core.sin %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Sin),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Cos = "core.cos" {
        summary: "Cosine (radians), elementwise.",
        example: "%y = core.cos %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Cos),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Round = "core.round" {
        summary: "Round to the nearest integer, ties to even, elementwise.",
        example: "%y = core.round %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::RoundEven),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Relu = "core.relu" {
        summary: "Rectified linear unit `max(x, 0)`, elementwise.",
        example: "%y = core.relu %x : tensor<1x64x56x56xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Unary(Unary::Relu),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_numeric_unary, eval: elementwise::eval_unary,
    },
    Gelu = "core.gelu" {
        summary: "Gaussian error linear unit: `x * Φ(x)` exactly (erf form) or with the tanh approximation.",
        example: "%y = core.gelu %x {approximate = \"tanh\"} : tensor<1x128x768xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [(approximate, Str, Str("none"), "`none` (erf form) or `tanh`")],
        kind: OpKind::Activation(Activation::Gelu),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Silu = "core.silu" {
        summary: "Sigmoid linear unit (swish) `x * sigmoid(x)`, elementwise.",
        example: "%y = core.silu %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Activation(Activation::Silu),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    HardSigmoid = "core.hard_sigmoid" {
        summary: "`max(0, min(1, alpha * x + beta))`, elementwise.",
        example: "%y = core.hard_sigmoid %x {alpha = 0.1666666716337204} : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (alpha, Float, Float(0.2), "slope"),
            (beta, Float, Float(0.5), "offset"),
        ],
        kind: OpKind::Activation(Activation::HardSigmoid),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    HardSwish = "core.hard_swish" {
        summary: "`x * max(0, min(1, x / 6 + 1 / 2))`, elementwise.",
        example: "%y = core.hard_swish %x : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Activation(Activation::HardSwish),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    LeakyRelu = "core.leaky_relu" {
        summary: "`x` where `x >= 0`, else `alpha * x`, elementwise.",
        example: "%y = core.leaky_relu %x {alpha = 0.1} : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [(alpha, Float, Float(0.01), "slope for negative inputs")],
        kind: OpKind::Activation(Activation::LeakyRelu),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_float_unary, eval: elementwise::eval_unary,
    },
    Clip = "core.clip" {
        summary: "Clamps to `[min, max]`; an absent bound does not clamp.",
        example: "%y = core.clip %x {min = 0.0, max = 6.0} : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (min, Float, Optional, "lower bound"),
            (max, Float, Optional, "upper bound"),
        ],
        kind: OpKind::Activation(Activation::Clip),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_numeric_unary, eval: elementwise::eval_unary,
    },
    Cast = "core.cast" {
        summary: "Converts elements to another element type, as ONNX `Cast` does (floats to integers truncate toward zero; to fp8 saturates unless `saturate = false`).",
        example: "%y = core.cast %x {to = f16} : tensor<4xf16>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (to, Type, Required, "the target element type"),
            (saturate, Bool, Bool(true), "fp8 targets: clamp out-of-range values to the largest finite value"),
        ],
        kind: OpKind::Pointwise(Pointwise::Cast),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_cast, eval: elementwise::eval_cast,
    },

    // ---- elementwise: binary, with numpy broadcasting ----
    Add = "core.add" {
        summary: "Addition with numpy broadcasting.",
        example: "%z = core.add %x, %y : tensor<1x64x56x56xf32>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Add),
        traits: [Pure, Elementwise, Commutative],
        infer: elementwise::infer_binary, eval: elementwise::eval_binary,
    },
    Sub = "core.sub" {
        summary: "Subtraction with numpy broadcasting.",
        example: "%z = core.sub %x, %y : tensor<4xf32>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Sub),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_binary, eval: elementwise::eval_binary,
    },
    Mul = "core.mul" {
        summary: "Multiplication with numpy broadcasting.",
        example: "%z = core.mul %x, %y : tensor<4xf32>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Mul),
        traits: [Pure, Elementwise, Commutative],
        infer: elementwise::infer_binary, eval: elementwise::eval_binary,
    },
    Div = "core.div" {
        summary: "Division with numpy broadcasting (integer division truncates toward zero).",
        example: "%z = core.div %x, %y : tensor<4xf32>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Div),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_binary, eval: elementwise::eval_binary,
    },
    Max = "core.max" {
        summary: "Elementwise maximum with numpy broadcasting (NaN propagates).",
        example: "%z = core.max %x, %y : tensor<4xf32>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Max),
        traits: [Pure, Elementwise, Commutative],
        infer: elementwise::infer_binary, eval: elementwise::eval_binary,
    },
    Min = "core.min" {
        summary: "Elementwise minimum with numpy broadcasting (NaN propagates).",
        example: "%z = core.min %x, %y : tensor<4xf32>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Min),
        traits: [Pure, Elementwise, Commutative],
        infer: elementwise::infer_binary, eval: elementwise::eval_binary,
    },
    Pow = "core.pow" {
        summary: "`lhs` raised to `rhs` with numpy broadcasting; the result has `lhs`'s element type.",
        example: "%z = core.pow %x, %y : tensor<4xf32>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Pow),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_pow, eval: elementwise::eval_binary,
    },
    Prelu = "core.prelu" {
        summary: "`x` where `x >= 0`, else `slope * x`; `slope` broadcasts to `x`.",
        example: "%y = core.prelu %x, %slope : tensor<1x16x8x8xf32>",
        format: Generic, operands: [x: One, slope: One], results: [y], attrs: [],
        kind: OpKind::Activation(Activation::Prelu),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_prelu, eval: elementwise::eval_binary,
    },
    Equal = "core.equal" {
        summary: "`lhs == rhs` with numpy broadcasting; the result is `i1`.",
        example: "%z = core.equal %x, %y : tensor<4xi1>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Equal),
        traits: [Pure, Elementwise, Commutative],
        infer: elementwise::infer_compare, eval: elementwise::eval_binary,
    },
    Less = "core.less" {
        summary: "`lhs < rhs` with numpy broadcasting; the result is `i1`.",
        example: "%z = core.less %x, %y : tensor<4xi1>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Less),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_compare, eval: elementwise::eval_binary,
    },
    Greater = "core.greater" {
        summary: "`lhs > rhs` with numpy broadcasting; the result is `i1`.",
        example: "%z = core.greater %x, %y : tensor<4xi1>",
        format: Generic, operands: [lhs: One, rhs: One], results: [z], attrs: [],
        kind: OpKind::Binary(Binary::Greater),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_compare, eval: elementwise::eval_binary,
    },
    Where = "core.where" {
        summary: "Selects `x` where `cond` is true, else `y`; all three broadcast together.",
        example: "%z = core.where %c, %x, %y : tensor<4xf32>",
        format: Generic, operands: [cond: One, x: One, y: One], results: [z], attrs: [],
        kind: OpKind::Pointwise(Pointwise::Where),
        traits: [Pure, Elementwise],
        infer: elementwise::infer_where, eval: elementwise::eval_where,
    },

    // ---- linear algebra and neural-network ops (NCHW, OIHW weights) ----
    Conv2d = "core.conv2d" {
        summary: "2-D convolution of an NCHW input with OIHW weights (`groups` splits channels; depthwise when `groups` equals the input channels), plus an optional per-output-channel bias.",
        example: "%y = core.conv2d %x, %w, %b {strides = [2, 2], pads = [3, 3, 3, 3]} : tensor<1x64x112x112xf32>",
        format: Generic,
        operands: [input: One, weight: One, bias: Optional],
        results: [output],
        attrs: [
            (strides, Ints, Ints(&[1, 1]), "stride along H and W"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding [top, left, bottom, right]"),
            (dilations, Ints, Ints(&[1, 1]), "kernel dilation along H and W"),
            (groups, Int, Int(1), "number of channel groups"),
        ],
        kind: OpKind::Conv(Conv::Direct, Form::Float),
        traits: [Pure],
        infer: nn::infer_conv2d, eval: nn::eval_conv2d,
    },
    ConvTranspose2d = "core.conv_transpose2d" {
        summary: "2-D transposed convolution (ONNX `ConvTranspose`) with weights laid out (C_in, C_out / groups, kH, kW).",
        example: "%y = core.conv_transpose2d %x, %w {strides = [2, 2], pads = [1, 1, 1, 1]} : tensor<1x16x16x16xf32>",
        format: Generic,
        operands: [input: One, weight: One, bias: Optional],
        results: [output],
        attrs: [
            (strides, Ints, Ints(&[1, 1]), "stride along H and W"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding removed from the full output [top, left, bottom, right]"),
            (dilations, Ints, Ints(&[1, 1]), "kernel dilation along H and W"),
            (output_padding, Ints, Ints(&[0, 0]), "extra rows and columns added at the bottom and right"),
            (groups, Int, Int(1), "number of channel groups"),
        ],
        kind: OpKind::Conv(Conv::Transposed, Form::Float),
        traits: [Pure],
        infer: nn::infer_conv_transpose2d, eval: nn::eval_conv_transpose2d,
    },
    MatMul = "core.matmul" {
        summary: "Matrix product with numpy semantics: batched, broadcasting batch dimensions, 1-D operands promoted and the added dimension removed.",
        example: "%y = core.matmul %a, %b : tensor<8x128x64xf32>",
        format: Generic,
        operands: [lhs: One, rhs: One],
        results: [y],
        attrs: [],
        kind: OpKind::MatMul(Form::Float),
        traits: [Pure],
        infer: nn::infer_matmul, eval: nn::eval_matmul,
    },
    Gemm = "core.gemm" {
        summary: "`alpha * op(a) @ op(b) + beta * c` on 2-D operands, where `op` transposes when asked; `c` broadcasts to the result.",
        example: "%y = core.gemm %a, %b, %c {trans_b = true} : tensor<1x1000xf32>",
        format: Generic,
        operands: [a: One, b: One, c: Optional],
        results: [y],
        attrs: [
            (alpha, Float, Float(1.0), "scale of the product"),
            (beta, Float, Float(1.0), "scale of `c`"),
            (trans_a, Bool, Bool(false), "transpose `a` first"),
            (trans_b, Bool, Bool(false), "transpose `b` first"),
        ],
        kind: OpKind::Gemm(Form::Float),
        traits: [Pure],
        infer: nn::infer_gemm, eval: nn::eval_gemm,
    },
    BatchNorm = "core.batch_norm" {
        summary: "Inference batch normalization over axis 1: `(x - mean) / sqrt(var + epsilon) * scale + bias`.",
        example: "%y = core.batch_norm %x, %scale, %bias, %mean, %var {epsilon = 1.0e-5} : tensor<1x64x56x56xf32>",
        format: Generic,
        operands: [x: One, scale: One, bias: One, mean: One, var: One],
        results: [y],
        attrs: [(epsilon, Float, Float(1e-5), "added to the variance")],
        kind: OpKind::Pointwise(Pointwise::BatchNorm),
        traits: [Pure],
        infer: nn::infer_batch_norm, eval: nn::eval_batch_norm,
    },
    LayerNorm = "core.layer_norm" {
        summary: "Layer normalization over the dimensions from `axis` to the last: `(x - mean) / sqrt(var + epsilon) * scale + bias`.",
        example: "%y = core.layer_norm %x, %g, %b {epsilon = 1.0e-12} : tensor<1x128x768xf32>",
        format: Generic,
        operands: [x: One, scale: One, bias: Optional],
        results: [y],
        attrs: [
            (axis, Int, Int(-1), "first normalized dimension (negative counts from the end)"),
            (epsilon, Float, Float(1e-5), "added to the variance"),
        ],
        kind: OpKind::Norm(Norm::LayerNorm),
        traits: [Pure],
        infer: nn::infer_layer_norm, eval: nn::eval_layer_norm,
    },
    Softmax = "core.softmax" {
        summary: "Softmax along `axis`: `exp(x - max) / sum(exp(x - max))`.",
        example: "%y = core.softmax %x {axis = -1} : tensor<1x12x128x128xf32>",
        format: Generic,
        operands: [x: One],
        results: [y],
        attrs: [(axis, Int, Int(-1), "the normalized dimension (negative counts from the end)")],
        kind: OpKind::Norm(Norm::Softmax),
        traits: [Pure],
        infer: nn::infer_softmax, eval: nn::eval_softmax,
    },
    LogSoftmax = "core.log_softmax" {
        summary: "Logarithm of the softmax along `axis`, computed stably.",
        example: "%y = core.log_softmax %x : tensor<1x10xf32>",
        format: Generic,
        operands: [x: One],
        results: [y],
        attrs: [(axis, Int, Int(-1), "the normalized dimension (negative counts from the end)")],
        kind: OpKind::Norm(Norm::LogSoftmax),
        traits: [Pure],
        infer: nn::infer_softmax, eval: nn::eval_softmax,
    },
    MaxPool2d = "core.max_pool2d" {
        summary: "2-D max pooling over NCHW; padded positions never win.",
        example: "%y = core.max_pool2d %x {kernel = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]} : tensor<1x64x56x56xf32>",
        format: Generic,
        operands: [x: One],
        results: [y],
        attrs: [
            (kernel, Ints, Required, "window size along H and W"),
            (strides, Ints, Ints(&[1, 1]), "stride along H and W"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding [top, left, bottom, right]"),
            (dilations, Ints, Ints(&[1, 1]), "window dilation along H and W"),
            (ceil_mode, Bool, Bool(false), "round the output size up instead of down"),
        ],
        kind: OpKind::Pool(Pool::Max, Form::Float),
        traits: [Pure],
        infer: nn::infer_pool2d, eval: nn::eval_pool2d,
    },
    AvgPool2d = "core.avg_pool2d" {
        summary: "2-D average pooling over NCHW.",
        example: "%y = core.avg_pool2d %x {kernel = [2, 2], strides = [2, 2]} : tensor<1x64x28x28xf32>",
        format: Generic,
        operands: [x: One],
        results: [y],
        attrs: [
            (kernel, Ints, Required, "window size along H and W"),
            (strides, Ints, Ints(&[1, 1]), "stride along H and W"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding [top, left, bottom, right]"),
            (dilations, Ints, Ints(&[1, 1]), "window dilation along H and W"),
            (ceil_mode, Bool, Bool(false), "round the output size up instead of down"),
            (count_include_pad, Bool, Bool(false), "divide by the full window size, padding included"),
        ],
        kind: OpKind::Pool(Pool::Avg, Form::Float),
        traits: [Pure],
        infer: nn::infer_pool2d, eval: nn::eval_pool2d,
    },
    GlobalAvgPool = "core.global_avg_pool" {
        summary: "Mean over every dimension after the first two, kept as size 1.",
        example: "%y = core.global_avg_pool %x : tensor<1x2048x1x1xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Pool(Pool::GlobalAvg, Form::Float),
        traits: [Pure],
        infer: nn::infer_global_pool, eval: nn::eval_global_pool,
    },
    GlobalMaxPool = "core.global_max_pool" {
        summary: "Maximum over every dimension after the first two, kept as size 1.",
        example: "%y = core.global_max_pool %x : tensor<1x2048x1x1xf32>",
        format: Generic, operands: [x: One], results: [y], attrs: [],
        kind: OpKind::Pool(Pool::GlobalMax, Form::Float),
        traits: [Pure],
        infer: nn::infer_global_pool, eval: nn::eval_global_pool,
    },

    // ---- reductions ----
    ReduceSum = "core.reduce_sum" {
        summary: "Sum over `axes` (an empty list reduces nothing).",
        example: "%y = core.reduce_sum %x {axes = [1], keepdims = false} : tensor<4xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (axes, Ints, Required, "reduced dimensions (negative counts from the end)"),
            (keepdims, Bool, Bool(true), "keep reduced dimensions as size 1"),
        ],
        kind: OpKind::Reduce(Reduce::Sum),
        traits: [Pure],
        infer: reduce::infer_reduce, eval: reduce::eval_reduce,
    },
    ReduceMean = "core.reduce_mean" {
        summary: "Mean over `axes` (an empty list reduces nothing).",
        example: "%y = core.reduce_mean %x {axes = [-1]} : tensor<1x128x1xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (axes, Ints, Required, "reduced dimensions (negative counts from the end)"),
            (keepdims, Bool, Bool(true), "keep reduced dimensions as size 1"),
        ],
        kind: OpKind::Reduce(Reduce::Mean),
        traits: [Pure],
        infer: reduce::infer_reduce, eval: reduce::eval_reduce,
    },
    ReduceMax = "core.reduce_max" {
        summary: "Maximum over `axes` (an empty list reduces nothing).",
        example: "%y = core.reduce_max %x {axes = [1]} : tensor<4x1xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (axes, Ints, Required, "reduced dimensions (negative counts from the end)"),
            (keepdims, Bool, Bool(true), "keep reduced dimensions as size 1"),
        ],
        kind: OpKind::Reduce(Reduce::Max),
        traits: [Pure],
        infer: reduce::infer_reduce, eval: reduce::eval_reduce,
    },
    ReduceMin = "core.reduce_min" {
        summary: "Minimum over `axes` (an empty list reduces nothing).",
        example: "%y = core.reduce_min %x {axes = [1]} : tensor<4x1xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (axes, Ints, Required, "reduced dimensions (negative counts from the end)"),
            (keepdims, Bool, Bool(true), "keep reduced dimensions as size 1"),
        ],
        kind: OpKind::Reduce(Reduce::Min),
        traits: [Pure],
        infer: reduce::infer_reduce, eval: reduce::eval_reduce,
    },

    // ---- shape and data movement ----
    Reshape = "core.reshape" {
        summary: "Same elements in row-major order, another static shape.",
        example: "%y = core.reshape %x {shape = [1, 2048]} : tensor<1x2048xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [(shape, Ints, Required, "the result shape (every dimension given)")],
        kind: OpKind::Movement(Movement::Reshape),
        traits: [Pure, DataMovement, View],
        infer: shape::infer_reshape, eval: shape::eval_reshape,
    },
    Transpose = "core.transpose" {
        summary: "Permutes dimensions: result dimension `i` is operand dimension `perm[i]`.",
        example: "%y = core.transpose %x {perm = [0, 2, 1, 3]} : tensor<1x12x128x64xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [(perm, Ints, Required, "the permutation")],
        kind: OpKind::Movement(Movement::Transpose),
        traits: [Pure, DataMovement],
        infer: shape::infer_transpose, eval: shape::eval_transpose,
    },
    Flatten = "core.flatten" {
        summary: "Reshapes to 2-D: dimensions before `axis` form the rows, the rest the columns.",
        example: "%y = core.flatten %x {axis = 1} : tensor<1x2048xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [(axis, Int, Int(1), "split point (negative counts from the end)")],
        kind: OpKind::Movement(Movement::Reshape),
        traits: [Pure, DataMovement, View],
        infer: shape::infer_flatten, eval: shape::eval_reshape,
    },
    Concat = "core.concat" {
        summary: "Joins tensors along `axis`.",
        example: "%y = core.concat %a, %b {axis = 1} : tensor<1x128x28x28xf32>",
        format: Generic, operands: [inputs: Variadic], results: [y],
        attrs: [(axis, Int, Required, "the joined dimension (negative counts from the end)")],
        kind: OpKind::Movement(Movement::Concat),
        traits: [Pure, DataMovement],
        infer: shape::infer_concat, eval: shape::eval_concat,
    },
    Slice = "core.slice" {
        summary: "ONNX `Slice` with constant bounds: `starts`/`ends` clamp to the dimension, negative values count from the end, `steps` may be negative.",
        example: "%y = core.slice %x {starts = [0], ends = [2], axes = [1]} : tensor<4x2xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (starts, Ints, Required, "first index per sliced axis"),
            (ends, Ints, Required, "one past the last index per sliced axis"),
            (axes, Ints, Optional, "sliced axes (default: 0, 1, ...)"),
            (steps, Ints, Optional, "step per sliced axis (default: 1)"),
        ],
        kind: OpKind::Movement(Movement::Slice),
        traits: [Pure, DataMovement],
        infer: shape::infer_slice, eval: shape::eval_slice,
    },
    Pad = "core.pad" {
        summary: "Pads (or, with negative amounts, crops) every dimension; `mode` is `constant`, `reflect`, `edge` or `wrap`.",
        example: "%y = core.pad %x {pads = [0, 0, 1, 1, 0, 0, 1, 1]} : tensor<1x3x226x226xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (pads, Ints, Required, "amounts [begin_0, ..., begin_n, end_0, ..., end_n]"),
            (mode, Str, Str("constant"), "`constant`, `reflect`, `edge` or `wrap`"),
            (value, Float, Float(0.0), "fill value for `constant`"),
        ],
        kind: OpKind::Movement(Movement::Pad),
        traits: [Pure, DataMovement],
        infer: shape::infer_pad, eval: shape::eval_pad,
    },
    Gather = "core.gather" {
        summary: "Selects slices of `data` along `axis` by integer `indices` (negative indices count from the end), as ONNX `Gather`; embeddings use it.",
        example: "%y = core.gather %table, %ids {axis = 0} : tensor<1x128x768xf32>",
        format: Generic, operands: [data: One, indices: One], results: [y],
        attrs: [(axis, Int, Int(0), "the indexed dimension (negative counts from the end)")],
        kind: OpKind::Movement(Movement::Gather),
        traits: [Pure, DataMovement],
        infer: shape::infer_gather, eval: shape::eval_gather,
    },
    Expand = "core.expand" {
        summary: "Broadcasts to the numpy broadcast of the operand's shape and `shape`.",
        example: "%y = core.expand %x {shape = [4, 3]} : tensor<4x3xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [(shape, Ints, Required, "the shape broadcast against")],
        kind: OpKind::Movement(Movement::Expand),
        traits: [Pure, DataMovement],
        infer: shape::infer_expand, eval: shape::eval_expand,
    },
    Resize = "core.resize" {
        summary: "ONNX `Resize` on static sizes: `nearest`, `linear` (n-linear) or `cubic` interpolation with ONNX's coordinate transformation modes. A per-tensor quantized operand takes `nearest` only (stored values are picked; the result has the operand's type).",
        example: "%y = core.resize %x {sizes = [1, 3, 64, 64], mode = \"linear\"} : tensor<1x3x64x64xf32>",
        format: Generic, operands: [x: One], results: [y],
        attrs: [
            (sizes, Ints, Required, "the result shape"),
            (scales, Floats, Optional, "per-dimension scales used in the coordinate mapping (default: sizes / input shape)"),
            (mode, Str, Str("nearest"), "`nearest`, `linear` or `cubic`"),
            (coordinate_transformation_mode, Str, Str("half_pixel"), "ONNX's mapping from output to input coordinates"),
            (nearest_mode, Str, Str("round_prefer_floor"), "rounding for `nearest`"),
            (cubic_coeff_a, Float, Float(-0.75), "the cubic kernel's `a`"),
            (exclude_outside, Bool, Bool(false), "give weight 0 to samples outside the input (cubic)"),
            (extrapolation_value, Float, Float(0.0), "value outside the input for `tf_crop_and_resize`"),
            (roi, Floats, Optional, "region of interest for `tf_crop_and_resize` [starts..., ends...]"),
        ],
        kind: OpKind::Resize,
        traits: [Pure],
        infer: resize::infer_resize, eval: resize::eval_resize,
    },

    GridSample = "core.grid_sample" {
        summary: "ONNX `GridSample` on N×C×H×W (or N×C×D×H×W): samples `x` at the normalized `(x, y[, z])` positions of `grid` (N×Ho×Wo×2 or N×Do×Ho×Wo×3) by `nearest`, `linear` or `cubic` interpolation, with `zeros`, `border` or `reflection` padding.",
        example: "%y = core.grid_sample %x, %grid {mode = \"linear\"} : tensor<1x3x8x8xf32>",
        format: Generic, operands: [x: One, grid: One], results: [y],
        attrs: [
            (mode, Str, Str("linear"), "`nearest`, `linear` or `cubic` (opset 16's `bilinear`/`bicubic` import as `linear`/`cubic`)"),
            (padding_mode, Str, Str("zeros"), "what a position outside the image reads: `zeros`, `border` or `reflection`"),
            (align_corners, Bool, Bool(false), "-1 and 1 are the centers of the corner pixels (else their outer edges)"),
        ],
        kind: OpKind::GridSample,
        traits: [Pure],
        infer: grid_sample::infer_grid_sample, eval: grid_sample::eval_grid_sample,
    },

    // ---- quantization (MLIR quant dialect conventions) ----
    Quantize = "quant.quantize" {
        summary: "Quantizes floats to the declared quantized type: `saturate(round_half_even(x / scale) + zero_point)`, per tensor or per axis, as ONNX `QuantizeLinear`.",
        example: "%q = quant.quantize %x : tensor<1x64x!quant.uniform<i8:f32, 0.0157:-3>>",
        format: Generic, operands: [x: One], results: [q],
        attrs: [(saturate, Bool, Bool(true), "fp8 storage: clamp to the largest finite value")],
        kind: OpKind::Pointwise(Pointwise::Quantize),
        traits: [Pure, Elementwise, DeclaredResult],
        infer: quant::infer_quantize, eval: quant::eval_quantize,
    },
    Dequantize = "quant.dequantize" {
        summary: "Maps quantized values back to their expressed float type: `(q - zero_point) * scale`, as ONNX `DequantizeLinear`.",
        example: "%x = quant.dequantize %q : tensor<1x64xf32>",
        format: Generic, operands: [q: One], results: [x], attrs: [],
        kind: OpKind::Pointwise(Pointwise::Dequantize),
        traits: [Pure, Elementwise],
        infer: quant::infer_dequantize, eval: quant::eval_dequantize,
    },
    Requantize = "quant.requantize" {
        summary: "Converts between quantized types; exactly `quantize(dequantize(q))` to the declared type.",
        example: "%r = quant.requantize %q : tensor<1x64x!quant.uniform<i8:f32, 0.05>>",
        format: Generic, operands: [q: One], results: [r], attrs: [],
        kind: OpKind::Pointwise(Pointwise::Requantize),
        traits: [Pure, Elementwise, DeclaredResult],
        infer: quant::infer_requantize, eval: quant::eval_requantize,
    },

    // ---- quantized integer compute (the `qdq` pass makes these) ----
    // Each means exactly: dequantize every operand, run the float op of the
    // same name, clamp to [clip_min, clip_max], quantize to the declared type.
    QuantConv2d = "quant.conv2d" {
        summary: "`core.conv2d` on quantized operands (an int32 bias with scale `s_x * s_w` included) with a requantize epilogue: exactly dequantize, convolve in float, clamp to `[clip_min, clip_max]`, quantize to the declared type.",
        example: "%y = quant.conv2d %x, %w, %b {pads = [1, 1, 1, 1]} : tensor<1x64x56x56x!quant.uniform<i8:f32, 0.02:-128>>",
        format: Generic,
        operands: [input: One, weight: One, bias: Optional],
        results: [output],
        attrs: [
            (strides, Ints, Ints(&[1, 1]), "stride along H and W"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding [top, left, bottom, right]"),
            (dilations, Ints, Ints(&[1, 1]), "kernel dilation along H and W"),
            (groups, Int, Int(1), "number of channel groups"),
            (clip_min, Float, Optional, "epilogue: lower clamp before quantizing (a fused relu is 0.0)"),
            (clip_max, Float, Optional, "epilogue: upper clamp before quantizing"),
        ],
        kind: OpKind::Conv(Conv::Direct, Form::Quant),
        traits: [Pure, DeclaredResult],
        infer: quant_compute::infer_conv2d, eval: quant_compute::eval_conv2d,
    },
    QuantMatMul = "quant.matmul" {
        summary: "`core.matmul` on quantized operands, an optional bias (an int32 vector with scale `s_a * s_b` along the last axis, a linear layer's) added after the product, with a requantize epilogue (dequantize, multiply in float, add the bias, clamp, quantize to the declared type).",
        example: "%y = quant.matmul %a, %b, %bias : tensor<1x128x768x!quant.uniform<i8:f32, 0.05>>",
        format: Generic,
        operands: [lhs: One, rhs: One, bias: Optional],
        results: [y],
        attrs: [
            (clip_min, Float, Optional, "epilogue: lower clamp before quantizing (a fused relu is 0.0)"),
            (clip_max, Float, Optional, "epilogue: upper clamp before quantizing"),
        ],
        kind: OpKind::MatMul(Form::Quant),
        traits: [Pure, DeclaredResult],
        infer: quant_compute::infer_matmul, eval: quant_compute::eval_matmul,
    },
    QuantGemm = "quant.gemm" {
        summary: "`core.gemm` on quantized operands with a requantize epilogue (dequantize, compute in float, clamp, quantize to the declared type).",
        example: "%y = quant.gemm %a, %b, %c {trans_b = true} : tensor<1x10x!quant.uniform<i8:f32, 0.006:-50>>",
        format: Generic,
        operands: [a: One, b: One, c: Optional],
        results: [y],
        attrs: [
            (alpha, Float, Float(1.0), "scale of the product"),
            (beta, Float, Float(1.0), "scale of `c`"),
            (trans_a, Bool, Bool(false), "transpose `a` first"),
            (trans_b, Bool, Bool(false), "transpose `b` first"),
            (clip_min, Float, Optional, "epilogue: lower clamp before quantizing (a fused relu is 0.0)"),
            (clip_max, Float, Optional, "epilogue: upper clamp before quantizing"),
        ],
        kind: OpKind::Gemm(Form::Quant),
        traits: [Pure, DeclaredResult],
        infer: quant_compute::infer_gemm, eval: quant_compute::eval_gemm,
    },
    QuantAdd = "quant.add" {
        summary: "`core.add` on quantized operands (numpy broadcasting) with a requantize epilogue (dequantize, add in float, clamp, quantize to the declared type).",
        example: "%z = quant.add %x, %y : tensor<1x64x56x56x!quant.uniform<i8:f32, 0.03:-128>>",
        format: Generic,
        operands: [lhs: One, rhs: One],
        results: [z],
        attrs: [
            (clip_min, Float, Optional, "epilogue: lower clamp before quantizing (a fused relu is 0.0)"),
            (clip_max, Float, Optional, "epilogue: upper clamp before quantizing"),
        ],
        kind: OpKind::Pointwise(Pointwise::QuantAdd),
        traits: [Pure, DeclaredResult],
        infer: quant_compute::infer_add, eval: quant_compute::eval_add,
    },
    QuantAvgPool2d = "quant.avg_pool2d" {
        summary: "`core.avg_pool2d` on a quantized operand with a requantize epilogue (dequantize, average in float, clamp, quantize to the declared type).",
        example: "%y = quant.avg_pool2d %x {kernel = [2, 2], strides = [2, 2]} : tensor<1x64x28x28x!quant.uniform<i8:f32, 0.02>>",
        format: Generic,
        operands: [x: One],
        results: [y],
        attrs: [
            (kernel, Ints, Required, "window size along H and W"),
            (strides, Ints, Ints(&[1, 1]), "stride along H and W"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding [top, left, bottom, right]"),
            (dilations, Ints, Ints(&[1, 1]), "window dilation along H and W"),
            (ceil_mode, Bool, Bool(false), "round the output size up instead of down"),
            (count_include_pad, Bool, Bool(false), "divide by the full window size, padding included"),
            (clip_min, Float, Optional, "epilogue: lower clamp before quantizing (a fused relu is 0.0)"),
            (clip_max, Float, Optional, "epilogue: upper clamp before quantizing"),
        ],
        kind: OpKind::Pool(Pool::Avg, Form::Quant),
        traits: [Pure, DeclaredResult],
        infer: quant_compute::infer_avg_pool2d, eval: quant_compute::eval_avg_pool2d,
    },
    QuantGlobalAvgPool = "quant.global_avg_pool" {
        summary: "`core.global_avg_pool` on a quantized operand with a requantize epilogue (dequantize, average in float, clamp, quantize to the declared type).",
        example: "%y = quant.global_avg_pool %x : tensor<1x64x1x1x!quant.uniform<i8:f32, 0.01:-128>>",
        format: Generic,
        operands: [x: One],
        results: [y],
        attrs: [
            (clip_min, Float, Optional, "epilogue: lower clamp before quantizing (a fused relu is 0.0)"),
            (clip_max, Float, Optional, "epilogue: upper clamp before quantizing"),
        ],
        kind: OpKind::Pool(Pool::GlobalAvg, Form::Quant),
        traits: [Pure, DeclaredResult],
        infer: quant_compute::infer_global_avg_pool, eval: quant_compute::eval_global_avg_pool,
    },

    // ---- sparse dialect: N:M structured sparsity (see ops/sparse.rs) ----
    // A sparse weight's reduction axis is each row along axis 0, flattened;
    // each op means exactly its dense op on the decompressed weight.
    SparseCompress = "sparse.compress" {
        summary: "Keeps the `n` largest magnitudes of every `m` consecutive weights along the reduction axis (each slice along axis 0, flattened: a convolution's C_in·kh·kw, a `sparse.matmul` weight's K) and sets the others to zero; the result carries `#sparse.nm<n, m>` and is stored as values plus indices. A weight that has the pattern already is unchanged.",
        example: "%ws = sparse.compress %w : tensor<64x128xf32, #sparse.nm<2, 4>>",
        format: Generic,
        operands: [weight: One],
        results: [sparse],
        attrs: [
            (n, Int, Int(2), "values kept in every group"),
            (m, Int, Int(4), "group length along the reduction axis"),
        ],
        kind: OpKind::Pointwise(Pointwise::SparseCompress),
        traits: [Pure],
        infer: sparse::infer_compress, eval: sparse::eval_compress,
    },
    SparseMatMul = "sparse.matmul" {
        summary: "`input @ weightᵀ + bias` with a `#sparse.nm<n, m>` weight laid out [N, K] (features x reduction, as a linear layer's weight): the last axis of the input is contracted; exactly the dense product on the decompressed weight.",
        example: "%y = sparse.matmul %x, %w, %b : tensor<8x64xf32>",
        format: Generic,
        operands: [input: One, weight: One, bias: Optional],
        results: [y],
        attrs: [],
        kind: OpKind::MatMul(Form::Sparse),
        traits: [Pure],
        infer: sparse::infer_matmul, eval: sparse::eval_matmul,
    },
    SparseConv2d = "sparse.conv2d" {
        summary: "`core.conv2d` with a `#sparse.nm<n, m>` OIHW weight (the pattern along each output channel's C_in/groups·kh·kw); exactly the dense convolution on the decompressed weight.",
        example: "%y = sparse.conv2d %x, %w, %b {pads = [1, 1, 1, 1]} : tensor<1x64x56x56xf32>",
        format: Generic,
        operands: [input: One, weight: One, bias: Optional],
        results: [output],
        attrs: [
            (strides, Ints, Ints(&[1, 1]), "stride along H and W"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding [top, left, bottom, right]"),
            (dilations, Ints, Ints(&[1, 1]), "kernel dilation along H and W"),
            (groups, Int, Int(1), "number of channel groups"),
        ],
        kind: OpKind::Conv(Conv::Direct, Form::Sparse),
        traits: [Pure],
        infer: sparse::infer_conv2d, eval: sparse::eval_conv2d,
    },

    // ---- fused ops (the `fuse` pass makes these; see ops/fused.rs) ----
    // Each is a core op followed by its epilogue region, a chain of
    // pointwise ops; binary ones take the extra operands in order. Each
    // means exactly its unfused ops, step by step, with the same rounding.
    FusedPointwise = "core.fused_pointwise" {
        summary: "A chain of pointwise ops as one op: its epilogue region starts from the first operand (block argument 0) and applies its ops in order; the other block arguments are the following operands, each taken by one binary op in order.",
        example: "%y = core.fused_pointwise %x, %b ({\n^bb0(%acc: tensor<1x64x56x56xf32>, %e0: tensor<64x1x1xf32>):\n  %s = core.add %acc, %e0 : tensor<1x64x56x56xf32>\n  %r = core.relu %s : tensor<1x64x56x56xf32>\n  yield %r : tensor<1x64x56x56xf32>\n}) : tensor<1x64x56x56xf32>",
        format: Generic,
        operands: [inputs: Variadic],
        results: [y],
        attrs: [],
        kind: OpKind::Pointwise(Pointwise::Fused),
        traits: [Pure, Epilogue],
        infer: fused::infer_fused_pointwise, eval: fused::eval_fused_pointwise,
    },
    FusedConv2d = "core.fused_conv2d" {
        summary: "`core.conv2d` (with its own bias when `bias` is set) followed by its epilogue region: block argument 0 is the convolution's result, the others are the remaining operands (residuals, per-channel tensors), each taken by one binary op in order.",
        example: "%y = core.fused_conv2d %x, %w, %b, %r {bias = true, pads = [1, 1, 1, 1]} ({\n^bb0(%acc: tensor<1x64x56x56xf32>, %e0: tensor<1x64x56x56xf32>):\n  %s = core.add %acc, %e0 : tensor<1x64x56x56xf32>\n  %y0 = core.relu %s : tensor<1x64x56x56xf32>\n  yield %y0 : tensor<1x64x56x56xf32>\n}) : tensor<1x64x56x56xf32>",
        format: Generic,
        operands: [input: One, weight: One, arg0: Optional, arg1: Optional, arg2: Optional, arg3: Optional, arg4: Optional, arg5: Optional],
        results: [output],
        attrs: [
            (strides, Ints, Ints(&[1, 1]), "stride along H and W"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding [top, left, bottom, right]"),
            (dilations, Ints, Ints(&[1, 1]), "kernel dilation along H and W"),
            (groups, Int, Int(1), "number of channel groups"),
            (bias, Bool, Bool(false), "operand 2 is the convolution's own per-output-channel bias"),
        ],
        kind: OpKind::Conv(Conv::Direct, Form::Fused),
        traits: [Pure, Epilogue],
        infer: fused::infer_fused_conv2d, eval: fused::eval_fused_conv2d,
    },
    FusedMatMul = "core.fused_matmul" {
        summary: "`core.matmul` followed by its epilogue region: block argument 0 is the product, the others are the remaining operands, each taken by one binary op in order.",
        example: "%y = core.fused_matmul %a, %w, %b ({\n^bb0(%acc: tensor<1x128x3072xf32>, %e0: tensor<3072xf32>):\n  %s = core.add %acc, %e0 : tensor<1x128x3072xf32>\n  %g = core.gelu %s : tensor<1x128x3072xf32>\n  yield %g : tensor<1x128x3072xf32>\n}) : tensor<1x128x3072xf32>",
        format: Generic,
        operands: [lhs: One, rhs: One, arg0: Optional, arg1: Optional, arg2: Optional, arg3: Optional, arg4: Optional, arg5: Optional],
        results: [y],
        attrs: [],
        kind: OpKind::MatMul(Form::Fused),
        traits: [Pure, Epilogue],
        infer: fused::infer_fused_matmul, eval: fused::eval_fused_matmul,
    },
    FusedGemm = "core.fused_gemm" {
        summary: "`core.gemm` (with `c` when `bias` is set) followed by its epilogue region: block argument 0 is the gemm's result, the others are the remaining operands, each taken by one binary op in order.",
        example: "%y = core.fused_gemm %a, %w, %c {bias = true, trans_b = true} ({\n^bb0(%acc: tensor<1x1000xf32>):\n  %r = core.relu %acc : tensor<1x1000xf32>\n  yield %r : tensor<1x1000xf32>\n}) : tensor<1x1000xf32>",
        format: Generic,
        operands: [a: One, b: One, arg0: Optional, arg1: Optional, arg2: Optional, arg3: Optional, arg4: Optional, arg5: Optional],
        results: [y],
        attrs: [
            (alpha, Float, Float(1.0), "scale of the product"),
            (beta, Float, Float(1.0), "scale of `c`"),
            (trans_a, Bool, Bool(false), "transpose `a` first"),
            (trans_b, Bool, Bool(false), "transpose `b` first"),
            (bias, Bool, Bool(false), "operand 2 is gemm's `c`"),
        ],
        kind: OpKind::Gemm(Form::Fused),
        traits: [Pure, Epilogue],
        infer: fused::infer_fused_gemm, eval: fused::eval_fused_gemm,
    },
    Attention = "core.attention" {
        summary: "Scaled dot-product attention: `softmax(steps(matmul(q, kt)), axis = -1)` then `matmul` with `v`; `kt` is the keys already transposed; the epilogue region's ops (scale, mask) act on the scores (block argument 0) and take the operands after `v` (the other block arguments) in order.",
        example: "%o = core.attention %q, %kt, %v, %scale, %mask ({\n^bb0(%s: tensor<1x12x128x128xf32>, %e0: tensor<f32>, %e1: tensor<1x1x128x128xf32>):\n  %m = core.mul %s, %e0 : tensor<1x12x128x128xf32>\n  %a = core.add %m, %e1 : tensor<1x12x128x128xf32>\n  yield %a : tensor<1x12x128x128xf32>\n}) : tensor<1x12x128x64xf32>",
        format: Generic,
        operands: [q: One, kt: One, v: One, arg0: Optional, arg1: Optional, arg2: Optional, arg3: Optional],
        results: [y],
        attrs: [],
        kind: OpKind::Attention,
        traits: [Pure, Epilogue],
        infer: fused::infer_attention, eval: fused::eval_attention,
    },
    // ---- recurrent layers (ops/recurrent.rs) ----
    Rnn = "core.rnn" {
        summary: "ONNX's RNN over `x` [seq, batch, input]: `h = f(x·wᵀ + h·rᵀ + bw + br)` per step and direction; results `y` [seq, dirs, batch, hidden] and the last state `y_h` [dirs, batch, hidden]. Optional `b`, `seq_lens`, `h0` as ONNX's (see ops/recurrent.rs).",
        example: "%y, %y_h = core.rnn %x, %w, %r {direction = \"bidirectional\"} : tensor<5x2x4x8xf32>, tensor<2x4x8xf32>",
        format: Generic,
        operands: [x: One, w: One, r: One, b: Optional, seq_lens: Optional, h0: Optional],
        results: [y, y_h],
        attrs: [
            (direction, Str, Str("forward"), "forward, reverse or bidirectional"),
            (activations, Str, Str(""), "comma-separated lowercase ONNX activation names per direction (empty: tanh)"),
            (activation_alpha, Floats, Optional, "parameters of the activations that take one, in order"),
            (activation_beta, Floats, Optional, "second parameters, in order"),
            (clip, Float, Optional, "bound on the magnitude of pre-activations"),
        ],
        kind: OpKind::Recurrent(Cell::Rnn),
        traits: [Pure],
        infer: recurrent::infer_recurrent, eval: recurrent::eval_recurrent,
    },
    Gru = "core.gru" {
        summary: "ONNX's GRU (gates z, r, h) over `x` [seq, batch, input]; results `y` [seq, dirs, batch, hidden] and `y_h` [dirs, batch, hidden]. Optional `b`, `seq_lens`, `h0` as ONNX's (see ops/recurrent.rs).",
        example: "%y, %y_h = core.gru %x, %w, %r, %b : tensor<5x1x4x8xf32>, tensor<1x4x8xf32>",
        format: Generic,
        operands: [x: One, w: One, r: One, b: Optional, seq_lens: Optional, h0: Optional],
        results: [y, y_h],
        attrs: [
            (direction, Str, Str("forward"), "forward, reverse or bidirectional"),
            (activations, Str, Str(""), "comma-separated lowercase ONNX activation names per direction (empty: sigmoid,tanh)"),
            (activation_alpha, Floats, Optional, "parameters of the activations that take one, in order"),
            (activation_beta, Floats, Optional, "second parameters, in order"),
            (clip, Float, Optional, "bound on the magnitude of pre-activations"),
            (linear_before_reset, Bool, Bool(false), "apply the reset gate after the recurrence product"),
        ],
        kind: OpKind::Recurrent(Cell::Gru),
        traits: [Pure],
        infer: recurrent::infer_recurrent, eval: recurrent::eval_recurrent,
    },
    Lstm = "core.lstm" {
        summary: "ONNX's LSTM (gates i, o, f, c; peepholes i, o, f) over `x` [seq, batch, input]; results `y` [seq, dirs, batch, hidden], `y_h` and `y_c` [dirs, batch, hidden]. Optional `b`, `seq_lens`, `h0`, `c0`, `p` as ONNX's (see ops/recurrent.rs).",
        example: "%y, %y_h, %y_c = core.lstm %x, %w, %r, %b : tensor<5x1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>",
        format: Generic,
        operands: [x: One, w: One, r: One, b: Optional, seq_lens: Optional, h0: Optional, c0: Optional, p: Optional],
        results: [y, y_h, y_c],
        attrs: [
            (direction, Str, Str("forward"), "forward, reverse or bidirectional"),
            (activations, Str, Str(""), "comma-separated lowercase ONNX activation names per direction (empty: sigmoid,tanh,tanh)"),
            (activation_alpha, Floats, Optional, "parameters of the activations that take one, in order"),
            (activation_beta, Floats, Optional, "second parameters, in order"),
            (clip, Float, Optional, "bound on the magnitude of pre-activations"),
            (input_forget, Bool, Bool(false), "couple the gates: f = 1 - i"),
        ],
        kind: OpKind::Recurrent(Cell::Lstm),
        traits: [Pure],
        infer: recurrent::infer_recurrent, eval: recurrent::eval_recurrent,
    },
    // ---- control flow (regions of ordinary ops; see ops/control.rs) ----
    If = "core.if" {
        summary: "Runs the `then` region (the first) when `cond` (one `i1` element) is true, else the `else` region; each region takes one argument per input (regions are isolated: they read only their arguments) and yields the results (ONNX `If`, MLIR `scf.if`).",
        example: "%y = core.if %c, %x ({\n^bb0(%a: tensor<4xf32>):\n  %r = core.relu %a : tensor<4xf32>\n  yield %r : tensor<4xf32>\n}, {\n^bb0(%b: tensor<4xf32>):\n  %n = core.neg %b : tensor<4xf32>\n  yield %n : tensor<4xf32>\n}) : tensor<4xf32>",
        format: Generic,
        operands: [cond: One, inputs: Many],
        results: [results],
        attrs: [],
        kind: OpKind::Control(Control::If),
        traits: [Pure, DeclaredResult],
        infer: control::infer_if, eval: control::eval_by_interpreter,
    },
    Loop = "core.loop" {
        summary: "ONNX's `Loop`: while `iter < max_trip` and `cond`, runs its region on (iter: `tensor<i64>`, cond: `tensor<i1>`, the carried values, the captured inputs), which yields (the next cond, the next carried values, scan elements). Inputs: the first `carried` are the carried values' initial values, the rest are read by every iteration. Results: the carried values' last values, then each scan element stacked along a new first axis, whose declared size is the number of iterations the loop must run (a different count is an error at run time).",
        example: "%s = core.loop %n, %t, %x {carried = 1} ({\n^bb0(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<4xf32>):\n  %b = core.add %a, %a : tensor<4xf32>\n  yield %c, %b : tensor<i1>, tensor<4xf32>\n}) : tensor<4xf32>",
        format: Generic,
        operands: [max_trip: One, cond: One, inputs: Many],
        results: [results],
        attrs: [
            (carried, Int, Int(0), "how many inputs (the first) are loop-carried"),
            (max_iterations, Int, Int(control::MAX_LOOP_ITERATIONS), "more iterations than this is an error at run time, never a hang (1 to 2^24)"),
        ],
        kind: OpKind::Control(Control::Loop),
        traits: [Pure, DeclaredResult],
        infer: control::infer_loop, eval: control::eval_by_interpreter,
    },
    // ---- Winograd convolution (the `winograd` pass makes it; see ops/winograd.rs) ----
    WinogradConv2d = "core.winograd_conv2d" {
        summary: "3x3 stride-1 ungrouped convolution by Winograd's F(m x m, 3 x 3), m = `tile` (2 or 4), with the weight transformed at compile time (`U = G g G^T`, laid out [m+2, m+2, C_out, C_in]); the interpreter runs the real algorithm (input transform `B^T d B`, products summed over channels, output transform `A^T M A`) in f32, so it differs from `core.conv2d` by rounding (within 1e-3 for values of order 1).",
        example: "%y = core.winograd_conv2d %x, %u, %b {tile = 2, pads = [1, 1, 1, 1]} : tensor<1x64x56x56xf32>",
        format: Generic,
        operands: [input: One, weight: One, bias: Optional],
        results: [output],
        attrs: [
            (tile, Int, Int(2), "output tile size m: 2 for F(2x2, 3x3), 4 for F(4x4, 3x3)"),
            (pads, Ints, Ints(&[0, 0, 0, 0]), "padding [top, left, bottom, right]"),
        ],
        kind: OpKind::Conv(Conv::Winograd, Form::Float),
        traits: [Pure],
        infer: winograd::infer_winograd_conv2d, eval: winograd::eval_winograd_conv2d,
    },
}

/// Structural checks every op gets from the table: operand count.
pub fn check_operand_count(opcode: Opcode, n: usize) -> Result<(), String> {
    let info = opcode.info();
    let (min, max) = info.operand_range();
    let ok = n >= min && max.is_none_or(|m| n <= m);
    if ok {
        return Ok(());
    }
    let expected = match max {
        None => format!("at least {min}"),
        Some(m) if m == min => format!("{min}"),
        Some(m) => format!("{min} to {m}"),
    };
    Err(format!("{}: expected {expected} operands, found {n}", info.name))
}

/// Normalizes a possibly negative axis against `rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(format!("axis {axis} is out of range for rank {rank}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &op in Opcode::ALL {
            assert!(seen.insert(op.name()), "duplicate mnemonic {}", op.name());
            assert_eq!(Opcode::from_name(op.name()), Some(op));
            assert_eq!(op.info().opcode, op);
        }
    }

    #[test]
    fn only_trailing_slots_are_optional_or_variadic() {
        for &op in Opcode::ALL {
            let ops = op.info().operands;
            for (i, o) in ops.iter().enumerate() {
                if o.arity != Arity::One {
                    assert!(
                        ops[i + 1..].iter().all(|p| p.arity == o.arity && o.arity == Arity::Optional),
                        "{}: slot `{}` must be trailing",
                        op.name(),
                        o.name
                    );
                }
            }
        }
    }
}
