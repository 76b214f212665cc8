//! The syntax tree the grammar builds: the text's structure with spans,
//! nothing resolved. Names, numbers and escapes stay as written (`&str`
//! slices of the source); `lower.rs` checks and converts them, so every
//! semantic error gets the span of the text it is about.
//!
//! Invariant: nesting depth is bounded by the lexer's `MAX_NESTING`, so the
//! recursive walks (and drops) of this tree cannot overflow the stack.

use crate::diag::Span;

/// A piece of text with its span.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Spanned<'s> {
    pub text: &'s str,
    pub span: Span,
}

#[derive(Debug)]
pub struct File<'s> {
    pub items: Vec<Item<'s>>,
}

#[derive(Debug)]
pub enum Item<'s> {
    /// `weights @name = "path"`
    Weights {
        name: Spanned<'s>,
        path: Spanned<'s>,
    },
    Func(FuncDef<'s>),
}

#[derive(Debug)]
pub struct FuncDef<'s> {
    pub name: Spanned<'s>,
    pub params: Vec<Param<'s>>,
    /// Result types, each with its optional external name (`loc("...")`).
    pub results: Vec<(Type<'s>, Option<Spanned<'s>>)>,
    pub body: Body<'s>,
}

/// `%name: type`, a function parameter or block argument.
#[derive(Debug)]
pub struct Param<'s> {
    pub name: Spanned<'s>,
    pub ty: Type<'s>,
    /// The external name (`loc("input:0")`) of a function parameter.
    pub loc: Option<Spanned<'s>>,
}

/// A block's ops and terminator (`return` or `yield`).
#[derive(Debug)]
pub struct Body<'s> {
    /// `^bb0(...)` arguments; only regions have them.
    pub label: Option<Spanned<'s>>,
    pub args: Vec<Param<'s>>,
    pub ops: Vec<Op<'s>>,
    pub term: Terminator<'s>,
}

#[derive(Debug)]
pub struct Terminator<'s> {
    /// `return` or `yield`, with its span.
    pub keyword: Spanned<'s>,
    pub values: Vec<Spanned<'s>>,
    pub types: Vec<Type<'s>>,
    /// From the keyword to the end of the last type.
    pub span: Span,
}

#[derive(Debug)]
pub struct Op<'s> {
    pub results: Vec<Spanned<'s>>,
    pub name: Spanned<'s>,
    pub payload: Option<Payload<'s>>,
    pub operands: Vec<Spanned<'s>>,
    pub attrs: Vec<AttrEntry<'s>>,
    pub regions: Vec<Body<'s>>,
    pub types: Vec<Type<'s>>,
    /// The string of `loc("...")`, with quotes.
    pub loc: Option<Spanned<'s>>,
    /// From the first result (or the name) to the end of the types.
    pub span: Span,
}

/// The constant payload of a `Format::Const` op.
#[derive(Debug)]
pub enum Payload<'s> {
    /// `dense<...>`; the span covers the whole literal.
    Dense(Dense<'s>, Span),
    /// `@file["key"]`
    Weight { file: Spanned<'s>, key: Spanned<'s> },
}

/// A dense literal: a scalar or a (nested) list.
#[derive(Debug)]
pub enum Dense<'s> {
    Scalar(Literal<'s>),
    List(Vec<Dense<'s>>, Span),
}

/// A number or boolean literal.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum LitKind {
    Int,
    Float,
    Bool,
}

#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Literal<'s> {
    pub kind: LitKind,
    pub text: Spanned<'s>,
}

#[derive(Debug)]
pub struct AttrEntry<'s> {
    pub key: Spanned<'s>,
    pub value: AttrValue<'s>,
    /// From the key to the end of the value.
    pub span: Span,
}

#[derive(Debug)]
pub enum AttrValue<'s> {
    Lit(Literal<'s>),
    Str(Spanned<'s>),
    /// A bare word: an element type such as `f16`.
    Word(Spanned<'s>),
    List(Vec<Literal<'s>>, Span),
}

/// `tensor<dims x elem [, encoding]>`
#[derive(Debug)]
pub struct Type<'s> {
    pub dims: Vec<Spanned<'s>>,
    pub elem: Elem<'s>,
    pub encoding: Option<EncodingAst<'s>>,
    pub span: Span,
}

#[derive(Debug)]
pub enum Elem<'s> {
    Scalar(Spanned<'s>),
    Quant(QuantAst<'s>),
}

/// `!quant.uniform<storage:expressed[:axis], params>`
#[derive(Debug)]
pub struct QuantAst<'s> {
    pub name: Spanned<'s>,
    pub storage: Spanned<'s>,
    pub expressed: Spanned<'s>,
    pub axis: Option<Spanned<'s>>,
    /// One `scale[:zero_point]` for per-tensor, a `{...}` list for per-axis.
    pub params: QuantParamsAst<'s>,
    pub span: Span,
}

#[derive(Debug)]
pub enum QuantParamsAst<'s> {
    PerTensor(ScaleZp<'s>),
    PerAxis(Vec<ScaleZp<'s>>, Span),
}

#[derive(Debug)]
pub struct ScaleZp<'s> {
    pub scale: Literal<'s>,
    pub zero_point: Option<Spanned<'s>>,
}

/// `#sparse.nm<n, m>`
#[derive(Debug)]
pub struct EncodingAst<'s> {
    pub name: Spanned<'s>,
    pub args: Vec<Spanned<'s>>,
    pub span: Span,
}

impl<'s> Spanned<'s> {
    pub fn new(text: &'s str, start: usize, end: usize) -> Spanned<'s> {
        Spanned {
            text,
            span: Span::new(start, end),
        }
    }
}
