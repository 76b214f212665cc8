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
use std::path::{Path, PathBuf};

const ABOUT: &str = "aoc: an ahead-of-time compiler for neural-network models";

const LONG_ABOUT: &str = "\
aoc: an ahead-of-time compiler for neural-network models.

A model enters as ONNX or as aoc's text IR (.air), is verified and
optimized, and either runs in the reference interpreter or is compiled to
one .aoc artifact: native x86-64 code (Cranelift and AVX-512/AVX2/VNNI/AMX
micro-kernels) or PTX for an NVIDIA GPU, with its plan and weights.
Weights live in .safetensors files next to the .air file; inputs and
outputs of `aoc run` are .npy files.";

const EXAMPLES: &str = "\
Examples:
  aoc import resnet.onnx -o resnet.air          # also writes resnet.safetensors
  aoc check resnet.air                          # diagnostics with file:line:col
  aoc opt resnet.air -o resnet.canon.air        # canonical form
  aoc opt resnet.air --passes default --timing -o resnet.opt.air   # optimize
  aoc opt resnet.air --passes 'fold-bn,fuse{max-ops=8}' --verify-rewrites -o out.air
  aoc run resnet.air --input x=img.npy --output-dir out/
  aoc compile resnet.air --target host -o resnet.aoc          # this CPU
  aoc compile resnet.air --target sm_86 --precision fp16 -o resnet.gpu.aoc
  aoc run resnet.aoc --input x=img.npy --output-dir out/
  aoc bench resnet.aoc --threads 2 --json

Exit status: 0 on success, 1 when the input has a problem (the message says
which and where), 2 on a command-line usage error.";

/// The `aoc` command line.

/// `aoc --version`: the release and the git revision.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("AOC_GIT_REV"), ")");

/// `aoc --version` in full: also the LLVM the PTX backend links, the code
/// generators and the runtime features built in.
static LONG_VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{VERSION}\nLLVM {} (PTX backend), Cranelift (x86-64 backend)\nfeatures: runtime reference interpreter (--reference-fallback), CUDA runtime (cudarc, loaded at run time); {}",
        aoc_backend_ptx::llvm_version(),
        if cfg!(feature = "mlir") { "MLIR interop (melior, MLIR 22)" } else { "MLIR interop not built" }
    )
});

