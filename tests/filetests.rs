//! The filetest harness: every `tests/filetests/**/*.air` file, and every
//! `// -----`-separated case in it, is one named test
//! (`verify/shapes.air#2` for the second case of a file with several).
//!
//! File format:
//! - First line: `// test: roundtrip | verify | run | opt [--passes=LIST]`.
//!   - `roundtrip`: parse (no verifier); the printed module must re-parse and
//!     print identically; checks run against the printed text.
//!   - `verify`: parse and verify; checks run against the printed module
//!     (which must also print stably).
//!   - `run`: parse, verify and run the entry function in the reference
//!     interpreter; checks run against the outputs dumped one per line as
//!     `%y = tensor<2x2xf32> [[1.0, 2.0], [3.0, 4.0]]` (floats with six
//!     significant digits, integers exact; see `aoc_compiler::driver::dump_outputs`).
//!     Inputs: `// input: %x = dense<[1.0, 2.0]> : tensor<2xf32>` lines, bound
//!     to parameters by name.
//!   - `opt --passes=LIST [--rules=FILE]`: parse, verify, run the pipeline
//!     through `aoc_compiler::driver::run_passes` (the passes `aoc opt` runs;
//!     `--rules` names a rules file relative to the test file's folder and
//!     adds `user-rules`), verify again; checks run against the printed
//!     result (computed constants print inline as `dense<...>`).
//!   - `lower cpu|gpu [--target=T] [--precision=P] [--passes=LIST]
//!     [--reference-fallback] [precise-output]`: optimize with the target's
//!     pipeline (what `aoc compile` runs; `--passes=` names another, empty
//!     for none), compile, and check the plan as `aoc explain` prints it:
//!     steps or launches, kernels, reference fallbacks, layout copies (the
//!     artifact's path reads `<artifact>`); a compile error is checked the
//!     same way, as `compilation failed:` and the rendered diagnostic.
//!     Targets default to `x86-64-v4` and `sm_86`, precision to `fp32`.
//!   - `compile x86|ptx [...same options]`: the emitted code: the CPU
//!     kernels' assembly (`aoc compile --emit asm`) or the module's PTX
//!     (`--emit ptx`).
//!   - `precise-output`: instead of filecheck directives, the whole output
//!     must equal the case's `// | ` lines; `AOC_BLESS=1 cargo test --test
//!     filetests` rewrites those lines to the actual output (review the
//!     diff), as Cranelift's `precise-output` tests do.
//! - Checks are `filecheck` directives in comments (`// check:`, `// nextln:`,
//!   `// not:`, `// sameln:`, `// unordered:`, `// regex:`), Cranelift style.
//! - `// error: TEXT` expects an error whose message contains TEXT, located on
//!   the nearest preceding line that is not blank or a comment (or on the
//!   same line, when the comment trails code). A case with `// error:` lines
//!   must produce exactly those errors (from parsing, verifying or, for
//!   `run`, running); its checks, if any, then run against the rendered
//!   diagnostics.
//!
//! Cases are parsed with blank lines standing in for the rest of the file, so
//! line numbers in failures are the file's.

use aoc_compiler::{driver, render};
use aoc_ir::diag::line_col;
use aoc_ir::interp::NoWeights;
use aoc_ir::{Diagnostic, Module, Tensor};
use filecheck::{CheckerBuilder, NO_VARIABLES};
use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
enum Mode {
    Roundtrip,
    Verify,
    Run,
    Opt {
        passes: String,
        rules: Option<String>,
    },
    /// `lower cpu|gpu`: the plan as `aoc explain` prints it.
    Lower(Build),
    /// `compile x86|ptx`: the emitted code (assembly or PTX).
    Compile(Build),
}

/// Which backend and target a `lower`/`compile` case builds for.
#[derive(Clone, Debug)]
struct Build {
    gpu: bool,
    target: String,
    precision: String,
    /// The pipeline before code generation; `None` is the target's
    /// (what `aoc compile` runs).
    passes: Option<String>,
    /// Compare the whole output with the case's `// | ` lines.
    precise: bool,
    /// `--reference-fallback`: ops without a kernel become reference steps.
    reference_fallback: bool,
}

