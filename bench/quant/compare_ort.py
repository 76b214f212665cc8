#!/usr/bin/env python3
"""Post-training quantization: aoc's `aoc quantize` against ONNX Runtime's
`onnxruntime.quantization.quantize_static`, on the same float model and the
same calibration batches.

    compare_ort.py [--model resnet18|resnet50 | --onnx PATH] [--size 224]
                   [--calib 32] [--eval 16] [--methods minmax,entropy,percentile,mse]
                   [--check-batches 2] [--work build/bench-quant] [--aoc target/release/aoc]

Steps (everything written goes under --work):
  1. WORK/model.onnx: a float model built here with seeded He-initialised
     weights (ResNet-18 or ResNet-50 in torchvision's layout, batch norms kept
     as BatchNormalization nodes with non-trivial statistics), or a copy of
     --onnx with its symbolic input dimensions fixed.
  2. WORK/calib/b000.npy ... and WORK/eval/b000.npy ...: batch-1 float32
     inputs that look like normalised images (smooth random fields plus a
     little per-pixel noise), seeded.
  3. ONNX Runtime: quant_pre_process (when it works), then quantize_static
     (QDQ, per-channel s8 weights, u8 activations) per method, timed; the
     QDQ model then runs in ORT on the eval batches and its outputs are
     compared with the float model's outputs in ORT (SQNR, top-1 agreement).
  4. aoc: `aoc quantize WORK/model.onnx --calib WORK/calib --eval WORK/eval
     --method M ...` per method, timed; its report gives its own eval SQNR
     (against aoc's compiled float model). Cross-checks against ORT's float
     outputs: the quantized model compiled (`aoc compile --target host`) and
     run on every eval batch, and the quantized .air in aoc's reference
     interpreter (`aoc run`) on the first --check-batches eval batches.
  5. Tables on stdout (progress on stderr), everything in WORK/results.json.
"""
import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPSET = 17
# onnx 1.23 writes IR version 14 by default, which ONNX Runtime 1.31 refuses
# (it reads up to 13); opset 17 belongs to IR version 8.
IR_VERSION = 8
# Methods both tools have (aoc's name -> ORT's CalibrationMethod name).
# aoc's `mse` has no ORT counterpart and is run on aoc's side only.
ORT_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
AOC_METHODS = ("minmax", "entropy", "percentile", "mse")


def log(msg=""):
    print(msg, file=sys.stderr, flush=True)


# --- float models ----------------------------------------------------------