#[derive(Parser, Debug)]
#[command(name = "aoc", version = VERSION, long_version = LONG_VERSION.as_str(), about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Print only errors and results: no summaries, tables, warnings or progress.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Print more: per-pass timing (compile, bench of a model), per-tensor ranges (quantize), the check summary.
    #[arg(short, long, global = true, conflicts_with = "quiet")]
    pub verbose: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Import an ONNX model (or an MLIR file of TOSA/linalg ops) as .air text IR (weights to a .safetensors beside it).
    #[command(
        long_about = "Import an ONNX model (opset 11 and newer) as .air text IR.\n\n\
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
    /// Compile a model to an .aoc artifact (native code + plan + weights).
    #[command(
        long_about = "Compile a model (.air, or .onnx imported in memory) for a target and write \
            one .aoc artifact that `aoc run`, `aoc bench` and the runtime's Rust and C APIs load.\n\n\
            CPU targets: x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA), x86-64 (any x86-64 CPU), \
            host (the best level this CPU runs). The target's pipeline runs first (see --passes); \
            every op then becomes a call of a runtime micro-kernel (GEMM, convolution, pooling, ...) \
            or a pointwise kernel generated with Cranelift, over one arena planned from value \
            lifetimes. An op without a native kernel on the target is an error that names it; \
            --reference-fallback (for development) runs such ops on the reference interpreter \
            inside the artifact instead, and the summary names them.\n\n\
            --emit air writes the IR after the pipeline, --emit clif the generated kernels' \
            Cranelift IR, --emit asm their machine code, each with the plan's steps.",
        after_help = "Examples:\n  aoc compile model.air --target host -o model.aoc\n  \
            aoc compile model.air --target x86-64 -o model.portable.aoc\n  \
            aoc compile model.air --target x86-64-v4 --emit clif -o model.clif"
    )]
    Compile(CompileArgs),
    /// Measure an .aoc artifact's latency (p50, p99, mean), throughput and memory.
    #[command(
        long_about = "Run an .aoc artifact repeatedly and report latency percentiles, mean, \
            throughput (batch items per second, the batch being the first input's first \
            dimension) and the memory one inference touches (arena, weights, inputs and outputs). \
            Inputs are deterministic random floats (integers zero) unless given with --input.",
        after_help = "Examples:\n  aoc bench model.aoc\n  aoc bench model.aoc --threads 2 --iters 200 --json"
    )]
    Bench(BenchArgs),
    /// Show what an .aoc artifact runs: each step's kernel, the op it came from, its buffers.
    #[command(
        long_about = "Print an .aoc artifact's target, inputs, outputs and memory, then one line per \
            plan step: the kernel (gemm, conv2d, pointwise pwN, reference, ...), its shape, and the \
            IR op (with its ONNX node name) it came from. Steps marked `reference` (only in \
            artifacts compiled with --reference-fallback) run on the reference interpreter.",
        after_help = "Example:\n  aoc explain model.aoc"
    )]
    Explain(ExplainArgs),
    /// Quantize a float model to int8 (or fp8) Q/DQ form with calibration data.
    #[command(
        long_about = "Post-training quantization: calibrate a float model (.air or .onnx) on \
            representative inputs and write an explicit Q/DQ model (.air + .safetensors) that \
            `aoc compile` turns into integer kernels.\n\n\
            Batch-norms are folded first. The inputs of convolutions, matmuls and gemms (weights \
            per output channel, symmetric; activations per tensor), their outputs, residual adds \
            and average pools are quantized, so conv-relu-conv chains, adds, pools, concats and \
            reshapes stay in int8 end to end. Calibration runs the model compiled for this CPU \
            over --calib, and each tensor's range comes from --method: entropy (TensorRT's KL \
            divergence search over a 2048-bin histogram), percentile (--percentile of |x|), mse \
            (the clip with the least squared error) or minmax (the observed range).\n\n\
            The result's output SQNR against the float model is measured on the calibration \
            batches (and on --eval), with top-1 agreement for class-score outputs. \
            --target-sqnr DB measures each layer alone and keeps the most sensitive ones in \
            float until the model reaches DB. The table (layer, op, precision, SQNR alone, why \
            float) goes to stderr, the full report to --report FILE.json.\n\n\
            --calib DIR holds one .npy file per batch (exactly the input's shape and dtype), \
            or one folder of .npy files per input (DIR/<input>/, matched by file name), or \
            images (.png, .jpg, .bmp) for a single NCHW/NHWC input, preprocessed with \
            --mean/--std/--scale/--bgr.",
        after_help = "Examples:\n  aoc quantize model.onnx --calib calib/ -o model.int8.air\n  \
            aoc quantize model.air --calib calib/ --eval held_out/ --method percentile --percentile 99.99 -o q.air\n  \
            aoc quantize model.air --calib calib/ --target-sqnr 40 --report q.json -o q.air\n  \
            aoc quantize model.onnx --calib images/ --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 -o q.air\n  \
            aoc compile q.air --target host -o q.aoc"
    )]
    Quantize(QuantizeArgs),
    /// Prune a float model to 2:4 semi-structured sparsity (sparse tensor cores).
    #[command(
        long_about = "Magnitude pruning to N:M semi-structured sparsity (2:4 is what NVIDIA's sparse \
            tensor cores run): in every M consecutive weights along a layer's reduction axis (per \
            output channel over C_in·kh·kw for convolutions, along k for matmuls and gemms) the N \
            largest magnitudes are kept. Pruned layers become sparse.conv2d / sparse.matmul on a \
            #sparse.nm<N, M> weight, stored compressed in the .safetensors file. Layers whose \
            reduction length is not a multiple of M, grouped or depthwise convolutions and layers \
            with non-constant weights are skipped, each with its reason.\n\n\
            With --calib DIR every candidate's output SQNR against the dense model is measured \
            alone (on the kernels `aoc compile` makes for this CPU); with --min-sqnr DB the layers \
            are pruned most tolerant first while the model's output SQNR stays at or above DB. \
            The per-layer table goes to stderr, the report to --report FILE.json. Pruning costs \
            accuracy that only fine-tuning recovers: `aoc export --format onnx` takes the model \
            back to the training framework (docs/sparsity.md).",
        after_help = "Examples:\n  aoc sparsify bert.air --pattern 2:4 -o bert.sp.air\n  \
            aoc sparsify model.onnx --pattern 2:4 --layers 'layer3*,fc' -o sp.air\n  \
            aoc sparsify model.air --pattern 2:4 --calib calib/ --min-sqnr 30 --report sp.json -o sp.air"
    )]
    Sparsify(SparsifyArgs),
    /// Remove a fraction of every convolution's output channels and linear layer's features (structured pruning).
    #[command(
        long_about = "Structured channel pruning by filter L1 norm: each convolution's output \
            channels with the smallest L1 norms are removed, together with the matching input \
            channels of every consumer (convolutions, and the gemm or matmul after a flatten), \
            through batch-norms, activations, depthwise convolutions and pools. Channels joined \
            by a residual add (or a gating product) are removed alike across everything the add \
            joins; groups that reach a model output, a concat, a reshape or another op that \
            cannot follow are left alone, with why. The result is an ordinary dense model with \
            smaller weights. Parameters and FLOPs before and after are printed (and written to \
            --report); with --calib the output SQNR against the unpruned model is measured. \
            Accuracy after pruning needs fine-tuning: `aoc export --format onnx` takes the model \
            back to the training framework (docs/sparsity.md).",
        after_help = "Examples:\n  aoc prune resnet50.air --channels 0.3 -o r50.small.air\n  \
            aoc prune model.air --channels 0.5 --layers 'layer4*' --calib calib/ --report p.json -o small.air\n  \
            aoc export r50.small.air --format onnx -o r50.small.onnx"
    )]
    Prune(PruneArgs),
    /// Write a model in another format: ONNX (--format onnx) or MLIR (TOSA, --format mlir).
    #[command(
        long_about = "Write a model (.air, or .onnx/.mlir imported in memory) in another format.\n\n\
            --format onnx writes an ONNX model (opset 17) of the entry function: weights as \
            initializers, #sparse.nm weights decompressed (sparse.* ops become the dense ops), \
            quantized values as QuantizeLinear/DequantizeLinear pairs. Export the model as \
            aoc sparsify, prune or quantize wrote it (before aoc opt: fused ops have no ONNX \
            form). This is the way back to the training framework for fine-tuning.\n\n\
            --format mlir writes an MLIR module (needs an aoc built with `--features mlir`): \
            each function a func.func of TOSA ops (arith.divf and math.sqrt where TOSA has no op; \
            NCHW convolutions and pools between transposes to TOSA's NHWC), quantized types as \
            !quant.uniform with quant.qcast/dcast, weights as dense constants (dense_resource \
            blobs above --dense-resource-above bytes), each op located at its .air line and \
            loc(...) name. MLIR's verifier checks the module before anything is written; \
            mlir-opt-22 reads the file (docs/mlir.md).",
        after_help = "Examples:\n  aoc export model.air --format onnx -o model.onnx\n  aoc export model.air --format mlir -o model.mlir\n  \
            mlir-opt-22 model.mlir --pass-pipeline='builtin.module(func.func(tosa-to-linalg-named,tosa-to-linalg,tosa-to-arith,tosa-to-tensor))'"
    )]
    Export(ExportArgs),
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The model (.air, .onnx or .mlir).
    #[arg(value_name = "FILE.air")]
    pub input: PathBuf,
    /// The output format: onnx or mlir.
    #[arg(long, value_name = "FORMAT")]
    pub format: String,
    /// The file to write (default: the input's path with the format's extension).
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// MLIR: constants of more bytes than this become dense_resource blobs.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub dense_resource_above: usize,
}

#[derive(Args, Debug)]
pub struct SparsifyArgs {
    /// The float model (.air or .onnx).
    #[arg(value_name = "MODEL")]
    pub input: PathBuf,
    /// The sparsity pattern n:m (n kept in every m along the reduction axis).
    #[arg(long, default_value = "2:4", value_name = "N:M")]
    pub pattern: String,
    /// Layers to prune (by ONNX node / loc name or result name, `*` and `?` globs); comma-separated, repeatable. Default: every layer.
    #[arg(long, value_name = "GLOB,...", value_delimiter = ',')]
    pub layers: Vec<String>,
    /// Prune layers, most tolerant first, while the output SQNR against the dense model stays at least DB (needs --calib).
    #[arg(long, value_name = "DB")]
    pub min_sqnr: Option<f64>,
    /// Calibration data (as for aoc quantize): measures each layer's SQNR.
    #[arg(long, value_name = "DIR")]
    pub calib: Option<PathBuf>,
    /// Write the per-layer report as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub report: Option<PathBuf>,
    /// The .air file to write (weights to OUT.safetensors beside it).
    #[arg(short, long, value_name = "OUT.air")]
    pub output: PathBuf,
    /// Threads for the measurements (0: all cores).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    /// For .onnx models: fix the shape of input NAME (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
}

