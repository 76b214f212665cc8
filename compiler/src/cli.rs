//! The `aoc` command line: argument parsing (clap derive, whose help texts
//! teach the tool) and one function per subcommand over `driver`.
//!
//! Exit codes: 0 success, 1 a problem with the user's input (the message
//! says which and where), 2 a usage error (from clap). Every error reaches
//! here as text ready to print; bad input never panics, and a panic is an
//! internal error that the binary's panic hook reports as such.

use crate::driver::{
    InputArg, dump_outputs, import_onnx, is_onnx, parse_input_arg, read_air, read_text, run_file,
    summary, write_air, write_outputs,
};
use crate::opt::{OptConfig, RulesFile};
use crate::weights::SafetensorsWeights;
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

const ABOUT: &str = "aoc: an ahead-of-time compiler for neural-network models";

const LONG_ABOUT: &str = "\
aoc: an ahead-of-time compiler for neural-network models.

A model enters as ONNX or as aoc's text IR (.air), is verified and
optimized, and runs in the reference interpreter (compilation to PTX and
x86-64 comes with later versions). Weights live in .safetensors files next
to the .air file; inputs and outputs of `aoc run` are .npy files.";

const EXAMPLES: &str = "\
Examples:
  aoc import resnet.onnx -o resnet.air          # also writes resnet.safetensors
  aoc check resnet.air                          # diagnostics with file:line:col
  aoc opt resnet.air -o resnet.canon.air        # canonical form
  aoc opt resnet.air --passes default --timing -o resnet.opt.air   # optimize
  aoc opt resnet.air --passes 'fold-bn,fuse{max-ops=8}' --verify-rewrites -o out.air
  aoc run resnet.air --input x=img.npy --output-dir out/

Exit status: 0 on success, 1 when the input has a problem (the message says
which and where), 2 on a command-line usage error.";

/// The `aoc` command line.
#[derive(Parser, Debug)]
#[command(name = "aoc", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Import an ONNX model as .air text IR (weights to a .safetensors beside it).
    #[command(
        long_about = "Import an ONNX model (opset 13 and newer) as .air text IR.\n\n\
            The model is verified before anything is written. Its initializers go to a \
            .safetensors file with the output's name (OUT.safetensors beside OUT.air), \
            which the .air file names in a `weights @weights = \"OUT.safetensors\"` \
            declaration; small constants stay inline as dense<...>. Models exported with \
            symbolic dimensions need --input-shape for each such input.",
        after_help = "Examples:\n  aoc import resnet.onnx -o resnet.air\n  \
            aoc import dynamic.onnx -o dynamic.air --input-shape input=1x3x224x224"
    )]
    Import(ImportArgs),
    /// Parse and verify an .air file; print diagnostics or nothing.
    #[command(
        long_about = "Parse and verify an .air file (or import and verify an .onnx file).\n\n\
            Prints nothing and exits 0 when the module is valid (a one-line summary with -v); \
            otherwise prints each problem with file:line:col, the source line and a caret, \
            and exits 1.",
        after_help = "Example:\n  aoc check model.air\n  aoc check -v model.air"
    )]
    Check(CheckArgs),
    /// Run passes over an .air file and write the result (canonical form without passes).
    #[command(
        long_about = "Run a pass pipeline over an .air file and print the result.\n\n\
            Without --passes this writes the canonical form of the module (what the \
            printer prints; parsing it back gives the same text). The output goes to -o, \
            or to stdout. With -o, a result that holds computed constants (folded weights) \
            or uses weights is written as OUT.air plus a self-contained OUT.safetensors; \
            on stdout, such constants are an error (use -o). `--passes default` runs the \
            target's default pipeline; --rules FILE adds the rules of FILE as the pass \
            `user-rules`. Timing, statistics, printed IR and the --verify-rewrites table go \
            to stderr.",
        after_help = "Examples:\n  aoc opt model.air -o model.canon.air\n  \
            aoc opt model.air --passes 'fold-bn,fuse' --print-ir-after-all\n  \
            aoc opt model.air --passes default --timing --stats -o model.opt.air\n  \
            aoc opt model.air --rules my.rules --verify-rewrites\n  \
            aoc opt --list-passes"
    )]
    Opt(OptArgs),
    /// Run a model in the reference interpreter on .npy inputs.
    #[command(
        long_about = "Run a model's entry function (@main, or the first function) in the \
            reference interpreter.\n\n\
            Inputs are .npy files: --input NAME=PATH.npy binds the input named NAME (the \
            parameter %NAME); --input PATH.npy binds the next unbound input in order. Each \
            result is written to DIR/NAME.npy, named after the returned value (y.npy for a \
            result %y); without --output-dir the results are printed. An .onnx file is \
            imported in memory first.",
        after_help = "Examples:\n  aoc run model.air --input x=img.npy --output-dir out/\n  \
            aoc run model.air --input a.npy --input b.npy\n  \
            aoc run model.onnx --input input=x.npy --output-dir out/"
    )]
    Run(RunArgs),
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The ONNX model.
    #[arg(value_name = "FILE.onnx")]
    pub input: PathBuf,
    /// The .air file to write (default: the model's path with .air).
    #[arg(short, long, value_name = "OUT.air")]
    pub output: Option<PathBuf>,
    /// Fix the shape of input NAME, e.g. `input=1x3x224x224` (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The .air (or .onnx) file.
    #[arg(value_name = "FILE.air")]
    pub input: PathBuf,
    /// Print a one-line summary when the module is valid.
    #[arg(short, long)]
    pub verbose: bool,
    /// For .onnx files: fix the shape of input NAME (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
}

