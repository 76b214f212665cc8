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

Ratios are aoc / peer (below 1.0: aoc is faster). Figures move between runs,
so only ratios from one run mean anything.

    run.py --aoc build/device/aoc [--sm sm_90a] [--models resnet50,bert_base]
           [--batches 1,32] [--gemm 4096,8192] [--iters 50] [--out results.json]
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


def torch_bench(path, cnn, iters):
    model = onnx.load(path)
    m = OnnxModule(model, dtype=torch.float16, device="cuda", channels_last=cnn).eval()
    inputs = []
    for i in model.graph.input:
        if i.name in {init.name for init in model.graph.initializer}:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aoc", default=os.path.join(ROOT, "build/device/aoc"))
    ap.add_argument("--sm", default="sm_90a")
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--gemm", default="4096,8192")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build/bench-gpu"))
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
            row["torch"] = torch_bench(path, name.startswith("resnet"), a.iters)
            if "aoc" in row:
                t = row["torch"]
                row["ratio_vs_eager"] = row["aoc"]["device_p50_ms"] / t["eager_ms"]
                row["ratio_vs_compile_best"] = row["aoc"]["device_p50_ms"] / t["compiled_best_ms"]
            print(json.dumps(row), flush=True)
            results.append(row)
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
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