#[derive(Args, Debug)]
pub struct PruneArgs {
    /// The float model (.air or .onnx).
    #[arg(value_name = "MODEL")]
    pub input: PathBuf,
    /// The fraction of each channel group removed, in (0, 1).
    #[arg(long, value_name = "RATIO")]
    pub channels: f64,
    /// Convolutions and linear layers whose output channels may be pruned (by ONNX node / loc name or result name, `*` and `?` globs); comma-separated, repeatable. Default: all.
    #[arg(long, value_name = "GLOB,...", value_delimiter = ',')]
    pub layers: Vec<String>,
    /// Calibration data (as for aoc quantize): measures the output SQNR against the unpruned model.
    #[arg(long, value_name = "DIR")]
    pub calib: Option<PathBuf>,
    /// Write the report (groups, parameters, FLOPs, SQNR) as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub report: Option<PathBuf>,
    /// The .air file to write (weights to OUT.safetensors beside it).
    #[arg(short, long, value_name = "OUT.air")]
    pub output: PathBuf,
    /// Threads for the measurement (0: all cores).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    /// For .onnx models: fix the shape of input NAME (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
}

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The float model (.air or .onnx).
    #[arg(value_name = "MODEL")]
    pub input: PathBuf,
    /// Calibration data: a folder of .npy batches (or DIR/<input>/ folders, or images).
    #[arg(long, value_name = "DIR")]
    pub calib: PathBuf,
    /// The .air file to write (weights to OUT.safetensors beside it).
    #[arg(short, long, value_name = "OUT.air")]
    pub output: PathBuf,
    /// Range method: entropy, percentile, mse or minmax.
    #[arg(long, default_value = "entropy", value_name = "METHOD")]
    pub method: String,
    /// For --method percentile: the percentile of |x| to clip at.
    #[arg(long, default_value_t = 99.99, value_name = "P")]
    pub percentile: f64,
    /// int8, or fp8 (e4m3 with a per-tensor scale, for sm_89 / sm_90 targets).
    #[arg(long, default_value = "int8", value_name = "PRECISION")]
    pub precision: String,
    /// int8 activations: u8 (asymmetric) or s8 (symmetric).
    #[arg(long, default_value = "u8", value_name = "TYPE")]
    pub activations: String,
    /// One weight scale per tensor instead of per output channel.
    #[arg(long)]
    pub per_tensor_weights: bool,
    /// Layers (by ONNX node / loc name or result name, `*` and `?` globs) kept in float; comma-separated, repeatable.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub keep: Vec<String>,
    /// Residual adds in int8 or float; auto: int8, except an add read by a layer norm where the per-tensor scale would erase a row (a CLS token beside larger patch tokens)
    #[arg(long, default_value = "auto", value_name = "auto|int8|float")]
    pub residual: String,
    /// Keep the most sensitive layers in float until the output SQNR against float is at least DB.
    /// Where the quantized model will run: host, x86-64-v4, ... or a GPU
    /// (sm_80 ... sm_90a). Layers the target has no integer kernel for stay
    /// out of int8; on GPUs with fp16 tensor cores they run in fp16 (compile
    /// the result with --precision fp16), else in fp32
    #[arg(long, default_value = "host", value_name = "TARGET")]
    pub target: String,
    #[arg(long, value_name = "DB")]
    pub target_sqnr: Option<f64>,
    /// Measure every layer alone (the table's `SQNR alone`) even without --target-sqnr.
    #[arg(long)]
    pub sensitivity: bool,
    /// Calibration batches each per-layer measurement runs.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub sensitivity_batches: usize,
    /// Held-out batches (same layout as --calib) to report SQNR and top-1 agreement on.
    #[arg(long, value_name = "DIR")]
    pub eval: Option<PathBuf>,
    /// Write the report (method, ranges and scales, per-layer precision and SQNR, totals) as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub report: Option<PathBuf>,
    /// Quantize a model that is already quantized again, from its float form.
    #[arg(long)]
    pub requantize: bool,
    /// Images: the input's height and width (checked against the model).
    #[arg(long, value_name = "H,W")]
    pub image_size: Option<String>,
    /// Images: per-channel mean subtracted after scaling (R,G,B).
    #[arg(long, value_name = "R,G,B")]
    pub mean: Option<String>,
    /// Images: per-channel standard deviation divided by (R,G,B).
    #[arg(long, value_name = "R,G,B")]
    pub std: Option<String>,
    /// Images: channels in BGR order.
    #[arg(long)]
    pub bgr: bool,
    /// Images: pixel values are divided by this first.
    #[arg(long, default_value_t = 255.0, value_name = "X")]
    pub scale: f64,
    /// For .onnx models: fix the shape of input NAME (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// Worker threads for calibration (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The .aoc artifact.
    #[arg(value_name = "FILE.aoc")]
    pub input: PathBuf,
    /// Print one JSON object: target, inputs, outputs, and every step (kernel, precision, op, loc).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The .air (or .onnx) file.
    #[arg(value_name = "FILE.air")]
    pub input: PathBuf,
    /// Target: x86-64-v4, x86-64-v3, x86-64, host, or a GPU: sm_70, sm_75, sm_80, sm_86, sm_89, sm_90, sm_90a.
    #[arg(long, value_name = "TARGET", default_value = "host")]
    pub target: String,
    /// GPU targets: arithmetic of GEMMs and convolutions (fp32, tf32, fp16, bf16).
    #[arg(long, value_name = "PRECISION", default_value = "fp32")]
    pub precision: String,
    /// GPU targets: choose each GEMM's tile by timing the candidates on this machine's GPU.
    #[arg(long)]
    pub tune: bool,
    /// Where --tune remembers its winners (default: ~/.cache/aoc/tune.json).
    #[arg(long, value_name = "FILE")]
    pub tune_cache: Option<PathBuf>,
    /// Output file (default: the input's path with .aoc, or .air/.clif/.s/.ll/.ptx for --emit).
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// What to write: aoc (the artifact), air; CPU: clif or asm; GPU: llvm or ptx.
    #[arg(long, value_name = "KIND", default_value = "aoc")]
    pub emit: String,
    /// The pass pipeline to run before code generation (default: the target's).
    #[arg(long, value_name = "PIPELINE")]
    pub passes: Option<String>,
    /// Do not run the verifier after each pass of the pipeline.
    #[arg(long)]
    pub no_verify_each: bool,
    /// For .onnx files: fix the shape of input NAME (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// Development aid: run ops that have no native kernel on this target on the reference
    /// interpreter inside the artifact (slow; without it such an op is an error that names it).
    #[arg(long)]
    pub reference_fallback: bool,
    /// Print the summary as one JSON object on stdout (steps by kind, kernels, memory, time).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The .aoc artifact, or a model (.air, .onnx) to compile for --target first.
    #[arg(value_name = "FILE.aoc")]
    pub input: PathBuf,
    /// For a model: the target to compile it for (as `aoc compile --target`).
    #[arg(long, value_name = "TARGET", default_value = "host")]
    pub target: String,
    /// For a model and a GPU target: the precision (as `aoc compile --precision`).
    #[arg(long, value_name = "PRECISION", default_value = "fp32")]
    pub precision: String,
    /// For an .onnx model: fix the shape of input NAME (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// Timed inferences.
    #[arg(long, default_value_t = 50)]
    pub iters: usize,
    /// Untimed inferences first.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Print one JSON object (p50_ms, p99_ms, mean_ms, throughput_per_s, peak_memory_bytes; with --profile
    /// on a CPU artifact also each step's and each kind's median time).
    #[arg(long)]
    pub json: bool,
    /// Inputs as for `aoc run` (default: synthetic).
    #[arg(long = "input", short = 'i', value_name = "NAME=PATH.npy")]
    pub inputs: Vec<String>,
    /// Also print the time of each step kind (each step's median over up to 20 profiled runs).
    #[arg(long)]
    pub profile: bool,
    /// With --profile: how many of the slowest steps to list.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub slowest: usize,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The ONNX model, or an MLIR file (TOSA / linalg; needs the `mlir` feature).
    #[arg(value_name = "FILE.onnx")]
    pub input: PathBuf,
    /// The .air file to write (default: the model's path with .air).
    #[arg(short, long, value_name = "OUT.air")]
    pub output: Option<PathBuf>,
    /// Fix the shape of input NAME, e.g. `input=1x3x224x224` (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// Fix the value of input NAME, which then stops being an input:
    /// `sr=16000`, or comma-separated values in row-major order for a
    /// tensor (repeatable). Branches on it fold away at import, as for a
    /// constant (a model whose `If` on a sample rate has a branch that is
    /// invalid for the other rate's shapes).
    #[arg(long = "input-value", value_name = "NAME=VALUES", value_parser = parse_input_value)]
    pub input_values: Vec<(String, Vec<f64>)>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The .air (or .onnx) file.
    #[arg(value_name = "FILE.air")]
    pub input: PathBuf,
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
    /// Do not run the verifier after each pass (it runs after every pass by
    /// default, and a pass that breaks the IR is an internal error naming it).
    #[arg(long, overrides_with = "verify_each")]
    pub no_verify_each: bool,
    /// Run the verifier after every pass: the default, kept for old scripts.
    #[arg(long, hide = true, overrides_with = "no_verify_each")]
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