fn parse_build(kind: &str, words: Vec<&str>) -> Result<Build, String> {
    let gpu = match kind {
        "cpu" | "x86" => false,
        "gpu" | "ptx" => true,
        other => return Err(format!("expected cpu/x86 or gpu/ptx, found `{other}`")),
    };
    let mut b = Build {
        gpu,
        target: if gpu { "sm_86" } else { "x86-64-v4" }.to_string(),
        precision: "fp32".to_string(),
        passes: None,
        precise: false,
        reference_fallback: false,
    };
    for w in words {
        if let Some(t) = w.strip_prefix("--target=") {
            b.target = t.to_string();
        } else if let Some(p) = w.strip_prefix("--precision=") {
            b.precision = p.to_string();
        } else if let Some(p) = w.strip_prefix("--passes=") {
            b.passes = Some(p.trim_matches(['\'', '"']).to_string());
        } else if w == "precise-output" {
            b.precise = true;
        } else if w == "--reference-fallback" {
            b.reference_fallback = true;
        } else {
            return Err(format!("unknown argument `{w}`"));
        }
    }
    Ok(b)
}

fn parse_header(line: &str) -> Result<Mode, String> {
    let rest = line
        .trim()
        .strip_prefix("//")
        .map(str::trim)
        .and_then(|l| l.strip_prefix("test:"))
        .ok_or_else(|| format!("the first line must be `// test: roundtrip | verify | run | opt ... | lower cpu|gpu ... | compile x86|ptx ...`, found `{line}`"))?
        .trim();
    let mut words = rest.split_whitespace();
    match words.next() {
        Some("roundtrip") => Ok(Mode::Roundtrip),
        Some("verify") => Ok(Mode::Verify),
        Some("run") => Ok(Mode::Run),
        Some("opt") => {
            let args: Vec<&str> = words.collect();
            let mut passes = String::new();
            let mut rules = None;
            let mut i = 0;
            while i < args.len() {
                if let Some(r) = args[i].strip_prefix("--rules=") {
                    rules = Some(r.trim_matches(['\'', '"']).to_string());
                } else if let Some(p) = args[i].strip_prefix("--passes=") {
                    passes = p.trim_matches(['\'', '"']).to_string();
                } else if args[i] == "--passes" && i + 1 < args.len() {
                    passes = args[i + 1].trim_matches(['\'', '"']).to_string();
                    i += 1;
                } else {
                    return Err(format!("unknown opt argument `{}`", args[i]));
                }
                i += 1;
            }
            Ok(Mode::Opt { passes, rules })
        }
        Some(m @ ("lower" | "compile")) => {
            let kind = words.next().unwrap_or("");
            let lower = m == "lower";
            if lower && !matches!(kind, "cpu" | "gpu") || !lower && !matches!(kind, "x86" | "ptx") {
                return Err(format!("`{m}` takes {}, found `{kind}`", if lower { "cpu or gpu" } else { "x86 or ptx" }));
            }
            let b = parse_build(kind, words.collect())?;
            Ok(if lower { Mode::Lower(b) } else { Mode::Compile(b) })
        }
        other => Err(format!("unknown test kind `{}`", other.unwrap_or(""))),
    }
}

struct Case {
    /// Display name of the file, relative to `filetests/`.
    rel: String,
    /// The file, and this case's index in it (for `AOC_BLESS=1`).
    path: PathBuf,
    index: usize,
    /// The folder of the file (for `--rules=FILE`).
    dir: PathBuf,
    mode: Mode,
    /// The case's lines, with blank lines in place of the rest of the file.
    text: String,
}

/// An expected error: the 1-based line it must be on and a message fragment.
#[derive(Debug)]
struct Expected {
    line: usize,
    text: String,
    /// Line of the `// error:` comment itself, for messages.
    at: usize,
}

fn expected_errors(text: &str) -> Result<Vec<Expected>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = vec![];
    for (i, l) in lines.iter().enumerate() {
        let Some(p) = l.find("// error:") else {
            continue;
        };
        let msg = l[p + "// error:".len()..].trim().to_string();
        let line = if l[..p].trim().is_empty() {
            let code = (0..i).rev().find(|&j| {
                let t = lines[j].trim();
                !t.is_empty() && !t.starts_with("//")
            });
            code.ok_or_else(|| format!("line {}: `// error:` has no code line above it", i + 1))?
                + 1
        } else {
            i + 1
        };
        out.push(Expected {
            line,
            text: msg,
            at: i + 1,
        });
    }
    Ok(out)
}

