//! Writing LLVM IR as text: a function body builder that names SSA values,
//! and a module assembler that collects intrinsic declarations and helper
//! functions once however many kernels use them.
//!
//! The kernel generators produce text (not inkwell builder calls) because
//! the text is what `--emit llvm` shows and what a reader debugs with `llc`;
//! `crate::llvm` parses it back, verifies it and lowers it to PTX.
//!
//! Invariants:
//! - Every value a [`Body`] returns is a fresh SSA name (`%vN`), and every
//!   label from [`Body::label`] is unique within the body.
//! - Float constants are written as the hexadecimal bits of the f64 holding
//!   the exact f32 value ([`f32_lit`]), the only spelling LLVM accepts for
//!   every f32 (NaN and infinities included).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// An f32 constant in LLVM IR syntax.
pub(crate) fn f32_lit(x: f32) -> String {
    format!("0x{:016X}", (x as f64).to_bits())
}

/// The instructions of one function.
#[derive(Default)]
pub(crate) struct Body {
    text: String,
    next_value: u32,
    next_label: u32,
}

impl Body {
    pub(crate) fn new() -> Body {
        Body::default()
    }

    /// Emits `%vN = rhs` and returns `%vN`.
    pub(crate) fn v(&mut self, rhs: impl AsRef<str>) -> String {
        let name = format!("%v{}", self.next_value);
        self.next_value += 1;
        let _ = writeln!(self.text, "  {name} = {}", rhs.as_ref());
        name
    }

    /// Emits an instruction that has no result.
    pub(crate) fn ins(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.text, "  {}", text.as_ref());
    }

    /// A fresh label name (without `%`), not yet placed.
    pub(crate) fn label(&mut self, hint: &str) -> String {
        self.next_label += 1;
        format!("{hint}.{}", self.next_label)
    }

    /// Starts the basic block `label`.
    pub(crate) fn place(&mut self, label: &str) {
        let _ = writeln!(self.text, "{label}:");
    }

    /// `br label %to`
    pub(crate) fn br(&mut self, to: &str) {
        self.ins(format!("br label %{to}"));
    }

    /// `br i1 c, label %t, label %f`
    pub(crate) fn cond_br(&mut self, c: &str, t: &str, f: &str) {
        self.ins(format!("br i1 {c}, label %{t}, label %{f}"));
    }

    pub(crate) fn into_text(self) -> String {
        self.text
    }
}

/// f32 `x` rounded to bf16 (to nearest even on the bits; a NaN stays a
/// quiet NaN) as an i16 value: what the pointwise stores and the half
/// copies write.
pub(crate) fn bf16_bits(b: &mut Body, x: &str) -> String {
    let bits = b.v(format!("bitcast float {x} to i32"));
    let hi = b.v(format!("lshr i32 {bits}, 16"));
    let lsb = b.v(format!("and i32 {hi}, 1"));
    let bias = b.v(format!("add i32 {lsb}, 32767"));
    let r = b.v(format!("add i32 {bits}, {bias}"));
    let r = b.v(format!("lshr i32 {r}, 16"));
    let quiet = b.v(format!("or i32 {hi}, 64"));
    let nan = b.v(format!("fcmp uno float {x}, 0.0"));
    let h = b.v(format!("select i1 {nan}, i32 {quiet}, i32 {r}"));
    b.v(format!("trunc i32 {h} to i16"))
}

/// f32 `x` converted to i32 as `@llvm.fptosi.sat.i32.f32` does (toward
/// zero, saturating, NaN to 0), or rounded to nearest even first with
/// `nearest`: one `cvt.rzi`/`cvt.rni.s32.f32`, whose conversion saturates
/// and maps NaN to 0 itself (NVPTX expands the intrinsic into seven more
/// instructions that redo this).
pub(crate) fn f32_to_i32_sat(b: &mut Body, x: &str, nearest: bool) -> String {
    let mode = if nearest { "rni" } else { "rzi" };
    // `memory(none)`: the conversion touches no memory, so loads and
    // stores around it still combine into vectors.
    b.v(format!("call i32 asm \"cvt.{mode}.s32.f32 $0, $1;\", \"=r,f\"(float {x}) memory(none)"))
}