impl OptArgs {
    /// What the flags ask the pipeline to do (`rules`: the `--rules` file, read).
    pub fn config(&self, rules: Option<RulesFile>) -> OptConfig {
        OptConfig {
            passes: self.passes.clone(),
            rules,
            print_ir_after_all: self.print_ir_after_all,
            print_ir_after: self.print_ir_after.clone(),
            verify_each: !self.no_verify_each,
            verify_rewrites: self.verify_rewrites,
            target: self.target.clone(),
            extra_passes: vec![],
        }
    }
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
    /// For .aoc artifacts: worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Give every input that --input does not bind seeded random values (floats in [-1, 1),
    /// integers and booleans 0 or 1).
    #[arg(long)]
    pub random_inputs: bool,
    /// The seed for --random-inputs.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
    /// Compare each output with DIR/NAME.npy: print the max absolute and relative error per
    /// output, and exit 1 when an element is outside atol + rtol * |expected|.
    #[arg(long, value_name = "DIR")]
    pub expected: Option<PathBuf>,
    /// Absolute tolerance for --expected.
    #[arg(long, default_value_t = 1e-5, value_name = "X")]
    pub atol: f64,
    /// Relative tolerance for --expected.
    #[arg(long, default_value_t = 1e-4, value_name = "X")]
    pub rtol: f64,
}

/// Parses `NAME=1x3x224x224`.
pub fn parse_input_shape(s: &str) -> Result<(String, Vec<usize>), String> {
    let (name, dims) = split_input_flag(s, "DIMS", "input=1x3x224x224")?;
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
    Ok((name, dims))
}

/// `NAME=REST` of an input flag: the name (without a leading `%`) and the
/// rest; `what` and `example` go into the message when it has no `=` or
/// no name.
fn split_input_flag<'a>(s: &'a str, what: &str, example: &str) -> Result<(String, &'a str), String> {
    let (name, rest) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME={what} such as {example}, found `{s}`"))?;
    if name.is_empty() {
        return Err(format!("the input name is missing in `{s}`"));
    }
    Ok((name.trim_start_matches('%').to_string(), rest))
}

/// Parses `NAME=V[,V...]` (`--input-value`).
pub fn parse_input_value(s: &str) -> Result<(String, Vec<f64>), String> {
    let (name, vals) = split_input_flag(s, "VALUES", "sr=16000")?;
    let vals = vals
        .split(',')
        .map(|v| {
            let v = v.trim();
            v.parse::<f64>().map_err(|_| format!("`{v}` is not a number (in `{s}`)"))
        })
        .collect::<Result<Vec<f64>, String>>()?;
    Ok((name, vals))
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
    crate::say::set(cli.quiet, cli.verbose);
    match cli.command {
        Command::Import(a) => cmd_import(a),
        Command::Check(a) => cmd_check(a),
        Command::Opt(a) => cmd_opt(a),
        Command::Run(a) => cmd_run(a),
        Command::Compile(a) => cmd_compile(a),
        Command::Bench(a) => cmd_bench(a),
        Command::Quantize(a) => cmd_quantize(a),
        Command::Sparsify(a) => cmd_sparsify(a),
        Command::Prune(a) => cmd_prune(a),
        Command::Export(a) => cmd_export(a),
        Command::Explain(a) => {
            let art = crate::gpu::inspect_artifact(&a.input)?;
            let gpu = art.manifest().target.starts_with("sm_");
            match (gpu, a.json) {
                (true, false) => crate::gpu::explain_gpu(&a.input, &art).and_then(|t| print_stdout(&t)),
                (true, true) => crate::gpu::explain_gpu_json(&a.input, &art).and_then(|v| print_stdout(&format!("{v:#}\n"))),
                (false, false) => crate::cpu::explain(&a.input, &art).and_then(|t| print_stdout(&t)),
                (false, true) => crate::cpu::explain_json(&a.input, &art).and_then(|v| print_stdout(&format!("{v:#}\n"))),
            }
        }
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
    let (module, weights) = if crate::driver::is_mlir(&a.input) {
        if !a.input_shapes.is_empty() || !a.input_values.is_empty() {
            return Err("error: --input-shape and --input-value apply to .onnx files only (an .mlir file's shapes are static)".to_string());
        }
        crate::driver::import_mlir(&a.input, &wname)?
    } else {
        crate::driver::import_onnx_with(&a.input, &a.input_shapes, &a.input_values, &wname)?
    };
    let written = write_air(&module, &weights, &out)?;
    // Say what was written, as `compile` does.
    let mut msg = format!("imported {}: {}", a.input.display(), summary(&module));
    for p in &written {
        let size = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        msg.push_str(&format!("\nwrote {} ({})", p.display(), crate::driver::human(size)));
    }
    crate::say::info(&msg);
    Ok(())
}

/// Parses `1,2,3` into exactly `N` numbers.
fn parse_floats<const N: usize>(flag: &str, s: &str) -> Result<[f64; N], String> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>().map_err(|_| format!("error: {flag}: `{x}` is not a number")))
        .collect::<Result<_, _>>()?;
    v.try_into().map_err(|v: Vec<f64>| format!("error: {flag} takes {N} comma-separated numbers, found {}", v.len()))
}

