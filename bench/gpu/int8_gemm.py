#!/usr/bin/env python3
"""int8 GEMM on the GPU: aoc's integer kernel against torch._int_mm, same
shapes, same run.

For each n: a QDQ ONNX model of y = x @ B with x (n×n, f32 input)
quantized per tensor to u8, B an n×n s8 constant with per-column scales,
and y quantized to s8 and dequantized (what ONNX Runtime's
quantize_static writes). `aoc compile --target SM` turns the MatMul into
one integer convolution kernel (`qconv_wgmma` on sm_90a, s32 accumulation,
requantized s8 output); `aoc bench --profile` gives that kernel's device
time alone (the model's quantize and dequantize passes are reported
apart). Peers on tensors already on the GPU, CUDA events, median:
torch._int_mm (s8 × s8 → s32, cuBLASLt) and torch.matmul in fp16 (cuBLAS).

    int8_gemm.py --aoc build/device/aoc [--sm sm_90a] [--sizes 4096,8192]

Ratios are peer time / aoc time (above 1.0: aoc is faster).
"""
import argparse
import json
import os
import re
import subprocess

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from run import cuda_median_ms


def qdq_gemm(n, path):
    rng = np.random.default_rng(n)
    w = rng.integers(-127, 128, (n, n)).astype(np.int8)
    ws = (rng.uniform(0.5, 1.5, n) / 127 / np.sqrt(n)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "Wq"),
        numpy_helper.from_array(ws, "ws"),
        numpy_helper.from_array(np.zeros(n, np.int8), "wz"),
        numpy_helper.from_array(np.array(4.0 / 255, np.float32), "xs"),
        numpy_helper.from_array(np.array(128, np.uint8), "xz"),
        numpy_helper.from_array(np.array(8.0 / 255, np.float32), "ys"),
        numpy_helper.from_array(np.array(0, np.int8), "yz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["Wq", "ws", "wz"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y0"]),
        helper.make_node("QuantizeLinear", ["y0", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    g = helper.make_graph(nodes, f"qgemm{n}",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def aoc_kernel_ms(aoc, onnx_path, sm, workdir, n):
    art = os.path.join(workdir, f"qgemm_{n}.aoc")
    subprocess.run([aoc, "compile", onnx_path, "--target", sm, "-o", art, "-q"], check=True)
    out = subprocess.run([aoc, "bench", art, "--iters", "30", "--profile", "--slowest", "0"],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    kernel = re.search(r"^\s*(qconv_\w+)\s+1 launches\s+([\d.]+) ms", out, re.M)
    total = re.search(r"device \(graph replay\): p50 ([\d.]+) ms", out)
    if not kernel or not total:
        raise RuntimeError(f"no kernel time in:\n{out}")
    return kernel.group(1), float(kernel.group(2)), float(total.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aoc", default="build/device/aoc")
    ap.add_argument("--sm", default="sm_90a")
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--workdir", default="/tmp/aoc-int8-gemm")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    for n in [int(v) for v in a.sizes.split(",") if v]:
        path = os.path.join(a.workdir, f"qgemm_{n}.onnx")
        qdq_gemm(n, path)
        kind, k_ms, model_ms = aoc_kernel_ms(a.aoc, path, a.sm, a.workdir, n)
        x8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8)
        w8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8)
        int_mm = cuda_median_ms(lambda: torch._int_mm(x8, w8), 30)
        x16 = torch.randn(n, n, device="cuda", dtype=torch.float16)
        w16 = torch.randn(n, n, device="cuda", dtype=torch.float16)
        fp16 = cuda_median_ms(lambda: torch.matmul(x16, w16), 30)
        tops = lambda ms: 2 * n ** 3 / ms / 1e9  # noqa: E731
        row = {
            "n": n, "aoc_kernel": kind, "aoc_kernel_ms": k_ms, "aoc_model_ms": model_ms,
            "aoc_tops": tops(k_ms), "int_mm_ms": int_mm, "int_mm_tops": tops(int_mm),
            "cublas_fp16_ms": fp16, "int_mm_over_aoc": int_mm / k_ms, "fp16_over_aoc": fp16 / k_ms,
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