class Builder:
    """Accumulates nodes and initializers of one ONNX graph."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def fresh(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint, array):
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def he(self, hint, shape):
        """He (Kaiming normal) initialisation: std sqrt(2 / fan_in)."""
        fan_in = int(np.prod(shape[1:]))
        return self.const(hint, self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in))

    def op(self, op_type, inputs, hint, **attrs):
        out = self.fresh(hint)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs))
        return out

    def conv_bn(self, x, cin, cout, k, stride, relu=True, gamma=1.0):
        """Conv (no bias, padding k//2) + BatchNormalization (+ Relu).

        The batch norm's statistics are far enough from the identity
        (gamma 1 +- 0.2, beta +- 0.1, mean +- 0.2, variance 0.5..1.5) that
        folding it into the convolution changes the weights for real.
        `gamma` scales the last batch norm of a residual branch down, as
        training does, which keeps the activations of deep nets of order 1.
        """
        w = self.he("conv.weight", [cout, cin, k, k])
        y = self.op("Conv", [x, w], "conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        r = self.rng
        bn = [self.const("bn.weight", gamma * (1.0 + 0.2 * r.standard_normal(cout))),
              self.const("bn.bias", 0.1 * r.standard_normal(cout)),
              self.const("bn.running_mean", 0.2 * r.standard_normal(cout)),
              self.const("bn.running_var", 0.5 + r.random(cout))]
        y = self.op("BatchNormalization", [y] + bn, "bn", epsilon=1e-5)
        return self.op("Relu", [y], "relu") if relu else y


def resnet(depth, size, seed=0):
    """torchvision's resnet18 (BasicBlock) or resnet50 (Bottleneck, v1.5:
    stride on the 3x3) for a 1x3xSIZExSIZE input named `input`, output
    `logits` 1x1000."""
    blocks = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[depth]
    expansion = 1 if depth == 18 else 4
    g = Builder(seed + depth)
    y = g.conv_bn("input", 3, 64, 7, 2)
    y = g.op("MaxPool", [y], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, n) in enumerate(zip([64, 128, 256, 512], blocks)):
        for b in range(n):
            stride = 2 if stage > 0 and b == 0 else 1
            cout = width * expansion
            if depth == 18:
                h = g.conv_bn(y, cin, width, 3, stride)
                h = g.conv_bn(h, width, cout, 3, 1, relu=False, gamma=0.3)
            else:
                h = g.conv_bn(y, cin, width, 1, 1)
                h = g.conv_bn(h, width, width, 3, stride)
                h = g.conv_bn(h, width, cout, 1, 1, relu=False, gamma=0.3)
            short = g.conv_bn(y, cin, cout, 1, stride, relu=False) if stride != 1 or cin != cout else y
            y = g.op("Relu", [g.op("Add", [h, short], "add")], "relu")
            cin = cout
    y = g.op("GlobalAveragePool", [y], "gap")
    y = g.op("Flatten", [y], "flatten", axis=1)
    fc_w = g.const("fc.weight", g.rng.standard_normal([1000, cin]) / math.sqrt(cin))
    fc_b = g.const("fc.bias", 0.01 * g.rng.standard_normal(1000))
    y = g.op("Gemm", [y, fc_w, fc_b], "fc", transB=1)
    g.nodes[-1].output[0] = "logits"
    graph = helper.make_graph(
        g.nodes, f"resnet{depth}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="aoc bench/quant/compare_ort.py")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def load_onnx(path, size):
    """An existing float model with one float input. Symbolic input
    dimensions are fixed (the first to 1, the others to `size`) so that both
    tools see the same static shapes; the stale intermediate shapes are
    dropped (shape inference recomputes them)."""
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        sys.exit(f"--onnx {path}: the model has {len(inputs)} inputs; this script handles one")
    t = inputs[0].type.tensor_type
    if t.elem_type != TensorProto.FLOAT:
        sys.exit(f"--onnx {path}: input {inputs[0].name} is not float32")
    fixed = False
    for k, d in enumerate(t.shape.dim):
        if not d.HasField("dim_value") or d.dim_value <= 0:
            d.Clear()
            d.dim_value = 1 if k == 0 else size
            fixed = True
    if fixed:
        del model.graph.value_info[:]
    return model


def input_of(model):
    inits = {t.name for t in model.graph.initializer}
    i = next(i for i in model.graph.input if i.name not in inits)
    return i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]


# --- calibration and evaluation data ----------------------------------------

def upsample(a, h, w):
    """Bilinear (align-corners) resize of the last two axes of `a` to h x w."""
    def axis(n_in, n_out):
        pos = np.linspace(0.0, n_in - 1, n_out)
        lo = np.minimum(np.floor(pos).astype(int), n_in - 2)
        return lo, (pos - lo)
    ylo, fy = axis(a.shape[-2], h)
    xlo, fx = axis(a.shape[-1], w)
    rows = a[..., ylo, :] * (1 - fy)[:, None] + a[..., ylo + 1, :] * fy[:, None]
    return rows[..., xlo] * (1 - fx) + rows[..., xlo + 1] * fx


def image_like(rng, shape):
    """One batch that resembles a normalised (ImageNet mean/std) image:
    smooth random fields at two scales, correlated across channels, with a
    per-image contrast and per-channel offset, a little per-pixel noise, and
    clipped to the range normalised 8-bit pixels can take. Inputs that are
    not NxCxHxW get N(0, 1) noise."""
    if len(shape) != 4 or shape[2] < 2 or shape[3] < 2:
        return rng.standard_normal(shape).astype(np.float32)
    n, c, h, w = shape
    x = np.zeros(shape)
    for div, amp in ((32, 1.0), (8, 0.5)):
        gh, gw = max(2, h // div), max(2, w // div)
        shared = rng.standard_normal((n, 1, gh, gw))  # brightness, common to all channels
        own = rng.standard_normal((n, c, gh, gw))     # colour
        field = upsample(0.8 * shared + 0.6 * own, h, w)
        x += amp * field / (field.std() + 1e-12)
    x /= x.std()
    x *= rng.uniform(0.7, 1.3, (n, 1, 1, 1))
    x += 0.3 * rng.standard_normal((n, c, 1, 1))
    x += 0.1 * rng.standard_normal(shape)
    return np.clip(x, -2.2, 2.7).astype(np.float32)


def write_batches(folder, count, shape, seed):
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):  # an earlier run's batches, possibly more of them
        if f.endswith(".npy"):
            os.remove(os.path.join(folder, f))
    rng = np.random.default_rng(seed)
    files = []
    for i in range(count):
        p = os.path.join(folder, f"b{i:03d}.npy")
        np.save(p, image_like(rng, shape))
        files.append(p)
    return files


# --- scores ------------------------------------------------------------------

class Score:
    """Output SQNR (10 log10(sum ref^2 / sum (ref - q)^2), summed over all
    batches and outputs) and top-1 agreement over rows of N x C outputs, the
    same definitions aoc's report uses."""

    def __init__(self):
        self.signal = self.noise = 0.0
        self.agree = self.rows = self.batches = 0

    def add(self, refs, outs):
        for r, q in zip(refs, outs):
            r = np.asarray(r, np.float64)
            q = np.asarray(q, np.float64).reshape(r.shape)
            self.signal += float((r * r).sum())
            self.noise += float(((r - q) ** 2).sum())
            if r.ndim == 2 and r.shape[1] >= 2:
                self.agree += int((r.argmax(1) == q.argmax(1)).sum())
                self.rows += r.shape[0]
        self.batches += 1

    def sqnr_db(self):
        if self.noise == 0.0:
            return math.inf
        if not math.isfinite(self.noise):
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)

    def top1(self):
        return self.agree / self.rows if self.rows else None

    def json(self):
        # JSON has no infinity: identical outputs read "inf".
        db = self.sqnr_db()
        return {"sqnr_db": db if math.isfinite(db) else ("inf" if db > 0 else "-inf"),
                "top1_agreement": self.top1(), "batches": self.batches}


