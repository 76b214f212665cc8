#!/usr/bin/env python3
"""2:4 sparse fp16 GEMM on the GPU, same run, same shapes (issue 20):

- aoc dense fp16: an ONNX model y = x @ B (B constant, n×n) compiled with
  `aoc compile --target SM --precision fp16`, `aoc bench --json` (device
  time of the CUDA-graph replay);
- aoc 2:4 through the compiler: the same model after `aoc sparsify
  --pattern 2:4`, compiled and benched the same way (`aoc explain` of
  it says whether the layer ran sparse or dense, and why);
- aoc's tiled `mma.sp` kernel (`kernels::gemm_sp::gemm_sp_tiled`, what the
  compiler runs sparse layers on where its cost model picks sparse): its
  PTX for these shapes in every tile, written by the PTX tests with
  AOC_PTX_DUMP_DIR (gemm_sp_tiled_SM.ptx, kernels `sptiled_benchN_T`),
  launched with CuPy on a 2:4 weight packed as the kernel reads it, timed
  with CUDA events (f16 activations: the compiled model converts them in
  its own launch, which the aoc_sparsified row includes);
- aoc's `wgmma.sp` kernel (`kernels::gemm_sp::gemm_sp_wgmma`, sm_90a
  only, what the compiler runs large sparse layers on at sm_90a): the
  same, from gemm_sp_wgmma_sm_90a.ptx (kernels `spwg_benchN_T`);
- PyTorch: torch.matmul (cuBLAS) dense, and F.linear on
  torch.sparse.to_sparse_semi_structured(W) (cuSPARSELt / CUTLASS).

Usage (on the GPU machine):

    AOC_PTX_DUMP_DIR=/tmp/ptx build/device/ptx_tests gemm_sp
    (or: AOC_PTX_DUMP_DIR=/tmp/ptx cargo test --release -p aoc-backend-ptx --test ptx gemm_sp)
    python3 bench/gpu/sparse_gemm.py --aoc build/device/aoc --ptx /tmp/ptx [--sm sm_90a] [--sizes 4096,8192]

Prints one JSON row per size: milliseconds (median over --iters after
warm-up) and TFLOP/s counted as dense 2·n³, and the ratios the issue's
targets name (2:4 vs aoc dense, vs PyTorch semi-structured). Only ratios
from one run mean anything.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from run import aoc_bench, cuda_median_ms, gemm_model, sh  # noqa: E402


sys.path.insert(0, os.path.join(ROOT, "backends/ptx/tests/gpu_checks"))
from gemm_sp import pack_tiled, prune_2_4 as prune_keep  # noqa: E402


def aoc_kernel_ms(ptx_dir, sm, n, iters, family="gemm_sp_tiled", prefix="sptiled_bench"):
    """Times every `family` kernel (`gemm_sp_tiled`, or `gemm_sp_wgmma`
    for sm_90a) of n³ in the dump (the tile the compiler picks is `_0`);
    returns {tile: ms} and a note."""
    import cupy as cp

    path = os.path.join(ptx_dir, f"{family}_{sm}.ptx")
    if not os.path.exists(path):
        return {}, f"no {path} (run the PTX tests with AOC_PTX_DUMP_DIR)"
    mod = cp.RawModule(path=path)
    with open(path[:-4] + ".txt") as fh:
        specs = [dict(kv.split("=", 1) for kv in ln.split()) for ln in fh if ln.strip()]
    specs = [s for s in specs if s["name"].startswith(prefix) and int(s["m"]) == n and int(s["n"]) == n and int(s["k"]) == n]
    if not specs:
        return {}, f"no {n}³ kernel in {path}"
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, n)).astype(np.float16)
    w, keep = prune_keep(rng.standard_normal((n, n)).astype(np.float16))
    dx = cp.asarray(x)
    dy = cp.empty((n, n), dtype=cp.float32)
    out, notes = {}, []
    for s in specs:
        bm, bk, smem = int(s["bm"]), int(s["bk"]), int(s["smem"])
        values, meta = pack_tiled(w, keep, bm, bk)
        dv, dm = cp.asarray(values), cp.asarray(meta)
        fn = mod.get_function(s["name"])
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        run = lambda: fn((int(s["grid"]), 1, 1), (int(s["block"]), 1, 1), (dx, dv, dm, dy), shared_mem=smem)  # noqa: E731
        out[f"{s['name']} {s['bm']}x{s['bn']}x{s['bk']}s{s['stages']}b{s.get('minblocks', '1')}"] = cuda_median_ms(run, iters)
        rows = rng.choice(n, 8, replace=False)
        want = x[rows].astype(np.float32) @ w.astype(np.float32).T
        err = float(np.max(np.abs(dy.get()[rows] - want)) / (np.max(np.abs(want)) + 1e-6))
        notes.append(f"{s['name']}: max rel err on 8 rows {err:.2e}")
    return out, "; ".join(notes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aoc", default=os.path.join(ROOT, "build/device/aoc"))
    ap.add_argument("--ptx", default=None, help="AOC_PTX_DUMP_DIR of the PTX tests")
    ap.add_argument("--sm", default="sm_90a")
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build/bench-gpu"))
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    from torch.sparse import to_sparse_semi_structured

    for n in [int(v) for v in a.sizes.split(",") if v]:
        flops = 2 * n ** 3
        row = {"gemm": n}
        onnx_path = gemm_model(n, a.workdir)
        try:
            row["aoc_dense_ms"] = aoc_bench(a.aoc, onnx_path, a.sm, a.iters)["device_p50_ms"]
        except Exception as e:
            row["aoc_dense_error"] = str(e)[-1000:]
        sp_air = os.path.join(a.workdir, f"gemm_{n}.sp.air")
        try:
            sh([a.aoc, "sparsify", onnx_path, "--pattern", "2:4", "-o", sp_air])
            row["aoc_sparsified_ms"] = aoc_bench(a.aoc, sp_air, a.sm, a.iters)["device_p50_ms"]
        except Exception as e:
            row["aoc_sparsified_error"] = str(e)[-1000:]
        if a.ptx:
            sm_dump = "sm_90" if a.sm.startswith("sm_90") else "sm_80"
            tiles, note = aoc_kernel_ms(a.ptx, sm_dump, n, a.iters)
            row["aoc_mma_sp_tiles_ms"], row["aoc_mma_sp_kernel_note"] = tiles, note
            if tiles:
                row["aoc_mma_sp_kernel_ms"] = min(tiles.values())
            if a.sm == "sm_90a":
                tiles, note = aoc_kernel_ms(a.ptx, "sm_90a", n, a.iters, "gemm_sp_wgmma", "spwg_bench")
                row["aoc_wgmma_sp_tiles_ms"], row["aoc_wgmma_sp_kernel_note"] = tiles, note
                if tiles:
                    row["aoc_wgmma_sp_kernel_ms"] = min(tiles.values())
        x = torch.randn(n, n, device="cuda", dtype=torch.float16)
        w = torch.randn(n, n, device="cuda", dtype=torch.float16)
        mask = torch.tensor([0, 0, 1, 1], device="cuda", dtype=torch.bool).tile((n, n // 4))
        w24 = w.masked_fill(~mask, 0)
        row["torch_dense_ms"] = cuda_median_ms(lambda: torch.matmul(x, w.t()), a.iters)
        try:
            ws = to_sparse_semi_structured(w24)
            row["torch_semi_structured_ms"] = cuda_median_ms(lambda: torch.nn.functional.linear(x, ws), a.iters)
        except Exception as e:
            row["torch_semi_structured_error"] = str(e)[-1000:]
        for key in [k for k in list(row) if k.endswith("_ms") and row[k]]:
            row[key.replace("_ms", "_tflops")] = flops / row[key] / 1e9
        kernels = [row[k] for k in ("aoc_mma_sp_kernel_ms", "aoc_wgmma_sp_kernel_ms") if row.get(k)]
        best_sparse = min(kernels) if kernels else None
        if best_sparse and row.get("aoc_dense_ms"):
            row["speedup_2_4_vs_aoc_dense"] = row["aoc_dense_ms"] / best_sparse  # target >= 1.5 at 8192
        if best_sparse and row.get("torch_semi_structured_ms"):
            row["speedup_2_4_vs_torch_semi_structured"] = row["torch_semi_structured_ms"] / best_sparse  # target > 1
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
