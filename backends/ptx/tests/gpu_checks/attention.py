#!/usr/bin/env python3
"""Runs the fused attention kernels that `kernels_attention.rs` dumps on a GPU.

    AOC_PTX_DUMP_DIR=/tmp/ptx cargo test -p aoc-backend-ptx --test ptx attention_ptx
    python3 backends/ptx/tests/gpu_checks/attention.py /tmp/ptx [sm_90]

For each precision (f32, f16, bf16) it loads `attention-<prec>-<sm>.ptx` and
its manifest `attention-<prec>-<sm>.txt` (one `key=value ...` line per
kernel: shape, strides [b, h, row, feature], scale, grid, block, smem), runs
every kernel on random inputs (masks with -1e4 entries; the `attn_odd` mask
has a fully -inf row, which must give NaN as the CPU softmax does) and
compares with a NumPy float64 reference (inputs rounded to the half type
first for f16/bf16). Prints one PASS/FAIL line per case with the time per
launch; exit status 1 on any failure.
"""

import os
import sys

import cupy as cp
import numpy as np

TOL = {"f32": 2e-4, "f16": 4e-3, "bf16": 3e-2}


def parse(line):
    kv = dict(f.split("=", 1) for f in line.split())
    c = {k: int(kv[k]) for k in ("batch", "heads", "sq", "sk", "d", "dv", "grid", "block", "smem")}
    for k in ("q", "k", "v", "y"):
        c[k] = [int(x) for x in kv[k].split(":")]
    c["mask"] = None if kv["mask"] == "none" else [int(x) for x in kv["mask"].split(":")]
    c["scale"] = float(kv["scale"])
    c["name"], c["prec"] = kv["name"], kv["prec"]
    return c


def span(st, ext):
    return 1 if 0 in ext else sum(s * (e - 1) for s, e in zip(st, ext)) + 1


def view(flat, st, ext):
    return np.lib.stride_tricks.as_strided(flat, shape=ext, strides=[s * flat.itemsize for s in st])


def rounded(x, prec):
    if prec == "f16":
        return x.astype(np.float16).astype(np.float64)
    if prec == "bf16":
        b = x.astype(np.float32).view(np.uint32)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return b.view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def run(mod, c, rng):
    B, H, sq, sk, d, dv = (c[k] for k in ("batch", "heads", "sq", "sk", "d", "dv"))
    ext = {"q": (B, H, sq, d), "k": (B, H, sk, d), "v": (B, H, sk, dv), "y": (B, H, sq, dv)}
    host = {n: rng.uniform(-1, 1, span(c[n], ext[n])).astype(np.float32) for n in "qkv"}
    args = [cp.asarray(host[n]) for n in "qkv"]
    mflat = None
    if c["mask"] is not None:
        mext = (B, H, sq, sk)
        mflat = rng.uniform(-1, 1, span(c["mask"], mext)).astype(np.float32)
        mflat[rng.random(mflat.size) < 0.1] = -1e4
        if c["name"] == "attn_odd":
            view(mflat, c["mask"], mext)[0, 0, 1, :] = -np.inf
        args.append(cp.asarray(mflat))
    y = cp.full(span(c["y"], ext["y"]), 7.5, dtype=cp.float32)
    args.append(y)
    f = mod.get_function(c["name"])
    if c["smem"] > 48 * 1024:
        f.max_dynamic_shared_size_bytes = c["smem"]
    launch = lambda: f((c["grid"],), (c["block"],), tuple(args), shared_mem=c["smem"])
    launch()
    cp.cuda.runtime.deviceSynchronize()
    got = view(y.get(), c["y"], ext["y"]).astype(np.float64)
    q, k, v = (view(rounded(host[n], c["prec"]), c[n], ext[n]) for n in "qkv")
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        s = np.einsum("bhif,bhjf->bhij", q, k) * np.float64(np.float32(c["scale"]))
        if mflat is not None:
            s = s + view(mflat.astype(np.float64), c["mask"], (B, H, sq, sk))
        mx = np.fmax.reduce(s, axis=-1, keepdims=True, initial=-np.inf) if sk else 0.0
        p = np.exp(s - mx)
        p = p / p.sum(axis=-1, keepdims=True)
        want = np.einsum("bhij,bhjf->bhif", p, v)
    nan_ok = np.array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    err = np.abs(got[fin] - want[fin]) / (1 + np.abs(want[fin]))
    worst = float(err.max()) if err.size else 0.0
    ok = nan_ok and worst <= TOL[c["prec"]]
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(20):
        launch()
    end.record()
    end.synchronize()
    us = cp.cuda.get_elapsed_time(start, end) * 1000 / 20
    print(f"{'PASS' if ok else 'FAIL'} {c['prec']} {c['name']}: max rel err {worst:.2e}"
          f"{'' if nan_ok else ' (NaN pattern differs)'}, {us:.1f} us")
    return ok


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    sms = sys.argv[2:] or ["sm_90"]
    rng = np.random.default_rng(0)
    fails = 0
    for sm in sms:
        for prec in ("f32", "f16", "bf16"):
            base = os.path.join(d, f"attention-{prec}-{sm}")
            mod = cp.RawModule(path=base + ".ptx")
            for line in open(base + ".txt"):
                if line.strip() and not run(mod, parse(line), rng):
                    fails += 1
    print(f"{fails} failure(s)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
