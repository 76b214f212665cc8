//! The registry: the one list of aoc's passes.
//!
//! Each entry names a pass, documents its options and builds it from parsed
//! options. Pipelines, `aoc opt --help` text and `default` all read this
//! list. Passes defined outside this crate are registered by giving their
//! `PassEntry` to the pipeline through `PipelineOptions::extra_passes`.
//!
//! Invariant: names are unique, kebab-case, and equal to the built pass's
//! `Pass::name()` (a test checks it).

use crate::pass::{OptionSpec, Pass, PassDef, PassOptions, RawOption, parse_options};
use aoc_ir::Diagnostic;

/// Builds a pass from the options written in a pipeline.
pub type BuildPass = fn(&[RawOption]) -> Result<Box<dyn Pass>, Diagnostic>;

/// One registered pass.
#[derive(Copy, Clone)]
pub struct PassEntry {
    pub name: &'static str,
    pub summary: &'static str,
    pub options: &'static [OptionSpec],
    /// Whether `default` includes it (in registry order).
    pub in_default: bool,
    /// Builds the pass from options written in a pipeline; errors point at
    /// the offending option.
    pub build: BuildPass,
}

fn build_pass<P: PassDef>(raw: &[RawOption]) -> Result<Box<dyn Pass>, Diagnostic> {
    let opts = parse_options::<P::Options>(P::NAME, raw)?;
    Ok(Box::new(P::new(opts)))
}

impl PassEntry {
    /// The entry of pass type `P`.
    pub const fn of<P: PassDef>(in_default: bool) -> PassEntry {
        PassEntry {
            name: P::NAME,
            summary: P::SUMMARY,
            options: <P::Options as PassOptions>::SPEC,
            in_default,
            build: build_pass::<P>,
        }
    }
}

impl std::fmt::Debug for PassEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassEntry")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Every built-in pass, in the order `default` runs them.
pub fn registry() -> &'static [PassEntry] {
    static REGISTRY: &[PassEntry] = &[
        PassEntry::of::<crate::passes::algebraic::Algebraic>(true),
        PassEntry::of::<crate::passes::fold_bn::FoldBn>(true),
        // qdq before fuse: fusion would absorb the float ops of Q/DQ groups;
        // winograd-auto before fuse, so its per-layer choice sees plain convs.
        PassEntry::of::<crate::passes::qdq::Qdq>(true),
        PassEntry::of::<crate::passes::winograd::WinogradAuto>(true),
        PassEntry::of::<crate::passes::fuse::Fuse>(true),
        PassEntry::of::<crate::passes::winograd::Winograd>(false),
        PassEntry::of::<crate::passes::user_rules::UserRules>(false),
    ];
    REGISTRY
}

/// Looks a built-in pass up by name.
pub fn lookup(name: &str) -> Option<&'static PassEntry> {
    registry().iter().find(|e| e.name == name)
}

/// Help text listing every pass and its options (the CLI prints it).
pub fn describe(entries: &[PassEntry]) -> String {
    let mut s = String::new();
    for e in entries {
        s.push_str(&format!("{:<16} {}\n", e.name, e.summary));
        for o in e.options {
            s.push_str(&format!(
                "    {}=<{}> (default {}): {}\n",
                o.name, o.kind, o.default, o.doc
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_kebab_case_and_match_the_pass() {
        let mut seen = std::collections::HashSet::new();
        for e in registry() {
            assert!(seen.insert(e.name), "duplicate pass {}", e.name);
            assert!(
                !e.name.is_empty()
                    && e.name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "pass name `{}` is not kebab-case",
                e.name
            );
            let p = (e.build)(&[]).expect("builds with default options");
            assert_eq!(p.name(), e.name);
            assert_eq!(p.summary(), e.summary);
            for o in e.options {
                assert!(
                    o.name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                );
            }
        }
    }
}