fn cmd_quantize(a: QuantizeArgs) -> Result<(), String> {
    use crate::quantize::{self, Choices, Config, calib::{CalibData, ImageOptions}};
    let choices = Choices {
        method: &a.method,
        percentile: a.percentile,
        precision: &a.precision,
        activations: &a.activations,
        residual: &a.residual,
    };
    let (method, precision, activations, residual) = choices.parse("--").map_err(|m| format!("error: {m}"))?;
    if let Some(t) = a.target_sqnr
        && !t.is_finite()
    {
        return Err(format!("error: --target-sqnr must be a number of dB, found {t}"));
    }
    if !(a.scale.is_finite() && a.scale > 0.0) {
        return Err(format!("error: --scale must be positive, found {}", a.scale));
    }
    let mut image = ImageOptions { bgr: a.bgr, scale: a.scale, ..Default::default() };
    if let Some(s) = &a.image_size {
        let [h, w] = parse_floats::<2>("--image-size", s)?;
        if h < 1.0 || w < 1.0 || h.fract() != 0.0 || w.fract() != 0.0 {
            return Err(format!("error: --image-size takes H,W in pixels, found {s}"));
        }
        image.size = Some((h as usize, w as usize));
    }
    if let Some(s) = &a.mean {
        image.mean = parse_floats::<3>("--mean", s)?;
    }
    if let Some(s) = &a.std {
        image.std = parse_floats::<3>("--std", s)?;
        if image.std.iter().any(|&x| x == 0.0 || !x.is_finite()) {
            return Err(format!("error: --std must be nonzero, found {s}"));
        }
    }
    if a.output == a.input {
        return Err(format!("error: the output {} would overwrite the model", a.output.display()));
    }
    let loaded = crate::driver::load_model(&a.input, &a.input_shapes)?;
    let entry = loaded.module.entry().ok_or_else(|| format!("error: {} has no function", a.input.display()))?;
    let inputs: Vec<(String, aoc_ir::TensorType)> =
        (0..entry.params().len()).map(|i| (entry.param_name(i).to_string(), entry.ty(entry.params()[i]).clone())).collect();
    let calib = CalibData::open(&a.calib, &inputs, Some(&image))?;
    let eval = match &a.eval {
        Some(d) => Some(CalibData::open(d, &inputs, Some(&image))?),
        None => None,
    };
    for d in std::iter::once(&calib).chain(&eval) {
        if d.left_out > 0 {
            crate::say::info(&format!("note: {}: {} images that do not fill a batch are left out", d.dir.display(), d.left_out));
        }
    }
    let cfg = Config {
        method,
        precision,
        activations,
        per_channel_weights: !a.per_tensor_weights,
        keep: a.keep.iter().filter(|k| !k.is_empty()).cloned().collect(),
        residual,
        target_sqnr: a.target_sqnr,
        sensitivity: a.sensitivity,
        sensitivity_batches: a.sensitivity_batches,
        threads: a.threads,
        target: quantize::Target::parse(&a.target)?,
        requantize: a.requantize,
        progress: !crate::say::quiet(),
    };
    let name = a.input.display().to_string();
    let weights = loaded.weights;
    let mut outcome = quantize::quantize(loaded.module, weights.as_ref(), &calib, eval.as_ref(), &cfg, &name)?;
    let written = crate::opt::write_result(&mut outcome.module, weights.as_ref(), &a.output)?;
    if let Some(r) = &a.report {
        let text = serde_json::to_string_pretty(&outcome.report).map_err(|e| format!("error: cannot encode the report: {e}"))?;
        crate::output::write_file(r, text.as_bytes()).map_err(|m| format!("error: {m}"))?;
    }
    if crate::say::verbose() {
        crate::say::detail(&quantize::ranges_table(&outcome));
    }
    {
        let mut msg = quantize::table(&outcome);
        for p in written.iter().chain(&a.report) {
            let size = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            msg.push_str(&format!("wrote {} ({})\n", p.display(), crate::driver::human(size)));
        }
        let kept = outcome.layers.iter().filter(|l| !l.quantized).count();
        if let quantize::Target::Gpu(sm) = cfg.target
            && kept > 0
            && cfg.target.kept_precision() == "fp16"
        {
            msg.push_str(&format!(
                "note: compile with `aoc compile {} --target {sm} --precision fp16`: the {kept} layers kept out of {} then run in fp16\n",
                a.output.display(),
                outcome.report["precision"].as_str().unwrap_or("int8")
            ));
        }
        // A low SQNR without an accuracy target: say how to get one.
        let measured = outcome.eval.or(outcome.calib).map(|s| s.sqnr_db);
        if cfg.target_sqnr.is_none()
            && let Some(db) = measured.filter(|db| *db < LOW_SQNR_DB)
        {
            msg.push_str(&format!(
                "note: an output SQNR of {db:.1} dB is low; `--target-sqnr 30` keeps the layers that cost the most in float until the model reaches 30 dB (`--sensitivity` lists each layer's SQNR alone)\n"
            ));
        }
        crate::say::info(&msg);
    }
    Ok(())
}

/// Below this output SQNR, `aoc quantize` suggests `--target-sqnr`.
const LOW_SQNR_DB: f64 = 20.0;