fn discover(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "air") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn cases_of(path: &Path, rel: &str) -> Result<Vec<Case>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mode = parse_header(text.lines().next().unwrap_or(""))?;
    let lines: Vec<&str> = text.lines().collect();
    let mut groups: Vec<(usize, usize)> = vec![];
    let mut start = 0;
    for (i, l) in lines.iter().enumerate() {
        if l.trim() == "// -----" {
            groups.push((start, i));
            start = i + 1;
        }
    }
    groups.push((start, lines.len()));
    Ok(groups
        .into_iter()
        .enumerate()
        .map(|(index, (a, b))| {
            let mut t = "\n".repeat(a);
            for l in &lines[a..b] {
                t.push_str(l);
                t.push('\n');
            }
            Case {
                rel: rel.to_string(),
                path: path.to_path_buf(),
                index,
                dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
                mode: mode.clone(),
                text: t,
            }
        })
        .collect())
}

fn filecheck(text: &str, directives: &str, what: &str) -> Result<(), String> {
    let checker = CheckerBuilder::new()
        .text(directives)
        .map_err(|e| format!("bad check directive: {e}"))?
        .finish();
    if checker.is_empty() {
        return Ok(());
    }
    let (ok, explain) = checker
        .explain(text, NO_VARIABLES)
        .map_err(|e| format!("filecheck: {e}"))?;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "checks failed against the {what}:\n{text}\nfilecheck explanation:\n{explain}"
        ))
    }
}

fn line_of(text: &str, d: &Diagnostic) -> Option<usize> {
    d.loc.span.map(|s| line_col(text, s.start as usize).0)
}