/// f32 `x` rounded to fp8 e4m3 (to nearest even, saturating to ±448, NaN
/// to NaN: `cvt.rn.satfinite.e4m3x2.f32`, sm_89 and newer) as an i8 value.
pub(crate) fn f32_to_e4m3(b: &mut Body, x: &str) -> String {
    // The second source goes to the low byte.
    let h = b.v(format!(
        "call i16 asm \"cvt.rn.satfinite.e4m3x2.f32 $0, $1, $2;\", \"=h,f,f\"(float 0.0, float {x}) memory(none)"
    ));
    b.v(format!("trunc i16 {h} to i8"))
}

/// The e4m3 byte `x` (i8) as f32, exactly (through f16:
/// `cvt.rn.f16x2.e4m3x2`, sm_89 and newer).
pub(crate) fn e4m3_to_f32(b: &mut Body, x: &str) -> String {
    let w = b.v(format!("zext i8 {x} to i16"));
    let h2 = b.v(format!("call i32 asm \"cvt.rn.f16x2.e4m3x2 $0, $1;\", \"=r,h\"(i16 {w}) memory(none)"));
    let lo = b.v(format!("trunc i32 {h2} to i16"));
    let h = b.v(format!("bitcast i16 {lo} to half"));
    b.v(format!("fpext half {h} to float"))
}

/// A module being assembled from kernels.
#[derive(Default)]
pub struct ModuleText {
    /// Intrinsic declarations and external globals, one line each.
    decls: BTreeSet<String>,
    /// Internal helper functions by name, each defined once.
    helpers: BTreeMap<String, String>,
    /// Kernel definitions, in order.
    funcs: Vec<String>,
}

impl ModuleText {
    pub fn new() -> ModuleText {
        ModuleText::default()
    }

    /// Adds a declaration line (`declare ...` or a global).
    pub(crate) fn declare(&mut self, line: &str) {
        self.decls.insert(line.to_string());
    }

    /// Whether helper `name` is already defined.
    pub(crate) fn has_helper(&self, name: &str) -> bool {
        self.helpers.contains_key(name)
    }

    /// Defines helper `name` (once; a second definition is ignored).
    pub(crate) fn helper(&mut self, name: &str, text: String) {
        self.helpers.entry(name.to_string()).or_insert(text);
    }

    pub(crate) fn func(&mut self, text: String) {
        self.funcs.push(text);
    }

    /// Drops the kernels (`define ptx_kernel` functions) that `keep`
    /// refuses by name; other functions stay.
    pub(crate) fn retain_kernels(&mut self, keep: impl Fn(&str) -> bool) {
        self.funcs.retain(|f| {
            let Some(rest) = f.strip_prefix("define ptx_kernel void @") else { return true };
            rest.split('(').next().is_none_or(&keep)
        });
    }

    /// The whole module: target triple, declarations, helpers, kernels.
    pub fn finish(self) -> String {
        self.text(self.funcs.iter())
    }

    /// The module as up to `parts` modules of about equal size, each with
    /// every declaration and helper and some of the kernels (largest first
    /// into the smallest part; each part keeps the kernels' order), for
    /// code generation in parallel. The split depends only on the module
    /// and `parts`, not on the machine.
    pub fn split(&self, parts: usize) -> Vec<String> {
        let parts = parts.clamp(1, self.funcs.len().max(1));
        let mut order: Vec<usize> = (0..self.funcs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.funcs[i].len()));
        let mut bins: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); parts];
        for i in order {
            let b = (0..parts).min_by_key(|&b| (bins[b].0, b)).unwrap_or(0);
            bins[b].0 += self.funcs[i].len();
            bins[b].1.push(i);
        }
        bins.into_iter()
            .filter(|(_, fs)| !fs.is_empty() || self.funcs.is_empty())
            .map(|(_, mut fs)| {
                fs.sort_unstable();
                self.text(fs.into_iter().map(|i| &self.funcs[i]))
            })
            .collect()
    }

    fn text<'s>(&self, funcs: impl Iterator<Item = &'s String>) -> String {
        let mut out = String::from("target triple = \"nvptx64-nvidia-cuda\"\n\n");
        for d in &self.decls {
            out.push_str(d);
            out.push('\n');
        }
        for h in self.helpers.values() {
            out.push('\n');
            out.push_str(h);
        }
        for f in funcs {
            out.push('\n');
            out.push_str(f);
        }
        out
    }
}

/// Whether `name` can name a kernel: a C identifier, so that the PTX
/// `.entry` keeps exactly this name (LLVM rewrites other characters).
pub(crate) fn check_entry_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "kernel name must be a C identifier (letters, digits, `_`), found `{name}`"
        ))
    }
}