fn cmd_sparsify(a: SparsifyArgs) -> Result<(), String> {
    use crate::quantize::calib::CalibData;
    use crate::sparsify::{self, Config};
    let (n, m) = sparsify::parse_pattern(&a.pattern)?;
    if let Some(t) = a.min_sqnr {
        if !t.is_finite() {
            return Err(format!("error: --min-sqnr must be a number of dB, found {t}"));
        }
        if a.calib.is_none() {
            return Err("error: --min-sqnr needs --calib DIR: the SQNR is measured on calibration batches".to_string());
        }
    }
    if a.output == a.input {
        return Err(format!("error: the output {} would overwrite the model", a.output.display()));
    }
    let loaded = crate::driver::load_model(&a.input, &a.input_shapes)?;
    let calib = match &a.calib {
        Some(dir) => {
            let entry = loaded.module.entry().ok_or_else(|| format!("error: {} has no function", a.input.display()))?;
            let inputs: Vec<(String, aoc_ir::TensorType)> =
                (0..entry.params().len()).map(|i| (entry.param_name(i).to_string(), entry.ty(entry.params()[i]).clone())).collect();
            Some(CalibData::open(dir, &inputs, None)?)
        }
        None => None,
    };
    let cfg = Config {
        n,
        m,
        layers: a.layers.iter().filter(|k| !k.is_empty()).cloned().collect(),
        min_sqnr: a.min_sqnr,
        threads: a.threads,
        progress: !crate::say::quiet(),
    };
    let name = a.input.display().to_string();
    let weights = loaded.weights;
    let mut outcome = sparsify::sparsify(loaded.module, weights.as_ref(), calib.as_ref(), &cfg, &name)?;
    let written = crate::opt::write_result(&mut outcome.module, weights.as_ref(), &a.output)?;
    if let Some(r) = &a.report {
        let text = serde_json::to_string_pretty(&outcome.report).map_err(|e| format!("error: cannot encode the report: {e}"))?;
        crate::output::write_file(r, text.as_bytes()).map_err(|m| format!("error: {m}"))?;
    }
    let mut msg = sparsify::table(&outcome, n, m);
    for p in written.iter().chain(&a.report) {
        let size = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        msg.push_str(&format!("wrote {} ({})\n", p.display(), crate::driver::human(size)));
    }
    crate::say::info(&msg);
    Ok(())
}

fn cmd_prune(a: PruneArgs) -> Result<(), String> {
    use crate::quantize::calib::CalibData;
    if !(a.channels > 0.0 && a.channels < 1.0) {
        return Err(format!("error: --channels takes a ratio in (0, 1), found {}", a.channels));
    }
    if a.output == a.input {
        return Err(format!("error: the output {} would overwrite the model", a.output.display()));
    }
    let loaded = crate::driver::load_model(&a.input, &a.input_shapes)?;
    let calib = match &a.calib {
        Some(dir) => {
            let entry = loaded.module.entry().ok_or_else(|| format!("error: {} has no function", a.input.display()))?;
            let inputs: Vec<(String, aoc_ir::TensorType)> =
                (0..entry.params().len()).map(|i| (entry.param_name(i).to_string(), entry.ty(entry.params()[i]).clone())).collect();
            Some(CalibData::open(dir, &inputs, None)?)
        }
        None => None,
    };
    let cfg = crate::prune::Config { ratio: a.channels, layers: a.layers.iter().filter(|k| !k.is_empty()).cloned().collect(), threads: a.threads };
    let name = a.input.display().to_string();
    let weights = loaded.weights;
    let mut outcome = crate::prune::prune(loaded.module, weights.as_ref(), calib.as_ref(), &cfg, &name)?;
    let written = crate::opt::write_result(&mut outcome.module, weights.as_ref(), &a.output)?;
    if let Some(r) = &a.report {
        let text = serde_json::to_string_pretty(&outcome.report).map_err(|e| format!("error: cannot encode the report: {e}"))?;
        crate::output::write_file(r, text.as_bytes()).map_err(|m| format!("error: {m}"))?;
    }
    let mut msg = crate::prune::table(&outcome);
    for p in written.iter().chain(&a.report) {
        let size = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        msg.push_str(&format!("wrote {} ({})\n", p.display(), crate::driver::human(size)));
    }
    crate::say::info(&msg);
    Ok(())
}

fn cmd_export(a: ExportArgs) -> Result<(), String> {
    let ext = match a.format.as_str() {
        "mlir" => "mlir",
        "onnx" => "onnx",
        f => return Err(format!("error: --format must be mlir or onnx, found `{f}`")),
    };
    let out = a.output.clone().unwrap_or_else(|| a.input.with_extension(ext));
    if out == a.input {
        return Err(format!("error: the output {} would overwrite the model", out.display()));
    }
    let bytes = match ext {
        "onnx" => {
            let loaded = crate::driver::load_model(&a.input, &[])?;
            crate::onnx::export::export_onnx(&loaded.module, loaded.weights.as_ref(), &a.input.display().to_string())?
        }
        _ => export_mlir(&a)?.into_bytes(),
    };
    crate::output::write_file(&out, &bytes).map_err(|m| format!("error: {m}"))?;
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    crate::say::info(&format!("wrote {} ({})", out.display(), crate::driver::human(size)));
    Ok(())
}

#[cfg(feature = "mlir")]
fn export_mlir(a: &ExportArgs) -> Result<String, String> {
    let loaded = crate::driver::load_model(&a.input, &[])?;
    let name = a.input.display().to_string();
    let opts = crate::mlir::ExportOptions { resource_above: a.dense_resource_above };
    crate::mlir::export_module(&loaded.module, loaded.weights.as_ref(), &name, loaded.source.as_deref(), &opts)
}

#[cfg(not(feature = "mlir"))]
fn export_mlir(_: &ExportArgs) -> Result<String, String> {
    Err("error: this aoc was built without MLIR support; rebuild with `cargo build --release -p aoc --features mlir` (docs/mlir.md)".to_string())
}