#[derive(Args, Debug)]
pub struct OptArgs {
    /// The .air file.
    #[arg(value_name = "FILE.air", required_unless_present = "list_passes")]
    pub input: Option<PathBuf>,
    /// Where to write the result (default: stdout); computed constants and
    /// the weights the result uses go to OUT.safetensors beside it.
    #[arg(short, long, value_name = "OUT.air")]
    pub output: Option<PathBuf>,
    /// The pass pipeline, comma-separated, e.g. `fold-bn,fuse{max-ops=8}`,
    /// or `default` (see --list-passes).
    #[arg(long, value_name = "LIST")]
    pub passes: Option<String>,
    /// A rules file (`name: LHS => RHS` a line); adds `user-rules` after the passes.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Print the module to stderr after each pass.
    #[arg(long)]
    pub print_ir_after_all: bool,
    /// Print the module to stderr after the pass NAME (repeatable).
    #[arg(long, value_name = "NAME")]
    pub print_ir_after: Vec<String>,
    /// Print the wall time of each pass to stderr.
    #[arg(long)]
    pub timing: bool,
    /// Print op counts and e-graph statistics of each pass to stderr.
    #[arg(long)]
    pub stats: bool,
    /// Run the verifier after every pass (always on in debug builds).
    #[arg(long)]
    pub verify_each: bool,
    /// Run the interpreter on seeded random inputs before and after each pass
    /// and report the largest error each pass introduced.
    #[arg(long)]
    pub verify_rewrites: bool,
    /// With --verify-rewrites: the largest relative error a pass may introduce.
    #[arg(long, value_name = "REL", default_value_t = crate::opt::DEFAULT_REWRITE_TOLERANCE)]
    pub rewrite_tolerance: f64,
    /// The target whose cost model picks among equivalent forms.
    #[arg(long, value_name = "TARGET", default_value = "x86-64-v4")]
    pub target: String,
    /// List the passes and their options, then exit.
    #[arg(long)]
    pub list_passes: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The .air (or .onnx) file.
    #[arg(value_name = "FILE.air")]
    pub input: PathBuf,
    /// An input: `NAME=PATH.npy`, or `PATH.npy` for the next input in order (repeatable).
    #[arg(long = "input", short = 'i', value_name = "NAME=PATH.npy")]
    pub inputs: Vec<String>,
    /// Folder for the results, one NAME.npy each (created if missing).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// For .onnx files: fix the shape of input NAME (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
}

/// Parses `NAME=1x3x224x224`.
pub fn parse_input_shape(s: &str) -> Result<(String, Vec<usize>), String> {
    let (name, dims) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=DIMS such as input=1x3x224x224, found `{s}`"))?;
    if name.is_empty() {
        return Err(format!("the input name is missing in `{s}`"));
    }
    let dims = if dims.is_empty() {
        vec![]
    } else {
        dims.split(['x', 'X', ','])
            .map(|d| {
                d.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("`{d}` is not a dimension (in `{s}`)"))
            })
            .collect::<Result<_, _>>()?
    };
    Ok((name.trim_start_matches('%').to_string(), dims))
}

/// Runs the command line `args` (including the program name) and returns the
/// exit code. Output goes to stdout and stderr.
pub fn main(args: Vec<OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match execute(cli) {
        Ok(()) => 0,
        Err(msg) => {
            let msg = msg.trim_end();
            if !msg.is_empty() {
                eprintln!("{msg}");
            }
            1
        }
    }
}

