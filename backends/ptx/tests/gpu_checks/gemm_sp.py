#!/usr/bin/env python3
"""Runs the 2:4 sparse GEMM kernels of `kernels::gemm_sp` (`mma.sp`,
`wgmma.sp`) on a GPU and compares them with a NumPy reference.

Usage (on a machine with a GPU, CuPy and NumPy):

    AOC_PTX_DUMP_DIR=/tmp/ptx cargo test --release -p aoc-backend-ptx --test ptx gemm_sp
    python3 backends/ptx/tests/gpu_checks/gemm_sp.py /tmp/ptx [--time] [--wgmma]

`--wgmma` runs only the sm_90a `wgmma.sp` kernels (H100/H200).

Three kernel families:

- the reference kernel (`gemm_sp_f16`): `gemm_sp_sm_{80,90}.{ptx,txt}`,
  described below;
- the tiled kernel the compiler uses (`gemm_sp_tiled`):
  `gemm_sp_tiled_sm_{80,90}.{ptx,txt}`, manifest keys m n k lda ldc bias
  relu bm bn bk stages minblocks grid block smem. x is m × lda f16 whose columns
  past k hold NaN (a read of them poisons the result); the weight is
  packed as `gemm_sp::tiled::pack_weight` documents (values n_pad × k_pad/2,
  metadata per 16 features and 32 of k the 64 bytes the instruction's
  lanes read); y is m × ldc f32 whose columns past n, and guard words
  around it, must stay untouched; bias and relu as the manifest says.
  With `--time`, every tiled kernel of 2·m·n·k ≥ 2^32 is timed (CUDA
  events, median of 20) against cuBLAS's dense f16 matmul (CuPy) of the
  same shape and, where PyTorch is installed, PyTorch's semi-structured
  sparse matmul (`to_sparse_semi_structured`) on the same pruned weight,
  in TFLOP/s counted as dense.
- the sm_90a kernel on `wgmma.mma_async.sp` (`gemm_sp_wgmma`), run only on
  an sm_90 GPU: `gemm_sp_wgmma_sm_90a.{ptx,txt}`, the same manifest keys,
  ABI and checks as the tiled kernel (the weight packed the same way,
  padded to 128 features and 128 of k). The module also holds aoc's dense
  `gemm_wgmma` kernel of each benchmark shape
  (`gemm_sp_wgmma_dense_sm_90a.txt`); with `--time` each timed sparse
  kernel is also compared with it (x · wᵀ with wᵀ packed as
  `gemm_wgmma::pack_b` lays it out, as `gemm_wgmma.py` does), same run.

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


def pack_tiled(w, keep, bm, bk):
    """(values n_pad × k_pad/2 f16, metadata u32) as
    gemm_sp::tiled::pack_weight lays them out, from the pruned weight and
    its kept indices (ascending, two per group of four)."""
    n, k = w.shape
    n_pad, k_pad = -(-n // bm) * bm, -(-k // bk) * bk
    g = w.reshape(n, k // 4, 4)
    kp = np.tile(np.array([0, 1], np.int64), (n_pad, k_pad // 4, 1))
    kp[:n, : k // 4] = keep
    values = np.zeros((n_pad, k_pad // 2), np.float16)
    values[:n, : k // 2] = np.take_along_axis(g, keep, axis=2).reshape(n, k // 2)
    kt32 = k_pad // 32
    idx = kp.reshape(n_pad, kt32, 16).astype(np.uint64)
    words = (idx << (2 * np.arange(16, dtype=np.uint64))).sum(axis=2).astype(np.uint32)
    f = words.reshape(n_pad // 16, 16, kt32)
    lo = f[:, :8, :].transpose(0, 2, 1)
    hi = f[:, 8:, :].transpose(0, 2, 1)
    meta = np.empty((n_pad // 16, kt32, 8, 2), np.uint32)
    for p in range(2):
        meta[..., p] = ((lo >> (16 * p)) & 0xFFFF) | (((hi >> (16 * p)) & 0xFFFF) << 16)
    return values, meta.reshape(-1)


def time_ms(cp, fn, iters=20):
    for _ in range(3):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    times = []
    for _ in range(iters):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(times))


def aoc_dense_ms(cp, mod, f, x, w):
    """Milliseconds of aoc's dense wgmma kernel `f` (a manifest line's
    fields) on x (m × k f16) and wᵀ, packed for its tile."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemm_wgmma import pack_b  # noqa: E402 - needs cupy, only on the GPU machine

    m, n, k, bn = (int(f[key]) for key in ("m", "n", "k", "bn"))
    a = cp.asarray(np.ascontiguousarray(x[:, :k]))
    bbits = cp.asarray(np.ascontiguousarray(w.T)).view(cp.uint16)
    packed = pack_b(bbits, k, n, bn, cp)
    c = cp.empty((m, n), cp.float32)
    fn = mod.get_function(f["name"])
    smem = int(f["smem"])
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    return time_ms(cp, lambda: fn((int(f["grid"]), 1, 1), (int(f["block"]), 1, 1), (a, packed, c), shared_mem=smem))