def score_of(refs, outs):
    s = Score()
    for r, o in zip(refs, outs):
        s.add(r, o)
    return s


# --- ONNX Runtime ------------------------------------------------------------

def ort_session(path):
    import onnxruntime as ort
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def ort_outputs(sess, input_name, files):
    return [sess.run(None, {input_name: np.load(f)}) for f in files]


def ort_preprocess(src, dst):
    """quant_pre_process (symbolic shape inference + ORT's basic graph
    optimisations, which fold the batch norms), as ORT's docs advise before
    quantize_static. Returns (model to quantize, seconds, error or None)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    t0 = time.perf_counter()
    try:
        quant_pre_process(src, dst)
        return dst, time.perf_counter() - t0, None
    except Exception as e:  # noqa: BLE001 - any failure means: quantize the raw model
        return src, time.perf_counter() - t0, f"{type(e).__name__}: {e}"


def ort_quantize(src, dst, method, input_name, calib_files, percentile):
    """quantize_static with QDQ, per-channel s8 weights and u8 activations;
    returns its wall seconds and, of those, its calibration's: the
    calibrator's creation (the augmented model and its session), data
    collection and range computation, timed by wrapping quantize_static's
    own create_calibrator.

    quantize_static passes no histogram size to its Entropy calibrator,
    which therefore uses 128 bins and 128 quantized bins: its KL search then
    has a single candidate, the whole histogram, until the histogram grows
    (its range widens over the batches), so Entropy lands on or near MinMax."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.rewind()

        def get_next(self):
            f = next(self.files, None)
            return None if f is None else {input_name: np.load(f)}

        def rewind(self):
            self.files = iter(calib_files)

    import importlib
    qmod = importlib.import_module("onnxruntime.quantization.quantize")
    create = qmod.create_calibrator
    calib_s = [0.0]

    def timed(f):
        def g(*args, **kwargs):
            t = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                calib_s[0] += time.perf_counter() - t
        return g

    def create_timed(*args, **kwargs):
        c = timed(create)(*args, **kwargs)
        c.collect_data = timed(c.collect_data)
        c.compute_data = timed(c.compute_data)
        return c

    extra = {"CalibPercentile": percentile} if method == "percentile" else {}
    t0 = time.perf_counter()
    qmod.create_calibrator = create_timed
    try:
        with contextlib.redirect_stdout(sys.stderr):  # its calibrators print progress; keep stdout for the table
            quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            calibrate_method=getattr(CalibrationMethod, ORT_METHODS[method]),
                            extra_options=extra)
    finally:
        qmod.create_calibrator = create
    return time.perf_counter() - t0, (calib_s[0] or None)


