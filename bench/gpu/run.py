#!/usr/bin/env python3
"""aoc against PyTorch on the GPU, same models, same weights, same run.

For each model (ResNet-50 and BERT-base seq 128, built by
bench/models/build_models.py with seeded random weights), at batch 1 and 32:
- aoc: `aoc compile M.onnx --target SM --precision fp16` (timed), then
  `aoc bench --json`: the device time of one inference's CUDA-graph replay
  (CUDA events, median over the iterations after warm-up);
- PyTorch: the same ONNX graph run by bench/gpu/onnx_torch.py (every node a
  torch op, weights fp16 on the GPU, channels-last for the CNN): eager, and
  torch.compile in its default mode and mode="reduce-overhead" (CUDA
  graphs), each timed with CUDA events after warm-up (median); compile time
  is the first call.
Plus fp16 GEMMs (4096³, 8192³): an aoc model of one matmul with a constant
B against torch.matmul (cuBLAS) on the same shapes.

With --quant int8,fp8, each model is also quantized by `aoc quantize`
(min-max over seeded calibration batches: normal noise for images, random
token ids for BERT; int8 `--target sm_90`, fp8 `--precision fp8 --target
sm_90a`), compiled for SM at --precision fp16 (layers without an integer
kernel run in fp16) and timed the same way: ratios against aoc's fp16
build and against torch.compile's best fp16, and the quantized output's
SQNR against aoc fp16 on one seeded input.

Ratios are aoc / peer (below 1.0: aoc is faster). Figures move between runs,
so only ratios from one run mean anything.

    run.py --aoc build/device/aoc [--sm sm_90a] [--models resnet50,bert_base]
           [--batches 1,32] [--gemm 4096,8192] [--quant int8,fp8] [--iters 50]
           [--out results.json]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from onnx_torch import OnnxModule  # noqa: E402


def sh(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    return p.stdout, p.stderr


def cuda_median_ms(fn, iters, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return float(np.median(times))


def build_model(name, batch, outdir):
    """ONNX file for `name` at `batch` (seq 128 for BERT)."""
    path = os.path.join(outdir, f"{name}_b{batch}.onnx")
    if not os.path.exists(path):
        tmp = os.path.join(outdir, f"tmp_b{batch}")
        os.makedirs(tmp, exist_ok=True)
        sh([sys.executable, os.path.join(ROOT, "bench/models/build_models.py"), tmp, name, "--batch", str(batch)])
        os.replace(os.path.join(tmp, f"{name}.onnx"), path)
    return path


def aoc_bench(aoc, path, sm, iters, extra=()):
    art = path.rsplit(".", 1)[0] + f".{sm}.aoc"
    t0 = time.perf_counter()
    _, err = sh([aoc, "compile", path, "--target", sm, "--precision", "fp16", "-o", art, *extra])
    compile_s = time.perf_counter() - t0
    out, _ = sh([aoc, "bench", art, "--json", "--iters", str(iters), "--warmup", "10"])
    r = json.loads(out)
    return {"compile_s": compile_s, "device_p50_ms": r["device_p50_ms"], "e2e_p50_ms": r["p50_ms"],
            "summary": err.strip().splitlines()[0]}


def graph_inputs(model):
    """(name, shape, is_int64) of each graph input that is not a weight."""
    inits = {i.name for i in model.graph.initializer}
    return [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim], i.type.tensor_type.elem_type == onnx.TensorProto.INT64)
            for i in model.graph.input if i.name not in inits]


def seeded_input(shape, is_int, rng):
    if is_int:
        return rng.integers(0, 30522, shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def aoc_quant_bench(aoc, path, sm, iters, precision, fp16_art):
    """`aoc quantize` of `path` (int8 or fp8), compiled and timed as aoc_bench
    does; its output's SQNR (dB) against the fp16 artifact on one input."""
    base = path.rsplit(".", 1)[0]
    model = onnx.load(path, load_external_data=False)
    ins = graph_inputs(model)
    calib = f"{base}_calib"
    rng = np.random.default_rng(0)
    if not os.path.isdir(calib):
        batches = max(2, 8 // ins[0][1][0]) if ins[0][1] else 2
        for name, shape, is_int in ins:
            os.makedirs(os.path.join(calib, name), exist_ok=True)
            for b in range(batches):
                np.save(os.path.join(calib, name, f"b{b}.npy"), seeded_input(shape, is_int, rng))
    q = f"{base}.{precision}.air"
    target = "sm_90" if precision == "int8" else "sm_90a"
    t0 = time.perf_counter()
    sh([aoc, "quantize", path, "--calib", calib, "--method", "minmax", "--precision", precision, "--target", target, "-o", q, "-q"])
    quantize_s = time.perf_counter() - t0
    r = aoc_bench(aoc, q, sm, iters)
    r["quantize_s"] = quantize_s
    # SQNR against the fp16 build on one seeded input.
    feeds, outs = [], {}
    d = f"{base}_eval"
    os.makedirs(d, exist_ok=True)
    for name, shape, is_int in ins:
        f = os.path.join(d, f"{name}.npy")
        np.save(f, seeded_input(shape, is_int, np.random.default_rng(1)))
        feeds += ["-i", f"{name}={f}"]
    for tag, art in [("f16", fp16_art), ("q", q.rsplit(".", 1)[0] + f".{sm}.aoc")]:
        o = os.path.join(d, tag)
        sh([aoc, "run", art, *feeds, "--output-dir", o])
        outs[tag] = [np.load(os.path.join(o, f)).astype(np.float64) for f in sorted(os.listdir(o)) if f.endswith(".npy")]
    ref, got = outs["f16"][0], outs["q"][0]
    r["sqnr_db_vs_fp16"] = float(10 * np.log10(np.sum(ref ** 2) / max(np.sum((ref - got) ** 2), 1e-30)))
    return r


def torch_bench(path, cnn, iters):
    model = onnx.load(path)
    m = OnnxModule(model, dtype=torch.float16, device="cuda", channels_last=cnn).eval()
    inputs = []
    for _, shape, is_int in graph_inputs(model):
        if is_int:
            inputs.append(torch.randint(0, 1000, shape, device="cuda"))
        else:
            inputs.append(torch.randn(shape, device="cuda"))
    res = {}
    with torch.inference_mode():
        res["eager_ms"] = cuda_median_ms(lambda: m(*inputs), iters)
        for mode in ["default", "reduce-overhead"]:
            torch._dynamo.reset()
            c = torch.compile(m, mode=mode)
            t0 = time.perf_counter()
            c(*inputs)
            torch.cuda.synchronize()
            res[f"compile_{mode}_s"] = time.perf_counter() - t0
            res[f"compiled_{mode}_ms"] = cuda_median_ms(lambda: c(*inputs), iters)
    res["compiled_best_ms"] = min(res["compiled_default_ms"], res["compiled_reduce-overhead_ms"])
    return res


def gemm_model(n, outdir):
    """An ONNX model y = x @ B, x n×n input, B n×n constant."""
    path = os.path.join(outdir, f"gemm_{n}.onnx")
    if os.path.exists(path):
        return path
    from onnx import TensorProto, helper, numpy_helper
    b = (np.random.default_rng(n).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "B"], ["y"])], f"gemm{n}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(b, "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def save(path, results):
    """The results so far, after each row (a run cut short keeps them)."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aoc", default=os.path.join(ROOT, "build/device/aoc"))
    ap.add_argument("--sm", default="sm_90a")
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--gemm", default="4096,8192")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build/bench-gpu"))
    ap.add_argument("--quant", default="", help="also aoc quantize each model: int8 and/or fp8")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    results = []
    for name in [m for m in a.models.split(",") if m]:
        for batch in [int(b) for b in a.batches.split(",") if b]:
            path = build_model(name, batch, a.workdir)
            row = {"model": name, "batch": batch}
            try:
                row["aoc"] = aoc_bench(a.aoc, path, a.sm, a.iters)
            except Exception as e:  # report and go on: the peers still get measured
                row["aoc_error"] = str(e)[-2000:]
            for prec in [p for p in a.quant.split(",") if p] if "aoc" in row else []:
                try:
                    row[f"aoc_{prec}"] = aoc_quant_bench(a.aoc, path, a.sm, a.iters, prec, path.rsplit(".", 1)[0] + f".{a.sm}.aoc")
                except Exception as e:
                    row[f"aoc_{prec}_error"] = str(e)[-2000:]
            row["torch"] = torch_bench(path, name.startswith("resnet"), a.iters)
            if "aoc" in row:
                t = row["torch"]
                row["ratio_vs_eager"] = row["aoc"]["device_p50_ms"] / t["eager_ms"]
                row["ratio_vs_compile_best"] = row["aoc"]["device_p50_ms"] / t["compiled_best_ms"]
                for prec in [p for p in a.quant.split(",") if p and f"aoc_{p}" in row]:
                    q = row[f"aoc_{prec}"]["device_p50_ms"]
                    row[f"{prec}_vs_aoc_fp16"] = q / row["aoc"]["device_p50_ms"]
                    row[f"{prec}_vs_compile_best"] = q / t["compiled_best_ms"]
            print(json.dumps(row), flush=True)
            results.append(row)
            save(a.out, results)
    for n in [int(v) for v in a.gemm.split(",") if v]:
        path = gemm_model(n, a.workdir)
        row = {"gemm": n}
        try:
            row["aoc"] = aoc_bench(a.aoc, path, a.sm, a.iters)
        except Exception as e:
            row["aoc_error"] = str(e)[-2000:]
        x = torch.randn(n, n, device="cuda", dtype=torch.float16)
        w = torch.randn(n, n, device="cuda", dtype=torch.float16)
        cublas = cuda_median_ms(lambda: torch.matmul(x, w), a.iters)
        row["cublas_ms"] = cublas
        row["cublas_tflops"] = 2 * n ** 3 / cublas / 1e9
        if "aoc" in row:
            row["aoc_tflops"] = 2 * n ** 3 / row["aoc"]["device_p50_ms"] / 1e9
            row["ratio_of_cublas"] = cublas / row["aoc"]["device_p50_ms"]
        print(json.dumps(row), flush=True)
        results.append(row)
        save(a.out, results)


if __name__ == "__main__":
    main()