/// Runs a parsed command line.
pub fn execute(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Import(a) => cmd_import(a),
        Command::Check(a) => cmd_check(a),
        Command::Opt(a) => cmd_opt(a),
        Command::Run(a) => cmd_run(a),
    }
}

/// Writes to stdout, ignoring a closed pipe (`aoc opt m.air | head`).
fn print_stdout(text: &str) -> Result<(), String> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

fn cmd_import(a: ImportArgs) -> Result<(), String> {
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| a.input.with_extension("air"));
    if out == a.input {
        return Err(format!(
            "error: the output {} would overwrite the model",
            out.display()
        ));
    }
    let wfile = out.with_extension("safetensors");
    let wname = wfile
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (module, weights) = import_onnx(&a.input, &a.input_shapes, &wname)?;
    write_air(&module, &weights, &out)?;
    Ok(())
}

fn cmd_check(a: CheckArgs) -> Result<(), String> {
    let module = if is_onnx(&a.input) {
        import_onnx(&a.input, &a.input_shapes, "weights.safetensors")?.0
    } else {
        let file = read_air(&a.input)?;
        eprint!("{}", file.warnings);
        file.module
    };
    if a.verbose {
        print_stdout(&format!(
            "{}: ok ({})\n",
            a.input.display(),
            summary(&module)
        ))?;
    }
    Ok(())
}

fn cmd_opt(a: OptArgs) -> Result<(), String> {
    if a.list_passes {
        return print_stdout(&aoc_passes::registry::describe(aoc_passes::registry()));
    }
    let Some(input) = a.input.clone() else {
        return Err("error: aoc opt needs an .air file".to_string());
    };
    if is_onnx(&input) {
        return Err(format!(
            "error: aoc opt reads .air files; import the model first: aoc import {} -o model.air",
            input.display()
        ));
    }
    if a.rewrite_tolerance.is_nan() || a.rewrite_tolerance < 0.0 {
        return Err(format!(
            "error: --rewrite-tolerance must be a non-negative number, found {}",
            a.rewrite_tolerance
        ));
    }
    let rules = match &a.rules {
        Some(p) => Some(RulesFile {
            name: p.display().to_string(),
            text: read_text(p)?,
        }),
        None => None,
    };
    let file = read_air(&input)?;
    eprint!("{}", file.warnings);
    let name = input.display().to_string();
    let config = OptConfig {
        passes: a.passes.clone(),
        rules,
        print_ir_after_all: a.print_ir_after_all,
        print_ir_after: a.print_ir_after.clone(),
        verify_each: a.verify_each,
        verify_rewrites: a.verify_rewrites,
        target: a.target.clone(),
        extra_passes: vec![],
    };
    let weights = SafetensorsWeights::for_module(&file.module, &input);
    let mut module = file.module;
    let outcome =
        crate::opt::optimize(&mut module, &weights, &config, Some((&name, &file.source)))?;
    for (pass, text) in &outcome.report.printed_ir {
        eprint!("// ----- IR after {pass} -----\n{text}");
    }
    if a.timing {
        eprint!("{}", outcome.report.render_timing());
    }
    if a.stats {
        eprint!("{}", outcome.report.render_stats());
    }
    if a.verify_rewrites {
        eprint!("{}", outcome.render_rewrite_checks());
        outcome.check_tolerance(a.rewrite_tolerance)?;
    }
    match &a.output {
        Some(out) => crate::opt::write_result(&mut module, &weights, out).map(|_| ()),
        None => print_stdout(&crate::opt::print_result(&mut module)?),
    }
}

fn cmd_run(a: RunArgs) -> Result<(), String> {
    let inputs: Vec<InputArg> = a.inputs.iter().map(|s| parse_input_arg(s)).collect();
    let outputs = run_file(&a.input, &inputs, &a.input_shapes)?;
    match &a.output_dir {
        Some(dir) => {
            let (paths, notes) = write_outputs(dir, &outputs)?;
            for n in notes {
                eprintln!("note: {n}");
            }
            let lines: String = paths
                .iter()
                .zip(&outputs)
                .map(|(p, (_, t))| format!("wrote {} ({})\n", p.display(), t.ty))
                .collect();
            print_stdout(&lines)
        }
        None => print_stdout(&dump_outputs(&outputs)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_input_shapes() {
        assert_eq!(
            parse_input_shape("input=1x3x224x224").unwrap(),
            ("input".into(), vec![1, 3, 224, 224])
        );
        assert!(parse_input_shape("input").is_err());
        assert!(
            parse_input_shape("input=1xax2")
                .unwrap_err()
                .contains("`a`")
        );
        assert_eq!(parse_input_shape("%x=").unwrap(), ("x".into(), vec![]));
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