# --- aoc ---------------------------------------------------------------------

def wait_for(path, patience=300):
    """The aoc binary may be briefly missing while someone rebuilds it."""
    t0 = time.time()
    while not os.access(path, os.X_OK):
        if time.time() - t0 > patience:
            sys.exit(f"{path} does not exist (cargo build --release -p aoc)")
        log(f"  waiting for {path} ...")
        time.sleep(10)


def run_aoc(cmd, timeout):
    """Runs one aoc command; returns (seconds, CompletedProcess). Retries
    once when the binary vanished or was being written at the wrong moment."""
    for attempt in range(2):
        wait_for(cmd[0])
        log("  $ " + shlex.join(cmd))
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            return time.perf_counter() - t0, p
        except (FileNotFoundError, OSError) as e:  # ETXTBSY while the linker writes it
            if attempt:
                raise
            log(f"  {e}; retrying")
            time.sleep(10)


def find_output(out_dir, name, n_outputs):
    """The .npy `aoc run --output-dir` wrote for ONNX output NAME: NAME.npy,
    or the only .npy when the model has one output."""
    p = os.path.join(out_dir, name + ".npy")
    if os.path.exists(p):
        return p
    files = sorted(f for f in os.listdir(out_dir) if f.endswith(".npy"))
    if n_outputs == 1 and len(files) == 1:
        return os.path.join(out_dir, files[0])
    raise RuntimeError(f"no {name}.npy in {out_dir} (found: {', '.join(files) or 'nothing'})")


def aoc_outputs(aoc, model, files, out_root, out_names, timeout):
    """`aoc run MODEL --input F --output-dir OUT_ROOT/bNNN` for each batch
    file; returns each batch's outputs, in the order of `out_names`."""
    shutil.rmtree(out_root, ignore_errors=True)
    outs = []
    for i, f in enumerate(files):
        out_dir = os.path.join(out_root, f"b{i:03d}")
        _, p = run_aoc([aoc, "run", model, "--input", f, "--output-dir", out_dir], timeout)
        if p.returncode != 0:
            raise RuntimeError("aoc run: " + ((p.stderr or p.stdout).strip() or f"exit status {p.returncode}"))
        outs.append([np.load(find_output(out_dir, n, len(out_names))) for n in out_names])
    return outs


# --- output ------------------------------------------------------------------

