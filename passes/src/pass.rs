//! The `Pass` trait, typed pass options, and what a pass reports.
//!
//! A pass is a value built from its options by the registry (through
//! [`PassDef`]); the pass manager runs it on a module and verifies the
//! module afterwards.
//! Options arrive as `key=value` text (`fuse{max-ops=8}`) and are parsed into
//! a typed options struct per pass through [`PassOptions`].
//!
//! Invariants: a pass never panics on valid IR; it either leaves a module the
//! verifier accepts or returns a diagnostic; library code does no I/O.

pub use crate::egraph::SaturationStats;
use aoc_ir::interp::{NoWeights, WeightSource};
use aoc_ir::{Diagnostic, Module, Span};

/// A transformation of a module.
pub trait Pass {
    /// The kebab-case name used in pipelines (`fold-bn`).
    fn name(&self) -> &'static str;
    /// One line saying what the pass does.
    fn summary(&self) -> &'static str;
    /// Transforms `module` in place.
    fn run(&mut self, module: &mut Module, cx: &mut PassContext) -> Result<PassStats, Diagnostic>;
}

/// A pass type the registry can build from options: its name and summary
/// as constants (the registry lists them without building the pass), its
/// options type, and a constructor.
pub trait PassDef: Pass + Sized + 'static {
    const NAME: &'static str;
    const SUMMARY: &'static str;
    type Options: PassOptions;
    fn new(options: Self::Options) -> Self;
}

/// What every pass can see besides the module.
pub struct PassContext<'a> {
    /// Loads external weights (for passes that fold them); `NoWeights` when
    /// the driver provides none.
    pub weights: &'a dyn WeightSource,
    /// Rewrites loaded from the user's rules file (`--rules`), applied by the
    /// `user-rules` pass.
    pub user_rules: &'a [crate::egraph::Rewrite],
    /// The target whose cost model extraction uses (`sm_90`, `x86-64-v4`).
    pub target: &'a str,
}

impl Default for PassContext<'static> {
    fn default() -> Self {
        PassContext {
            weights: &NoWeights,
            user_rules: &[],
            target: "x86-64-v4",
        }
    }
}

/// What a pass reports about its run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassStats {
    /// One entry per function the pass saturated.
    pub saturation: Vec<SaturationStats>,
    /// Free-form remarks (e.g. "skipped @f: multi-result ops").
    pub notes: Vec<String>,
}

/// The documentation of one option of a pass.
#[derive(Copy, Clone, Debug)]
pub struct OptionSpec {
    /// kebab-case key, e.g. `max-ops`.
    pub name: &'static str,
    /// The kind of value: `integer`, `bool`, `float`.
    pub kind: &'static str,
    /// The default, as text.
    pub default: &'static str,
    pub doc: &'static str,
}

/// A `key=value` option as written in a pipeline, with its spans in the
/// pipeline text.
#[derive(Clone, Debug, PartialEq)]
pub struct RawOption {
    pub key: String,
    pub value: String,
    pub key_span: Span,
    pub value_span: Span,
}

/// A typed options struct of one pass.
pub trait PassOptions: Default + Sized {
    /// Every option the pass accepts (the only list of them).
    const SPEC: &'static [OptionSpec];
    /// Sets option `key` (always one of `SPEC`) from its text; errors say
    /// what the value must be.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String>;
}

/// Options for passes without options.
#[derive(Default, Debug, Clone, Copy)]
pub struct NoOptions;

impl PassOptions for NoOptions {
    const SPEC: &'static [OptionSpec] = &[];
    fn set(&mut self, key: &str, _value: &str) -> Result<(), String> {
        Err(format!("unknown option `{key}`"))
    }
}

/// Parses raw options into `O`. Unknown keys are an error naming the pass and
/// the valid options; bad values an error at the value.
pub fn parse_options<O: PassOptions>(pass: &str, raw: &[RawOption]) -> Result<O, Diagnostic> {
    let mut opts = O::default();
    let mut seen: Vec<&str> = Vec::new();
    for r in raw {
        if !O::SPEC.iter().any(|s| s.name == r.key) {
            let valid = if O::SPEC.is_empty() {
                "it takes none".to_string()
            } else {
                format!(
                    "valid options: {}",
                    O::SPEC
                        .iter()
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(Diagnostic::error_at(
                format!("pass `{pass}` has no option `{}` ({valid})", r.key),
                r.key_span,
            ));
        }
        if seen.contains(&r.key.as_str()) {
            return Err(Diagnostic::error_at(
                format!("pass `{pass}`: option `{}` is given twice", r.key),
                r.key_span,
            ));
        }
        seen.push(&r.key);
        opts.set(&r.key, &r.value).map_err(|m| {
            Diagnostic::error_at(
                format!("pass `{pass}`, option `{}`: {m}", r.key),
                r.value_span,
            )
        })?;
    }
    Ok(opts)
}

/// Parses an unsigned integer option value.
pub fn parse_usize(value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .map_err(|_| format!("expected a non-negative integer, found `{value}`"))
}

/// Parses a bool option value (`true`/`false`).
pub fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("expected `true` or `false`, found `{value}`")),
    }
}

/// Parses a float option value.
pub fn parse_f64(value: &str) -> Result<f64, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("expected a finite number, found `{value}`"))
}