/// Compares actual errors to the expected ones: every expected error must be
/// matched by a distinct actual one on its line, and no actual error may be
/// left over.
fn match_errors(case: &Case, actual: &[Diagnostic], expected: &[Expected]) -> Result<(), String> {
    let errors: Vec<&Diagnostic> = actual.iter().filter(|d| d.is_error()).collect();
    let mut used = vec![false; errors.len()];
    let mut problems = vec![];
    for e in expected {
        let hit = errors.iter().enumerate().position(|(k, d)| {
            !used[k] && line_of(&case.text, d) == Some(e.line) && d.message.contains(&e.text)
        });
        match hit {
            Some(k) => used[k] = true,
            None => problems.push(format!(
                "expected an error containing `{}` on line {} (from the `// error:` on line {}), none found",
                e.text, e.line, e.at
            )),
        }
    }
    for (k, d) in errors.iter().enumerate() {
        if !used[k] {
            let at = line_of(&case.text, d).map_or("no line".to_string(), |l| format!("line {l}"));
            problems.push(format!("unexpected error ({at}): {}", d.message));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        let rendered = render::render(actual, &case.rel, &case.text);
        Err(format!(
            "{}\n\ndiagnostics:\n{rendered}",
            problems.join("\n")
        ))
    }
}

/// Parses a `// input: %x = dense<...> : tensor<...>` line into a tensor by
/// running a one-constant function through the real parser and interpreter.
fn parse_input(line: &str) -> Result<(String, Tensor), String> {
    let rest = line
        .trim()
        .trim_start_matches("//")
        .trim()
        .trim_start_matches("input:")
        .trim();
    let (name, value) = rest
        .split_once('=')
        .ok_or_else(|| format!("expected `%name = dense<...> : type` in `{line}`"))?;
    let name = name.trim().trim_start_matches('%').to_string();
    let (_, ty) = value
        .rsplit_once(" : ")
        .ok_or_else(|| format!("expected `: type` in `{line}`"))?;
    let ty = ty.trim();
    let src = format!(
        "func @input() -> {ty} {{\n  %v = const {} : {ty}\n  return %v : {ty}\n}}\n",
        value.rsplit_once(" : ").map_or("", |p| p.0).trim()
    );
    let (m, diags) = aoc_ir::parse_and_verify(&src);
    if diags.iter().any(|d| d.is_error()) {
        return Err(format!(
            "bad input `{line}`:\n{}",
            render::render(&diags, "input", &src)
        ));
    }
    let f = m.entry().ok_or("input: no function")?;
    let mut out = aoc_ir::interp::run(f, vec![], &NoWeights)
        .map_err(|d| format!("bad input `{line}`: {d}"))?;
    Ok((name, out.pop().ok_or("input: no value")?))
}

fn bind_by_name(m: &Module, inputs: Vec<(String, Tensor)>) -> Result<Vec<Tensor>, String> {
    let f = m.entry().ok_or("the module has no function to run")?;
    let mut slots: Vec<Option<Tensor>> = vec![None; f.params().len()];
    for (name, t) in inputs {
        let i = f
            .params()
            .iter()
            .position(|&p| f.name_of(p) == name)
            .ok_or_else(|| format!("`// input: %{name}` names no parameter of @{}", f.name))?;
        slots[i] = Some(t);
    }
    f.params()
        .iter()
        .zip(slots)
        .map(|(&p, s)| s.ok_or_else(|| format!("no `// input: %{} = ...` line", f.name_of(p))))
        .collect()
}

fn print_stable(m: &Module) -> Result<String, String> {
    let printed = aoc_ir::print::print_module(m);
    let (m2, diags) = aoc_ir::parse::parse(&printed);
    if diags.iter().any(|d| d.is_error()) {
        return Err(format!(
            "the printed module does not parse:\n{printed}\n{}",
            render::render(&diags, "printed", &printed)
        ));
    }
    let again = aoc_ir::print::print_module(&m2);
    if again != printed {
        return Err(format!(
            "printing is not stable:\nfirst print:\n{printed}\nsecond print:\n{again}"
        ));
    }
    Ok(printed)
}

fn run_case(case: &Case) -> Result<(), String> {
    let expected = expected_errors(&case.text)?;
    let rendered = |d: &[Diagnostic]| render::render(d, &case.rel, &case.text);
    let (module, diags) = match case.mode {
        Mode::Roundtrip => aoc_ir::parse::parse(&case.text),
        _ => aoc_ir::parse_and_verify(&case.text),
    };
    if diags.iter().any(|d| d.is_error()) || !expected.is_empty() && !matches!(case.mode, Mode::Run)
    {
        match_errors(case, &diags, &expected)?;
        if !expected.is_empty() {
            return filecheck(&rendered(&diags), &case.text, "rendered diagnostics");
        }
    }
    match &case.mode {
        Mode::Roundtrip | Mode::Verify => {
            let printed = print_stable(&module)?;
            filecheck(&printed, &case.text, "printed module")
        }
        Mode::Opt { passes, rules } => {
            let rules = match rules {
                Some(r) => {
                    let path = case.dir.join(r);
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    Some(aoc_compiler::opt::RulesFile {
                        name: r.clone(),
                        text,
                    })
                }
                None => None,
            };
            let mut out = module;
            driver::run_passes(&mut out, passes, rules)?;
            let errs = aoc_ir::verify::verify_module(&out);
            if !errs.is_empty() {
                return Err(format!(
                    "the pipeline produced an invalid module:\n{}",
                    render::render_plain(&errs, &case.rel)
                ));
            }
            let printed = print_stable(&out)?;
            filecheck(&printed, &case.text, "optimized module")
        }
        Mode::Lower(b) | Mode::Compile(b) => {
            let lower = matches!(case.mode, Mode::Lower(_));
            let out = build_case(case, module, b, lower)?;
            if b.precise {
                precise_output(case, &out)
            } else {
                filecheck(&out, &case.text, if lower { "plan" } else { "emitted code" })
            }
        }
        Mode::Run => {
            let inputs = case
                .text
                .lines()
                .filter(|l| l.trim_start().starts_with("// input:"))
                .map(parse_input)
                .collect::<Result<Vec<_>, _>>()?;
            let bound = bind_by_name(&module, inputs)?;
            match driver::run_module(&module, &NoWeights, bound) {
                Ok(outputs) => {
                    if !expected.is_empty() {
                        return match_errors(case, &[], &expected);
                    }
                    filecheck(&driver::dump_outputs(&outputs), &case.text, "outputs")
                }
                Err(d) => {
                    if expected.is_empty() {
                        return Err(format!(
                            "the run failed:\n{}",
                            rendered(std::slice::from_ref(&d))
                        ));
                    }
                    match_errors(case, std::slice::from_ref(&d), &expected)?;
                    filecheck(&rendered(&[d]), &case.text, "rendered diagnostics")
                }
            }
        }
    }
}

/// Optimizes the case's module with the build's pipeline and lowers or
/// compiles it: the plan as `aoc explain` prints it (the artifact's path
/// shown as `<artifact>`), or the emitted assembly / PTX.
fn build_case(case: &Case, mut module: Module, b: &Build, lower: bool) -> Result<String, String> {
    use aoc_compiler::{cpu, gpu};
    let cost_target = if b.gpu {
        if b.target.starts_with("sm_9") { "sm_90" } else { "sm_86" }
    } else {
        "x86-64-v4"
    };
    let pipeline = match &b.passes {
        Some(p) => p.clone(),
        None => if b.gpu { gpu::GPU_PIPELINE } else { cpu::CPU_PIPELINE }.to_string(),
    };
    let config = aoc_compiler::opt::OptConfig {
        passes: Some(pipeline),
        target: cost_target.to_string(),
        ..Default::default()
    };
    aoc_compiler::opt::optimize(&mut module, &NoWeights, &config, None)?;
    let func = module.entry().ok_or("the module has no function to compile")?;
    let fail = |d: Diagnostic| format!("compilation failed:\n{}", render::render(&[d], &case.rel, &case.text));
    // The artifact goes to a file of its own because `explain` reads one.
    let scratch = std::env::temp_dir().join(format!(
        "aoc-filetest-{}-{}-{}.aoc",
        std::process::id(),
        case.rel.replace(['/', '\\', '.'], "_"),
        case.index
    ));
    let explain = |bytes: &[u8], gpu_artifact: bool| -> Result<String, String> {
        std::fs::write(&scratch, bytes).map_err(|e| format!("cannot write {}: {e}", scratch.display()))?;
        // Opened for inspection: an x86-64-v4 plan explains on an AVX2 CPU.
        let a = gpu::inspect_artifact(&scratch)?;
        if gpu_artifact != a.manifest().target.starts_with("sm_") {
            return Err(format!("the compile wrote an artifact for {}", a.manifest().target));
        }
        let text = if gpu_artifact { gpu::explain_gpu(&scratch, &a) } else { cpu::explain(&scratch, &a) };
        let _ = std::fs::remove_file(&scratch);
        Ok(text?.replace(&scratch.display().to_string(), "<artifact>"))
    };
    if b.gpu {
        let sm = aoc_backend_ptx::Sm::parse(&b.target)?;
        let precision = aoc_backend_ptx::translate::Precision::parse(&b.precision)
            .ok_or_else(|| format!("unknown precision `{}`", b.precision))?;
        if lower {
            match aoc_backend_ptx::compile::compile(func, &NoWeights, sm, precision, None, b.reference_fallback) {
                Ok(out) => explain(&out.artifact, true),
                Err(d) => Ok(fail(d)),
            }
        } else {
            aoc_backend_ptx::compile::emit_text(func, &NoWeights, sm, precision, true, b.reference_fallback).map_err(fail)
        }
    } else {
        let level = aoc_backend_x86::pointwise::X86Level::from_target_name(&b.target)
            .ok_or_else(|| format!("unknown CPU target `{}`", b.target))?;
        let opts = aoc_passes::lower::LowerOptions { reference_fallback: b.reference_fallback, ..aoc_passes::lower::LowerOptions::CPU };
        if lower {
            match aoc_backend_x86::compile::compile_with(func, &NoWeights, level, &opts) {
                Ok(out) => explain(&out.artifact, false),
                Err(d) => Ok(fail(d)),
            }
        } else {
            aoc_backend_x86::compile::emit_text(func, &NoWeights, level, true, &opts).map_err(fail)
        }
    }
}

/// The marker of an expected-output line: `// | text`.
const EXPECT: &str = "// |";

/// The case's expected output: its `// | ` lines, in order.
fn expected_output(text: &str) -> String {
    let mut out = String::new();
    for l in text.lines() {
        if let Some(rest) = l.trim_start().strip_prefix(EXPECT) {
            out.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            out.push('\n');
        }
    }
    out
}

/// `precise-output`: the whole output must equal the case's `// | ` lines;
/// with `AOC_BLESS=1` the file is rewritten to the actual output instead.
fn precise_output(case: &Case, actual: &str) -> Result<(), String> {
    let actual: String = actual.lines().map(|l| format!("{}\n", l.trim_end())).collect();
    let expected = expected_output(&case.text);
    if expected == actual {
        return Ok(());
    }
    if std::env::var_os("AOC_BLESS").is_some_and(|v| v == "1") {
        return bless(&case.path, case.index, &actual);
    }
    let mut diff = String::new();
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    for i in 0..e.len().max(a.len()) {
        match (e.get(i), a.get(i)) {
            (Some(x), Some(y)) if x == y => diff.push_str(&format!("  {x}\n")),
            (x, y) => {
                if let Some(x) = x {
                    diff.push_str(&format!("- {x}\n"));
                }
                if let Some(y) = y {
                    diff.push_str(&format!("+ {y}\n"));
                }
            }
        }
    }
    Err(format!(
        "the output differs from the `{EXPECT} ` lines (- expected, + actual); `AOC_BLESS=1 cargo test --test filetests` rewrites them:\n{diff}"
    ))
}

/// Replaces case `index`'s `// | ` lines in `path` with `output` (appended
/// at the end of the case). Cases of one file run on several threads: the
/// lock makes each rewrite read the file the previous one wrote.
fn bless(path: &Path, index: usize, output: &str) -> Result<(), String> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut cases: Vec<Vec<String>> = vec![vec![]];
    for l in text.lines() {
        if l.trim() == "// -----" {
            cases.push(vec![]);
        } else {
            cases.last_mut().expect("one case at least").push(l.to_string());
        }
    }
    let case = cases.get_mut(index).ok_or_else(|| format!("{} has no case {}", path.display(), index + 1))?;
    case.retain(|l| !l.trim_start().starts_with(EXPECT));
    while case.last().is_some_and(|l| l.trim().is_empty()) {
        case.pop();
    }
    case.push(String::new());
    for l in output.lines() {
        case.push(if l.is_empty() { EXPECT.to_string() } else { format!("{EXPECT} {l}") });
    }
    if index + 1 < cases.len() {
        cases[index].push(String::new());
    }
    let mut new = cases.iter().map(|c| c.join("\n")).collect::<Vec<_>>().join("\n// -----\n");
    new.push('\n');
    std::fs::write(path, new).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The harness's own check that `AOC_BLESS=1` rewrites exactly the
/// blessed case's `// | ` lines and nothing else.
fn bless_self_test() -> Result<(), String> {
    let path = std::env::temp_dir().join(format!("aoc-filetest-bless-{}.air", std::process::id()));
    let before = "// test: lower cpu precise-output\nfunc @a\n\n// | old 1\n// | old 2\n\n// -----\nfunc @b\n";
    std::fs::write(&path, before).map_err(|e| e.to_string())?;
    bless(&path, 1, "new b\n\nmore\n")?;
    bless(&path, 0, "new a\n")?;
    let after = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let want = "// test: lower cpu precise-output\nfunc @a\n\n// | new a\n\n// -----\nfunc @b\n\n// | new b\n// |\n// | more\n";
    let result = if after != want {
        Err(format!("bless wrote:\n{after}\nexpected:\n{want}"))
    } else {
        let cases = cases_of(&path, "self")?;
        let b = &cases[1];
        match (precise_output(b, "new b\n\nmore"), precise_output(b, "new b\nchanged")) {
            (Err(e), _) => Err(format!("the blessed output does not compare equal: {e}")),
            (Ok(()), Ok(())) if std::env::var_os("AOC_BLESS").is_none() => Err("a changed output compared equal".into()),
            _ => Ok(()),
        }
    };
    let _ = std::fs::remove_file(&path);
    result
}

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let mut trials = vec![Trial::test("harness/bless_rewrites_expectations", || {
        bless_self_test().map_err(Failed::from)
    })];
    for path in discover(&root) {
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        match cases_of(&path, &rel) {
            Err(msg) => trials.push(Trial::test(rel.clone(), move || Err(Failed::from(msg)))),
            Ok(cases) => {
                let n = cases.len();
                for (i, case) in cases.into_iter().enumerate() {
                    let name = if n == 1 {
                        rel.clone()
                    } else {
                        format!("{rel}#{}", i + 1)
                    };
                    trials.push(Trial::test(name, move || {
                        run_case(&case).map_err(Failed::from)
                    }));
                }
            }
        }
    }
    libtest_mimic::run(&args, trials).exit();
}