fn cmd_check(a: CheckArgs) -> Result<(), String> {
    let module = if is_onnx(&a.input) {
        import_onnx(&a.input, &a.input_shapes, "weights.safetensors")?.0
    } else if crate::driver::is_mlir(&a.input) {
        crate::driver::import_mlir(&a.input, "weights.safetensors")?.0
    } else {
        let file = read_air(&a.input)?;
        crate::say::info(&file.warnings);
        // The weights files too: every `const @w["key"]` must exist with its
        // declared dtype and shape (headers only; nothing is decoded).
        let weights = crate::weights::SafetensorsWeights::for_module(&file.module, &a.input);
        let diags = crate::driver::check_weights(&file.module, &weights);
        if !diags.is_empty() {
            let name = a.input.display().to_string();
            let mut text = crate::render::render(&diags, &name, &file.source);
            text.push_str(&format!("error: {name}: {} weight{} cannot be loaded\n", diags.len(), if diags.len() == 1 { "" } else { "s" }));
            return Err(text);
        }
        file.module
    };
    if crate::say::verbose() {
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
    crate::say::info(&file.warnings);
    let name = input.display().to_string();
    let config = a.config(rules);
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
    let mut inputs: Vec<InputArg> = a.inputs.iter().map(|s| parse_input_arg(s)).collect();
    let random_dir = if a.random_inputs {
        let (dir, extra) = crate::run_check::random_inputs(&a.input, &a.input_shapes, &inputs, a.seed)?;
        inputs.extend(extra);
        Some(dir)
    } else {
        None
    };
    let is_artifact = a.input.extension().is_some_and(|e| e == "aoc");
    let run = || -> Result<Vec<(String, aoc_ir::tensor::Tensor)>, String> {
        if is_artifact {
            match crate::gpu::is_gpu_artifact(&a.input)? {
                Some(art) => crate::gpu::run_gpu_artifact(art, &inputs),
                None => crate::cpu::run_artifact(&a.input, &inputs, a.threads),
            }
        } else {
            run_file(&a.input, &inputs, &a.input_shapes)
        }
    };
    let outputs = run();
    if let Some(dir) = random_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    let outputs: Vec<(String, aoc_ir::tensor::Tensor)> =
        outputs?.into_iter().map(|(n, t)| (n.replace('/', "_"), t)).collect();
    if let Some(dir) = &a.expected {
        let cmp = crate::run_check::compare_expected(&outputs, dir, a.atol, a.rtol)?;
        let mut text = String::new();
        let mut bad = 0;
        for c in &cmp {
            let verdict = if c.mismatches == 0 { "ok".to_string() } else { format!("{} of {} elements differ", c.mismatches, c.elements) };
            text.push_str(&format!("{}: max abs error {:.3e}, max rel error {:.3e}: {verdict}\n", c.name, c.max_abs, c.max_rel));
            bad += (c.mismatches > 0) as usize;
        }
        print_stdout(&text)?;
        if bad > 0 {
            return Err(format!(
                "error: {bad} of {} outputs differ from {} (atol {}, rtol {})",
                cmp.len(),
                dir.display(),
                a.atol,
                a.rtol
            ));
        }
        if a.output_dir.is_none() {
            return Ok(());
        }
    }
    match &a.output_dir {
        Some(dir) => {
            let (paths, notes) = write_outputs(dir, &outputs)?;
            for n in notes {
                crate::say::info(&format!("note: {n}"));
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

fn cmd_compile(a: CompileArgs) -> Result<(), String> {
    use crate::cpu::{CPU_PIPELINE, Emit, compile_cpu, cpu_level};
    if a.target.starts_with("sm_") {
        return cmd_compile_gpu(a);
    }
    let level = cpu_level(&a.target).ok_or_else(|| {
        format!(
            "error: unknown target `{}`; CPU targets are x86-64-v4, x86-64-v3, x86-64 and host, GPU targets sm_70, sm_75, sm_80, sm_86, sm_89, sm_90 and sm_90a",
            a.target
        )
    })?;
    if a.precision != "fp32" {
        return Err(format!("error: --precision {} is for GPU targets; CPU targets compute in fp32", a.precision));
    }
    if a.tune {
        return Err("error: --tune is for GPU targets".to_string());
    }
    let (emit, ext) = match a.emit.as_str() {
        "aoc" => (Emit::Artifact, "aoc"),
        "air" => (Emit::Air, "opt.air"),
        "clif" => (Emit::Clif, "clif"),
        "asm" => (Emit::Asm, "s"),
        e => return Err(format!("error: --emit for a CPU target must be aoc, air, clif or asm, found `{e}`")),
    };
    let output = compile_output(&a, ext)?;
    let passes = a.passes.as_deref().unwrap_or(CPU_PIPELINE);
    let (msg, json) = compile_cpu(&a.input, &a.input_shapes, level, passes, !a.no_verify_each, emit, &output, a.reference_fallback)?;
    compile_report(a.json, &msg, &json)
}

/// The compile summary: text on stderr, or with --json one object on stdout.
fn compile_report(json: bool, msg: &str, v: &serde_json::Value) -> Result<(), String> {
    if json {
        print_stdout(&format!("{v:#}\n"))
    } else {
        crate::say::info(msg);
        Ok(())
    }
}

/// `-o`, or the input's path with `ext`; never the model itself.
fn compile_output(a: &CompileArgs, ext: &str) -> Result<PathBuf, String> {
    let output = a.output.clone().unwrap_or_else(|| a.input.with_extension(ext));
    if output == a.input {
        return Err(format!("error: the output {} would overwrite the model", output.display()));
    }
    Ok(output)
}

fn cmd_compile_gpu(a: CompileArgs) -> Result<(), String> {
    use crate::gpu::{GPU_PIPELINE, GpuEmit, compile_gpu};
    let sm = aoc_backend_ptx::Sm::parse(&a.target).map_err(|e| format!("error: {e}"))?;
    let precision = aoc_backend_ptx::translate::Precision::parse(&a.precision)
        .ok_or_else(|| format!("error: --precision must be fp32, tf32, fp16 or bf16, found `{}`", a.precision))?;
    let (emit, ext) = match a.emit.as_str() {
        "aoc" => (GpuEmit::Artifact, "aoc"),
        "air" => (GpuEmit::Air, "opt.air"),
        "llvm" => (GpuEmit::Llvm, "ll"),
        "ptx" => (GpuEmit::Ptx, "ptx"),
        e => return Err(format!("error: --emit for a GPU target must be aoc, air, llvm or ptx, found `{e}`")),
    };
    let output = compile_output(&a, ext)?;
    let passes = a.passes.as_deref().unwrap_or(GPU_PIPELINE);
    let cache = a.tune_cache.clone().unwrap_or_else(crate::gpu::default_tune_cache);
    let tune = (a.tune && emit == GpuEmit::Artifact).then_some(cache.as_path());
    let (msg, json) = compile_gpu(&a.input, &a.input_shapes, sm, precision, passes, !a.no_verify_each, emit, &output, tune, a.reference_fallback)?;
    compile_report(a.json, &msg, &json)
}

/// Profiled runs behind `aoc bench --profile` (fewer when --iters is smaller).
const PROFILE_RUNS: usize = 20;

fn cmd_bench(a: BenchArgs) -> Result<(), String> {
    if a.iters == 0 {
        return Err("error: --iters must be at least 1".to_string());
    }
    if a.input.extension().is_some_and(|e| e == "aoc") || a.input.is_dir() {
        return bench_artifact(&a, &a.input);
    }
    // A model: compile it for --target into a scratch artifact (removed
    // afterwards), then benchmark that, as `trtexec --onnx` does.
    let scratch = std::env::temp_dir().join(format!("aoc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("error: cannot create {}: {e}", scratch.display()))?;
    let art = scratch.join("model.aoc");
    let compile = CompileArgs {
        input: a.input.clone(),
        target: a.target.clone(),
        precision: a.precision.clone(),
        tune: false,
        tune_cache: None,
        output: Some(art.clone()),
        emit: "aoc".to_string(),
        passes: None,
        no_verify_each: false,
        input_shapes: a.input_shapes.clone(),
        reference_fallback: false,
        json: false,
    };
    let result = cmd_compile(compile).and_then(|()| bench_artifact(&a, &art));
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// Benchmarks the artifact at `path` (`a.input` names it in the report).
fn bench_artifact(a: &BenchArgs, path: &Path) -> Result<(), String> {
    use crate::bench::synthetic_inputs;
    use crate::cpu::{bench, bind_artifact_inputs, load_session};
    let t_load = std::time::Instant::now();
    if let Some(art) = crate::gpu::is_gpu_artifact(path)? {
        return cmd_bench_gpu(a, art);
    }
    let s = load_session(path, a.threads)?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let inputs = if a.inputs.is_empty() {
        synthetic_inputs(s.inputs())
    } else {
        let args: Vec<InputArg> = a.inputs.iter().map(|x| parse_input_arg(x)).collect();
        bind_artifact_inputs(&s, &args)?
    };
    let r = bench(&s, &inputs, a.warmup, a.iters)?;
    let mut profile_json = None;
    if a.profile {
        let refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
        // Each step's median over several profiled runs: one run's step
        // times move with every hiccup of a shared machine.
        let runs = a.iters.clamp(1, PROFILE_RUNS);
        let mut p = s.run_profiled(&refs).map_err(|e| format!("error: {e}"))?.1;
        let mut times: Vec<Vec<f64>> = p.steps.iter().map(|st| vec![st.3]).collect();
        for _ in 1..runs {
            let (_, q) = s.run_profiled(&refs).map_err(|e| format!("error: {e}"))?;
            for (t, st) in times.iter_mut().zip(&q.steps) {
                t.push(st.3);
            }
        }
        for (st, t) in p.steps.iter_mut().zip(&mut times) {
            t.sort_by(f64::total_cmp);
            st.3 = t[t.len() / 2];
        }
        let mut by_kind: Vec<(&str, f64, usize)> = vec![];
        for (_, kind, _, t) in &p.steps {
            match by_kind.iter_mut().find(|(k, _, _)| k == kind) {
                Some(e) => {
                    e.1 += t;
                    e.2 += 1;
                }
                None => by_kind.push((kind, *t, 1)),
            }
        }
        by_kind.sort_by(|a, b| b.1.total_cmp(&a.1));
        if a.json {
            profile_json = Some(serde_json::json!({
                "runs": runs,
                "statistic": "median",
                "by_kind": by_kind.iter().map(|(k, t, n)| serde_json::json!({"kind": k, "steps": n, "ms": t * 1e3})).collect::<Vec<_>>(),
                "steps": p.steps.iter().map(|(i, k, o, t)| serde_json::json!({"index": i, "kind": k, "origin": o, "ms": t * 1e3})).collect::<Vec<_>>(),
            }));
        } else {
            eprintln!("  profile: median of each step over {runs} runs");
            for (k, t, n) in &by_kind {
                eprintln!("  {k:<18} {n:>4} steps {:>9.3} ms", t * 1e3);
            }
            let mut slow = p.steps.clone();
            slow.sort_by(|a, b| b.3.total_cmp(&a.3));
            for (i, k, o, t) in slow.iter().take(a.slowest) {
                eprintln!("  slowest: step {i} {k} {:.3} ms  <- {o}", t * 1e3);
            }
        }
    }
    if a.json {
        print_stdout(&format!("{}\n", r.cpu_json(load_ms, profile_json)))
    } else {
        print_stdout(&format!(
            "{}: {} iterations, {} threads, loaded in {load_ms:.1} ms\n  p50 {:.3} ms  p99 {:.3} ms  mean {:.3} ms\n  throughput {:.1}/s  peak memory {}\n",
            a.input.display(),
            r.iters,
            r.threads,
            r.p50_ms,
            r.p99_ms,
            r.mean_ms,
            r.throughput_per_s,
            crate::driver::human(r.peak_memory_bytes)
        ))
    }
}

fn cmd_bench_gpu(a: &BenchArgs, art: aoc_runtime::artifact::Artifact) -> Result<(), String> {
    use crate::artifact_io::bind_inputs;
    use crate::bench::synthetic_inputs;
    use crate::gpu::{bench_gpu, load_gpu_session, profile_gpu};
    let s = load_gpu_session(art)?;
    let inputs = if a.inputs.is_empty() {
        synthetic_inputs(s.inputs())
    } else {
        let args: Vec<InputArg> = a.inputs.iter().map(|x| parse_input_arg(x)).collect();
        bind_inputs(s.inputs(), &args)?
    };
    let (r, dev) = bench_gpu(&s, &inputs, a.warmup, a.iters)?;
    if a.profile {
        eprint!("{}", profile_gpu(&s, a.slowest)?);
    }
    if a.json {
        print_stdout(&format!("{}\n", r.gpu_json(&dev, s.gpu().name())))
    } else {
        print_stdout(&format!(
            "{} on {}: {} iterations\n  end to end (copies in and out): p50 {:.3} ms  p99 {:.3} ms  mean {:.3} ms\n  device (graph replay): p50 {:.3} ms  p99 {:.3} ms\n  throughput {:.1}/s  peak device memory {}\n",
            a.input.display(),
            s.gpu().name(),
            r.iters,
            r.p50_ms,
            r.p99_ms,
            r.mean_ms,
            dev.p50_ms,
            dev.p99_ms,
            r.throughput_per_s,
            crate::driver::human(r.peak_memory_bytes)
        ))
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
    fn verify_each_is_on_unless_no_verify_each_is_given() {
        let opt = |extra: &[&str]| {
            let args = ["aoc", "opt", "m.air"].iter().chain(extra).map(OsString::from);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Opt(a) => a.config(None).verify_each,
                c => panic!("{c:?}"),
            }
        };
        assert!(opt(&[]));
        assert!(!opt(&["--no-verify-each"]));
        assert!(opt(&["--verify-each"]));
        assert!(opt(&["--no-verify-each", "--verify-each"]));
        assert!(!opt(&["--verify-each", "--no-verify-each"]));
        let compile = |extra: &[&str]| {
            let args = ["aoc", "compile", "m.air"].iter().chain(extra).map(OsString::from);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Compile(a) => a.no_verify_each,
                c => panic!("{c:?}"),
            }
        };
        assert!(!compile(&[]));
        assert!(compile(&["--no-verify-each"]));
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