def fmt(x, digits=2):
    if x is None:
        return "-"
    if isinstance(x, str):  # "inf" from Score.json
        return x
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", choices=["resnet18", "resnet50"], default="resnet18",
                     help="model built here with seeded random weights (default resnet18)")
    src.add_argument("--onnx", metavar="PATH", help="an existing float ONNX model (one input) instead")
    ap.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    ap.add_argument("--calib", type=int, default=32, help="calibration batches (default 32)")
    ap.add_argument("--eval", type=int, default=16, help="evaluation batches (default 16)")
    ap.add_argument("--methods", default="minmax,entropy,percentile,mse",
                    help="range methods, aoc's names (default minmax,entropy,percentile,mse; "
                         "ORT has no mse)")
    ap.add_argument("--percentile", type=float, default=99.99, help="for percentile (default 99.99)")
    ap.add_argument("--check-batches", type=int, default=2,
                    help="eval batches `aoc run` (the interpreter) re-measures each aoc model on; "
                         "0 skips the cross-check (default 2)")
    ap.add_argument("--no-compiled-check", action="store_true",
                    help="skip compiling each aoc model and re-measuring it on every eval batch")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and the data (default 0)")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench-quant"),
                    help="work folder (default build/bench-quant)")
    ap.add_argument("--aoc", default=os.path.join(ROOT, "target", "release", "aoc"), help="aoc binary")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per aoc command (default 3600)")
    ap.add_argument("--no-ort", action="store_true", help="aoc's side only")
    ap.add_argument("--no-aoc", action="store_true", help="ONNX Runtime's side only")
    a = ap.parse_args()

    command = shlex.join([sys.executable] + sys.argv)
    print(f"command: {command}", flush=True)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in AOC_METHODS]
    if bad:
        ap.error(f"unknown method(s) {', '.join(bad)}; choose from {', '.join(AOC_METHODS)}")
    t_start = time.perf_counter()
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)

    # 1. The float model.
    model_path = os.path.join(work, "model.onnx")
    model = load_onnx(a.onnx, a.size) if a.onnx else resnet(int(a.model[6:]), a.size, a.seed)
    onnx.save(model, model_path)
    input_name, shape = input_of(model)
    n_params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    log(f"model: {a.onnx or a.model} -> {model_path} (input {input_name} {shape}, "
        f"{len(model.graph.node)} nodes, {n_params / 1e6:.1f} M parameters)")
    del model

    # 2. Data: calibration and evaluation batches from different seeds.
    calib_dir, eval_dir = os.path.join(work, "calib"), os.path.join(work, "eval")
    calib_files = write_batches(calib_dir, a.calib, shape, [a.seed, 1])
    eval_files = write_batches(eval_dir, a.eval, shape, [a.seed, 2])
    log(f"data: {a.calib} calibration batches in {calib_dir}, {a.eval} eval batches in {eval_dir}")

    # The float model's outputs in ORT: the reference for every SQNR below
    # (aoc's own report uses aoc's compiled float model instead).
    import onnxruntime as ort
    float_sess = ort_session(model_path)
    out_names = [o.name for o in float_sess.get_outputs()]
    refs = ort_outputs(float_sess, input_name, eval_files)
    del float_sess

    results = {"command": command, "model": a.onnx or a.model, "input": {input_name: shape},
               "parameters": n_params, "calib_batches": a.calib, "eval_batches": a.eval,
               "percentile": a.percentile, "check_batches": a.check_batches,
               "machine": {"cpus": os.cpu_count(), "loadavg": list(os.getloadavg()),
                           "platform": platform.platform(), "onnxruntime": ort.__version__,
                           "onnx": onnx.__version__, "numpy": np.__version__},
               "git_commit": git_commit(), "ort": {}, "aoc": {}}

    # 3. ONNX Runtime.
    ort_q_outs = {}  # method -> the QDQ model's outputs on each eval batch
    if not a.no_ort:
        pre_path = os.path.join(work, "model.pre.onnx")
        ort_src, pre_s, pre_err = ort_preprocess(model_path, pre_path)
        if pre_err:
            log(f"ort: quant_pre_process failed, quantizing the raw model: {pre_err}")
        else:
            log(f"ort: quant_pre_process {pre_s:.1f} s -> {pre_path}")
        results["ort_preprocess"] = {"seconds": pre_s, "error": pre_err, "model": ort_src}
        for m in (m for m in methods if m in ORT_METHODS):
            q_path = os.path.join(work, f"ort_{m}.onnx")
            log(f"ort: quantize_static {ORT_METHODS[m]} -> {q_path}")
            rec = {"model": q_path}
            try:
                rec["seconds"], rec["calibration_seconds"] = ort_quantize(ort_src, q_path, m, input_name,
                                                                          calib_files, a.percentile)
                ort_q_outs[m] = ort_outputs(ort_session(q_path), input_name, eval_files)
                score = score_of(refs, ort_q_outs[m])
                rec["eval"] = score.json()
                log(f"  {rec['seconds']:.1f} s; eval SQNR {fmt(score.sqnr_db())} dB, "
                    f"top-1 {fmt(score.top1(), 3)}")
            except Exception as e:  # noqa: BLE001 - report it in the table, go on
                rec["error"] = f"{type(e).__name__}: {e}"
                log(f"  failed: {rec['error']}")
            results["ort"][m] = rec

    # 4. aoc.
    if not a.no_aoc:
        wait_for(a.aoc)
        results["aoc_binary"] = {"path": a.aoc, "mtime": time.ctime(os.path.getmtime(a.aoc))}
        for m in methods:
            air = os.path.join(work, f"aoc_{m}.air")
            report_path = os.path.join(work, f"aoc_{m}.json")
            cmd = [a.aoc, "quantize", model_path, "--calib", calib_dir, "--eval", eval_dir,
                   "--method", m, "-o", air, "--report", report_path, "-q"]
            if m == "percentile":
                cmd += ["--percentile", f"{a.percentile:g}"]
            log(f"aoc: quantize {m}")
            rec = {"command": shlex.join(cmd)}
            results["aoc"][m] = rec
            if os.path.exists(report_path):
                os.remove(report_path)  # never read an earlier run's report
            secs, p = run_aoc(cmd, a.timeout)
            rec["seconds"] = secs
            if p.returncode != 0:
                rec["error"] = (p.stderr or p.stdout).strip() or f"exit status {p.returncode}"
                log(f"  failed (exit {p.returncode}, {secs:.1f} s):\n" +
                    "\n".join("  | " + line for line in rec["error"].splitlines()))
                continue
            with open(report_path) as f:
                report = json.load(f)
            totals = report["totals"]
            rec["eval"] = totals.get("eval")
            rec["calibration_score"] = totals.get("calibration")
            rec["calibration_seconds"] = report["calibration"]["seconds"]
            rec["report_seconds"] = totals.get("seconds")
            rec["layers"] = {k: totals.get(k) for k in ("layers", "quantized", "float")}
            ev = rec["eval"] or {}
            log(f"  {secs:.1f} s (calibration {rec['calibration_seconds']:.1f} s); report eval SQNR "
                f"{fmt(ev.get('sqnr_db'))} dB, top-1 {fmt(ev.get('top1_agreement'), 3)}; "
                f"{totals.get('quantized')} of {totals.get('layers')} layers quantized")

            # Cross-checks against ORT's float outputs: the compiled
            # artifact on every eval batch (the report's batches, but ORT's
            # float reference instead of aoc's), and the .air in aoc's
            # reference interpreter on the first --check-batches of them.
            rec["check"] = check = {}
            k = min(a.check_batches, len(eval_files))
            try:
                compiled = None
                if not a.no_compiled_check:
                    art = os.path.join(work, f"aoc_{m}.aoc")
                    secs, p = run_aoc([a.aoc, "compile", air, "--target", "host", "-o", art], a.timeout)
                    if p.returncode != 0:
                        raise RuntimeError("aoc compile: " + ((p.stderr or p.stdout).strip() or
                                                              f"exit status {p.returncode}"))
                    compiled = aoc_outputs(a.aoc, art, eval_files, os.path.join(work, "check", m, "compiled"),
                                           out_names, a.timeout)
                    check["compiled"] = score_of(refs, compiled).json()
                    check["compiled_first_k"] = score_of(refs[:k], compiled[:k]).json()
                    log(f"  compiled artifact on {len(eval_files)} eval batches: SQNR "
                        f"{fmt(check['compiled']['sqnr_db'])} dB against ORT's float outputs")
                if k > 0:
                    t0 = time.perf_counter()
                    interp = aoc_outputs(a.aoc, air, eval_files[:k], os.path.join(work, "check", m, "interpreter"),
                                         out_names, a.timeout)
                    check["interpreter"] = score_of(refs[:k], interp).json()
                    if compiled is not None:
                        # How closely the interpreter and the compiled kernels agree.
                        check["interpreter_vs_compiled"] = score_of(compiled[:k], interp).json()
                    log(f"  interpreter on {k} eval batch(es): SQNR {fmt(check['interpreter']['sqnr_db'])} dB "
                        f"({time.perf_counter() - t0:.1f} s)")
                if k > 0 and m in ort_q_outs:
                    check["ort_first_k"] = score_of(refs[:k], ort_q_outs[m][:k]).json()
            except Exception as e:  # noqa: BLE001 - report it, go on
                check["error"] = f"{type(e).__name__}: {e}"
                log(f"  cross-check failed: {check['error']}")

    results["total_seconds"] = time.perf_counter() - t_start

    # 5. Tables and results.json.
    rows, details = [], []
    for m in methods:
        o, q = results["ort"].get(m, {}), results["aoc"].get(m, {})
        o_db = (o.get("eval") or {}).get("sqnr_db")
        q_db = (q.get("eval") or {}).get("sqnr_db")
        o_s = o.get("seconds") if "error" not in o else None
        q_s = q.get("seconds") if "error" not in q else None
        diff = q_db - o_db if isinstance(o_db, float) and isinstance(q_db, float) else None
        ratio = o_s / q_s if o_s and q_s else None
        o_c = o.get("calibration_seconds") if "error" not in o else None
        q_c = q.get("calibration_seconds") if "error" not in q else None
        c_ratio = o_c / q_c if o_c and q_c else None
        rows.append([m, "failed" if "error" in o else fmt(o_db), "failed" if "error" in q else fmt(q_db),
                     fmt(diff), fmt(o_s, 1), fmt(q_s, 1), fmt(ratio), fmt(o_c, 1), fmt(q_c, 1), fmt(c_ratio)])
        chk = q.get("check") or {}

        def db(key, d=chk):
            return fmt((d.get(key) or {}).get("sqnr_db"))
        details.append([m, fmt((o.get("eval") or {}).get("top1_agreement"), 3),
                        fmt((q.get("eval") or {}).get("top1_agreement"), 3),
                        fmt(q.get("calibration_seconds"), 1), db("compiled"),
                        db("ort_first_k"), db("compiled_first_k"), db("interpreter"),
                        db("interpreter_vs_compiled")])
    print()
    print(f"{a.onnx or a.model}, input {input_name} {shape}, {a.calib} calibration / {a.eval} eval batches, "
          f"{os.cpu_count()} CPUs, load average {results['machine']['loadavg'][0]:.2f}")
    print()
    print(table(["method", "ORT eval SQNR (dB)", "aoc eval SQNR (dB)", "aoc - ORT (dB)",
                 "ORT quantize (s)", "aoc quantize (s)", "speed ratio (ORT / aoc)",
                 "ORT calibration (s)", "aoc calibration (s)", "calibration ratio (ORT / aoc)"], rows))
    print()
    k = min(a.check_batches, a.eval)
    print(f"Cross-checks, SQNR in dB against ORT's float outputs (first {k} = the first {k} eval batches):")
    print()
    print(table(["method", "ORT top-1", "aoc top-1", "aoc calibration (s)", f"aoc compiled, {a.eval} batches",
                 f"ORT, first {k}", f"aoc compiled, first {k}", f"aoc interpreter, first {k}",
                 "interpreter vs compiled"], details))
    notes = []
    for m in methods:
        o, q = results["ort"].get(m, {}), results["aoc"].get(m, {})
        o_db, q_db = (o.get("eval") or {}).get("sqnr_db"), (q.get("eval") or {}).get("sqnr_db")
        c_db = ((q.get("check") or {}).get("compiled") or {}).get("sqnr_db")
        if isinstance(o_db, float) and isinstance(q_db, float) and q_db < o_db - 3.0:
            notes.append(f"{m}: aoc's eval SQNR is {o_db - q_db:.1f} dB below ORT's")
        # The report measures against aoc's float model, the check against
        # ORT's; both float models agree far below the quantization noise.
        if isinstance(q_db, float) and isinstance(c_db, float) and abs(q_db - c_db) > 0.1:
            notes.append(f"{m}: aoc's report ({q_db:.2f} dB) and the compiled artifact re-measured "
                         f"({c_db:.2f} dB) disagree")
    if notes:
        print("\nnote: " + "\nnote: ".join(notes))
    for m in methods:
        for side in ("ort", "aoc"):
            err = results[side].get(m, {}).get("error")
            if err:
                print(f"\n{side} {m} failed" +
                      (f": {results['aoc'][m]['command']}" if side == "aoc" else "") + f"\n{err}")
        err = (results["aoc"].get(m, {}).get("check") or {}).get("error")
        if err:
            print(f"\naoc {m} cross-check failed: {err}")
    print(f"\ntotal {results['total_seconds']:.0f} s; results in {os.path.join(work, 'results.json')}")
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