def torch_sparse_ms(x, w, k):
    """Milliseconds of PyTorch's 2:4 semi-structured matmul (cuSPARSELt or
    CUTLASS, `torch.sparse.to_sparse_semi_structured`) on the same pruned
    weight: yᵀ = W · xᵀ, the sparse operand first as PyTorch requires, the
    dense one contiguous; median of 20 after warm-up, CUDA events. None
    (with the reason) where PyTorch or its sparse kernels are missing."""
    try:
        import torch
        from torch.sparse import to_sparse_semi_structured

        ws = to_sparse_semi_structured(torch.from_numpy(np.ascontiguousarray(w)).cuda())
        xt = torch.from_numpy(np.ascontiguousarray(x[:, :k].T)).cuda()
        for _ in range(3):
            torch.mm(ws, xt)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.mm(ws, xt)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return float(np.median(times)), None
    except Exception as e:  # no torch, no sparse kernels for this GPU or shape
        return None, f"{type(e).__name__}: {e}"


def run_tiled(cp, path, lines, rng, timing, dense_aoc=None):
    mod = cp.RawModule(path=path)
    tag = os.path.basename(path)
    guard = 64
    sentinel = np.float32(1234.5)
    cache = {}
    for line in lines:
        f = dict(kv.split("=", 1) for kv in line.split())
        name = f["name"]
        m, n, k, lda, ldc = (int(f[x]) for x in ("m", "n", "k", "lda", "ldc"))
        bias, relu = f["bias"] == "1", f["relu"] == "1"
        bm, bk, smem, grid, block = int(f["bm"]), int(f["bk"]), int(f["smem"]), int(f["grid"]), int(f["block"])
        big = m * n * k > 2 ** 30
        # One problem per shape, shared by its tiles (8192² weights take
        # seconds to prune).
        key = (m, n, k, lda)
        if key not in cache:
            x = np.full((m, lda), np.nan, np.float16)
            x[:, :k] = rng.standard_normal((m, k)).astype(np.float16)
            w, keep = prune_2_4(rng.standard_normal((n, k)).astype(np.float16))
            cache.clear()
            cache[key] = (x, w, keep, rng.standard_normal(n).astype(np.float32))
        x, w, keep, b = cache[key]
        values, meta = pack_tiled(w, keep, bm, bk)
        fn = mod.get_function(name)
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        ybuf = cp.full(m * ldc + 2 * guard, sentinel, dtype=cp.float32)
        dy = ybuf[guard:guard + m * ldc]
        args = [cp.asarray(x.reshape(-1)), cp.asarray(values.reshape(-1)), cp.asarray(meta)]
        if bias:
            args.append(cp.asarray(b))
        args.append(dy)
        launch = lambda: fn((grid, 1, 1), (block, 1, 1), tuple(args), shared_mem=smem)  # noqa: E731
        launch()
        cp.cuda.runtime.deviceSynchronize()
        got_all = ybuf.get()
        got = got_all[guard:guard + m * ldc].reshape(m, ldc)
        guards_ok = bool(np.all(got_all[:guard] == sentinel) and np.all(got_all[guard + m * ldc:] == sentinel) and np.all(got[:, n:] == sentinel))
        # Big products: 64 sampled rows (the float64 reference of 8192³ is slow).
        rows = np.sort(rng.choice(m, 64, replace=False)) if big else np.arange(m)
        want = x[rows, :k].astype(np.float64) @ w.astype(np.float64).T
        if bias:
            want = want + b
        if relu:
            want = np.maximum(want, 0)
        g = got[rows, :n]
        scale = np.maximum(np.sqrt((want ** 2).mean(axis=1, keepdims=True)), 1e-6) * np.sqrt(k / 64)
        err = np.abs(g - want) / scale
        ok = guards_ok and bool(np.all(np.isfinite(g))) and bool(np.all(err < 1e-3))
        detail = f"bm={bm} bn={f['bn']} bk={bk} stages={f['stages']} minblocks={f.get('minblocks', '1')}"
        if "staged" in f:
            detail += f" staged={f['staged']}"
        if not ok:
            i = np.unravel_index(np.nanargmax(np.where(np.isfinite(err), err, np.inf)), err.shape)
            detail += f"  max rel err {np.nanmax(err):.3g} at row {rows[i[0]]} feature {i[1]}: got {g[i]} want {want[i]}; guards {'ok' if guards_ok else 'TOUCHED'}"
        if ok and timing and 2 * m * n * k >= 2 ** 32:
            ms = time_ms(cp, launch)
            xd = cp.asarray(x[:, :k].copy())
            wd = cp.asarray(w)
            dense = time_ms(cp, lambda: cp.matmul(xd, wd.T))
            fl = 2 * m * n * k
            detail += f"  {ms:.3f} ms {fl / ms / 1e9:.0f} TFLOP/s; cuBLAS dense f16 {dense:.3f} ms {fl / dense / 1e9:.0f} TFLOP/s; sparse/dense speedup {dense / ms:.2f}x"
            d = (dense_aoc or {}).get((m, n, k))
            if d is not None:
                ad = aoc_dense_ms(cp, mod, d, x, w)
                detail += f"; aoc dense wgmma {ad:.3f} ms {fl / ad / 1e9:.0f} TFLOP/s; sparse/aoc-dense speedup {ad / ms:.2f}x"
            ts, why = torch_sparse_ms(x, w, k)
            if ts is not None:
                detail += f"; torch semi-structured {ts:.3f} ms {fl / ts / 1e9:.0f} TFLOP/s; aoc/torch speedup {ts / ms:.2f}x"
            else:
                detail += f"; torch semi-structured not timed ({why})"
        check(f"{tag} {name} {m}x{n}x{k}", ok, detail)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    timing = "--time" in sys.argv
    if len(args) != 1:
        sys.exit(__doc__)
    import cupy as cp

    d = args[0]
    found = False
    wg = os.path.join(d, "gemm_sp_wgmma_sm_90a.ptx")
    if os.path.exists(wg):
        cc = cp.cuda.Device().compute_capability
        if cc != "90":
            print(f"skipping {wg}: wgmma.sp needs an sm_90 GPU (H100/H200), found compute capability {cc}")
        else:
            found = True
            with open(os.path.join(d, "gemm_sp_wgmma_sm_90a.txt")) as fh:
                lines = [ln for ln in fh.read().splitlines() if ln.strip()]
            dense = {}
            dpath = os.path.join(d, "gemm_sp_wgmma_dense_sm_90a.txt")
            if os.path.exists(dpath):
                for ln in open(dpath).read().splitlines():
                    if ln.strip():
                        f = dict(kv.split("=", 1) for kv in ln.split())
                        dense[(int(f["m"]), int(f["n"]), int(f["k"]))] = f
            run_tiled(cp, wg, lines, np.random.default_rng(22), timing, dense)
    if "--wgmma" in sys.argv:
        if not found:
            sys.exit(f"no runnable gemm_sp_wgmma_sm_90a.ptx in {d}")
        print(f"{len(FAILS)} failed" if FAILS else "all passed")
        sys.exit(1 if FAILS else 0)
    for sm in ("sm_80", "sm_90"):
        ptx = os.path.join(d, f"gemm_sp_tiled_{sm}.ptx")
        if not os.path.exists(ptx):
            continue
        found = True
        with open(os.path.join(d, f"gemm_sp_tiled_{sm}.txt")) as fh:
            lines = [ln for ln in fh.read().splitlines() if ln.strip()]
        run_tiled(cp, ptx, lines, np.random.default_rng(21), timing)
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
