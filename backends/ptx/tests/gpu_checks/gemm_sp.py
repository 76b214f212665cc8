#!/usr/bin/env python3
"""Runs the 2:4 sparse GEMM kernels of `kernels::gemm_sp` (`mma.sp`) on a
GPU and compares them with a NumPy reference.

Usage (on a machine with a GPU, CuPy and NumPy):

    AOC_PTX_DUMP_DIR=/tmp/ptx cargo test -p aoc-backend-ptx --test ptx gemm_sp_assembles
    python3 backends/ptx/tests/gpu_checks/gemm_sp.py /tmp/ptx

The test writes `gemm_sp_sm_80.{ptx,txt}` and `gemm_sp_sm_90.{ptx,txt}`:
the module and one manifest line per kernel (m, n, k, grid, block). For
each kernel: random f16 activations x (m × k) and a random weight w
(n × k) pruned to 2:4 by magnitude, compressed exactly as
`aoc_ir::ops::sparse::compress` stores it (each row's kept values, and a
2-bit index per kept value packed from the low bit up, rows one after
another); the kernel's f32 y (m × n) must match x @ wᵀ computed in float64
from the same f16 values within 1e-3 relative to the row's magnitude (f32
accumulation in the tensor core's order). y is surrounded by guard words
that must stay untouched. One PASS/FAIL line per kernel; exit status 1 on
any failure.
"""

import os
import sys

import numpy as np

FAILS = []


def check(what, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + what + ("  " + detail if detail else ""))
    if not ok:
        FAILS.append(what)


def parse(line):
    f = dict(kv.split("=", 1) for kv in line.split())
    return f["name"], int(f["m"]), int(f["n"]), int(f["k"]), tuple(int(v) for v in f["grid"].split(":")), int(f["block"])


def prune_2_4(w):
    """Keeps the 2 largest magnitudes of every 4 along each row (ties to
    the lower index), as aoc_ir::ops::sparse::prune does."""
    n, k = w.shape
    g = w.reshape(n, k // 4, 4)
    order = np.argsort(-np.abs(g), axis=2, kind="stable")[:, :, :2]
    keep = np.sort(order, axis=2)
    mask = np.zeros_like(g, dtype=bool)
    np.put_along_axis(mask, keep, True, axis=2)
    return np.where(mask, g, 0).reshape(n, k), keep


def compress(w, keep):
    """(values n × k/2, metadata bytes) in aoc's stored form."""
    n, k = w.shape
    g = w.reshape(n, k // 4, 4)
    values = np.take_along_axis(g, keep, axis=2).reshape(n, k // 2)
    idx = keep.reshape(-1).astype(np.uint32)  # every kept value's index, in order
    bits = np.zeros(idx.size * 2, np.uint8)
    bits[0::2] = idx & 1
    bits[1::2] = (idx >> 1) & 1
    meta = np.packbits(bits, bitorder="little")
    return values, meta


def run(cp, path, lines, rng):
    mod = cp.RawModule(path=path)
    tag = os.path.basename(path)
    guard = 64
    for line in lines:
        name, m, n, k, grid, block = parse(line)
        x = rng.standard_normal((m, k)).astype(np.float16)
        w = rng.standard_normal((n, k)).astype(np.float16)
        w, keep = prune_2_4(w)
        values, meta = compress(w, keep)
        want = x.astype(np.float64) @ w.astype(np.float64).T
        ybuf = cp.full(m * n + 2 * guard, np.float32(1234.5), dtype=cp.float32)
        dy = ybuf[guard:guard + m * n]
        f = mod.get_function(name)
        f(grid, (block,), (cp.asarray(x.reshape(-1)), cp.asarray(values.reshape(-1)),
                           cp.asarray(meta.view(np.uint8)), dy))
        got_all = ybuf.get()
        got = got_all[guard:guard + m * n].reshape(m, n)
        guards_ok = np.all(got_all[:guard] == np.float32(1234.5)) and np.all(got_all[guard + m * n:] == np.float32(1234.5))
        scale = np.maximum(np.sqrt((want ** 2).mean(axis=1, keepdims=True)), 1e-6) * np.sqrt(k)
        err = np.abs(got - want) / scale
        ok = guards_ok and bool(np.all(err < 1e-3))
        detail = ""
        if not ok:
            i = np.unravel_index(np.argmax(err), err.shape)
            detail = f"max rel err {err.max():.3g} at {i}: got {got[i]} want {want[i]}; guards {'ok' if guards_ok else 'TOUCHED'}"
        check(f"{tag} {name} {m}x{n}x{k}", ok, detail)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    import cupy as cp

    d = sys.argv[1]
    found = False
    for sm in ("sm_80", "sm_90"):
        ptx = os.path.join(d, f"gemm_sp_{sm}.ptx")
        if not os.path.exists(ptx):
            continue
        found = True
        with open(os.path.join(d, f"gemm_sp_{sm}.txt")) as fh:
            lines = [ln for ln in fh.read().splitlines() if ln.strip()]
        run(cp, ptx, lines, np.random.default_rng(20))
    if not found:
        sys.exit(f"no gemm_sp_sm_*.ptx in {d}")
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
