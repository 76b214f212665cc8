#!/usr/bin/env python3
"""fp8 (e4m3) GEMM on the GPU: aoc's fp8 wgmma kernel against
torch._scaled_mm and fp16 torch.matmul, same shapes, same run.

For each n: an .air model of y = x @ B with x (n×n, f32 input) quantized
per tensor to e4m3, B an n×n e4m3 constant with per-column scales (a
safetensors F8_E4M3 tensor), and y quantized to e4m3 and dequantized
(what `aoc quantize --precision fp8` writes). `aoc compile --target sm_90a`
turns the MatMul into one `qconv_wgmma` kernel (`wgmma` m64nNk32
`.f32.e4m3.e4m3`, f32 accumulation, e4m3 output with the requantization
in its epilogue); `aoc bench --profile` gives that kernel's device time
alone (the model's quantize and dequantize passes are reported apart).
Peers on tensors already on the GPU, CUDA events, median:
torch._scaled_mm (e4m3 × e4m3, per-tensor scales, f16 and bf16 out,
cuBLASLt) and torch.matmul in fp16 (cuBLAS).

    fp8_gemm.py --aoc build/device/aoc [--sizes 4096,8192]

Ratios are peer time / aoc time (above 1.0: aoc is faster). The aoc
kernel also requantizes to e4m3 (one byte per output), the peers write
two bytes per output.
"""
import argparse
import json
import os
import re
import struct
import subprocess

import numpy as np
import torch
from run import cuda_median_ms


def e4m3_codes(values):
    """float32 values (already on the e4m3 grid or not) → e4m3 bytes, by
    torch's own conversion (round to nearest even, saturating here)."""
    t = torch.from_numpy(np.clip(values, -448, 448).astype(np.float32))
    return t.to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def write_safetensors(path, name, codes):
    header = {name: {"dtype": "F8_E4M3", "shape": list(codes.shape), "data_offsets": [0, codes.size]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(codes.tobytes())


def fp8_gemm_model(n, d):
    """The .air model and its weights; returns the .air path."""
    rng = np.random.default_rng(n)
    w = rng.standard_normal((n, n)).astype(np.float32)
    ws = (np.abs(w).max(axis=0) / 448.0).astype(np.float32)
    codes = e4m3_codes(w / ws[None, :])
    write_safetensors(os.path.join(d, f"fp8_gemm_{n}.safetensors"), "w", codes)
    xs, ys = 4.0 / 448, float(4.0 * np.sqrt(n) / 448)
    scales = ", ".join(repr(float(s)) for s in ws)
    q = lambda s: f"!quant.uniform<f8E4M3FN:f32, {s!r}>"  # noqa: E731
    text = f"""weights @weights = "fp8_gemm_{n}.safetensors"

func @main(%x: tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32> {{
  %xq = quant.quantize %x : tensor<{n}x{n}x{q(xs)}>
  %xd = quant.dequantize %xq : tensor<{n}x{n}xf32>
  %wq = const @weights["w"] : tensor<{n}x{n}x!quant.uniform<f8E4M3FN:f32:1, {{{scales}}}>>
  %wd = quant.dequantize %wq : tensor<{n}x{n}xf32>
  %y0 = core.matmul %xd, %wd : tensor<{n}x{n}xf32>
  %yq = quant.quantize %y0 : tensor<{n}x{n}x{q(ys)}>
  %y = quant.dequantize %yq : tensor<{n}x{n}xf32>
  return %y : tensor<{n}x{n}xf32>
}}
"""
    path = os.path.join(d, f"fp8_gemm_{n}.air")
    with open(path, "w") as f:
        f.write(text)
    return path


def aoc_kernel_ms(aoc, air, workdir, n):
    art = os.path.join(workdir, f"fp8_gemm_{n}.aoc")
    subprocess.run([aoc, "compile", air, "--target", "sm_90a", "-o", art, "-q"], check=True)
    out = subprocess.run([aoc, "bench", art, "--iters", "30", "--profile", "--slowest", "0"],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    kernel = re.search(r"^\s*(qconv_\w+)\s+1 launches\s+([\d.]+) ms", out, re.M)
    total = re.search(r"device \(graph replay\): p50 ([\d.]+) ms", out)
    if not kernel or not total:
        raise RuntimeError(f"no fp8 kernel time in (is the matmul on the fp8 wgmma?):\n{out}")
    return kernel.group(1), float(kernel.group(2)), float(total.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aoc", default="build/device/aoc")
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--workdir", default="/tmp/aoc-fp8-gemm")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    for n in [int(v) for v in a.sizes.split(",") if v]:
        air = fp8_gemm_model(n, a.workdir)
        kind, k_ms, model_ms = aoc_kernel_ms(a.aoc, air, a.workdir, n)
        x8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        # _scaled_mm wants B column-major: the transpose of a row-major one.
        w8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        peers = {}
        for name, dt in (("scaled_mm_f16", torch.float16), ("scaled_mm_bf16", torch.bfloat16)):
            peers[name] = cuda_median_ms(lambda dt=dt: torch._scaled_mm(x8, w8, scale_a=one, scale_b=one, out_dtype=dt), 30)
        x16 = torch.randn(n, n, device="cuda", dtype=torch.float16)
        w16 = torch.randn(n, n, device="cuda", dtype=torch.float16)
        peers["cublas_fp16"] = cuda_median_ms(lambda: torch.matmul(x16, w16), 30)
        tflops = lambda ms: 2 * n ** 3 / ms / 1e9  # noqa: E731
        row = {"n": n, "aoc_kernel": kind, "aoc_kernel_ms": k_ms, "aoc_model_ms": model_ms, "aoc_tflops": tflops(k_ms)}
        for name, ms in peers.items():
            row[f"{name}_ms"] = ms
            row[f"{name}_tflops"] = tflops(ms)
            row[f"{name}_over_aoc"] = ms / k_ms
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
