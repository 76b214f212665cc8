#!/usr/bin/env python3
"""Runs the PTX modules that `tests/ptx.rs` dumps on a GPU and checks them.

Usage (on a machine with a GPU, CuPy and NumPy; PyTorch optional, for the
cuBLAS comparison):

    AOC_PTX_DUMP_DIR=/tmp/ptx cargo test -p aoc-backend-ptx --test ptx ptxas
    python3 backends/ptx/tests/gpu_check.py /tmp/ptx [sm_86 sm_90 ...]

This is a manual check of the generated kernels until the CUDA runtime
(`aoc-runtime`, cudarc) runs them in its own tests. It knows the test
kernels by name (`un_exp`, `bin_pow`, `pw_add_bias`, `cast_*`, the GEMM
entries) and computes their expected results with NumPy in float64. Exit
status 1 on any mismatch.
"""

import math
import os
import re
import sys

import cupy as cp
import numpy as np

FAILS = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("  " + detail if detail else ""))
    if not ok:
        FAILS.append(what)


def launch_pw(mod, name, arrays, n, vector):
    f = mod.get_function(name)
    items = (n + 3) // 4 if vector else n
    block = 256
    grid = max(1, min((items + block - 1) // block, 4096))
    f((grid,), (block,), tuple(arrays) + (np.int64(n),))


def special_f32(n, rng):
    spec = np.array(
        [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, np.inf, -np.inf, np.nan,
         1e-40, -1e-40, 1e-30, 88.0, 88.7, 89.0, -87.0, -103.0, -104.0, 1e30, -1e30,
         0.4, 0.39999, 0.40001, 0.49999, 0.5001, 3.9, 4.1, 1.0001, 0.9999, 2.0, -2.0,
         1e-5, -1e-5, 8388609.0, 16777217.0],
        dtype=np.float32,
    )
    mags = rng.uniform(-30, 30, size=n).astype(np.float64)
    x = (np.sign(rng.standard_normal(n)) * np.exp(mags / 4)).astype(np.float32)
    x[: len(spec)] = spec
    x[len(spec): len(spec) + 1000] = rng.uniform(-6, 6, 1000).astype(np.float32)
    return x


def erf64(x):
    return np.array([math.erf(v) if not math.isnan(v) else math.nan for v in x])


def unary_ref(op, x):
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return {
            "neg": -x,
            "abs": np.abs(x),
            "exp": np.exp(x),
            "log": np.log(x),
            "sqrt": np.sqrt(x),
            "rsqrt": 1 / np.sqrt(x),
            "reciprocal": 1 / x,
            "erf": erf64(x),
            "tanh": np.tanh(x),
            "sigmoid": 1 / (1 + np.exp(-x)),
            "floor": np.floor(x),
            "ceil": np.ceil(x),
            "trunc": np.trunc(x),
            "roundeven": np.rint(x),
            "relu": np.where(x < 0, 0.0, x),
            "sin": np.sin(x),
            "cos": np.cos(x),
        }[op]


def binary_ref(op, a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    with np.errstate(all="ignore"):
        return {
            "add": a + b,
            "sub": a - b,
            "mul": a * b,
            "div": a / b,
            "max": np.where(np.isnan(a), a, np.where(a >= b, a, b)),
            "min": np.where(np.isnan(a), a, np.where(a <= b, a, b)),
            "pow": np.power(a, b),
            "equal": (a == b).astype(np.float64),
            "less": (a < b).astype(np.float64),
            "greater": (a > b).astype(np.float64),
        }[op]


# Allowed error, in units of 2^-23 relative to the exact value (or absolute
# for erf), per op; the rest must be exact (after f32 rounding).
ULPS = {"exp": 4, "log": 4, "tanh": 6, "sigmoid": 6, "pow": 200, "rsqrt": 2}


def compare_f32(what, got, ref, ulps=0, abs_tol=0.0):
    ref32 = ref.astype(np.float32)
    got64 = got.astype(np.float64)
    both_nan = np.isnan(got64) & np.isnan(ref)
    same = (got64 == ref32.astype(np.float64)) | both_nan
    with np.errstate(all="ignore"):
        err = np.abs(got64 - ref)
        tol = np.maximum(np.abs(ref) * ulps * 2.0**-23, abs_tol)
        tol = np.maximum(tol, np.abs(ref32.astype(np.float64) - ref))
        close = np.isfinite(ref) & (err <= tol)
    bad = ~(same | close)
    detail = ""
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        detail = "; ".join(f"x[{j}]: got {got[j]!r} want {ref[j]!r}" for j in i)
    else:
        with np.errstate(all="ignore"):
            fin = np.isfinite(ref32) & (ref != 0)
            rel = (err[fin] / np.abs(ref[fin])).max() if fin.any() else 0.0
        detail = f"max rel err {rel:.2e}"
    check(what, not bad.any(), detail)


def pointwise(path, sm):
    mod = cp.RawModule(path=path)
    rng = np.random.default_rng(1)
    n = 4096
    x = special_f32(n, rng)
    for op in ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "erf", "tanh",
               "sigmoid", "floor", "ceil", "trunc", "roundeven", "relu", "sin", "cos"]:
        out = cp.empty(n, dtype=cp.float32)
        launch_pw(mod, "un_" + op, [cp.asarray(x), out], n, True)
        ref = unary_ref(op, x)
        if op == "erf":
            compare_f32(f"{sm} un_erf", out.get(), ref, abs_tol=2.5e-7)
        elif op in ("sin", "cos"):
            # Within 1e-7 where the reduction keeps its bits (|x| below
            # 1e6); beyond, only bounded; inf and NaN give NaN.
            got = out.get()
            near = np.abs(x) < 1e6
            compare_f32(f"{sm} un_{op} (|x| < 1e6)", got[near], ref[near], abs_tol=3e-7)
            far = ~near & np.isfinite(x)
            check(f"{sm} un_{op} far arguments stay in [-1, 1]", bool(np.all(np.abs(got[far]) <= 1.0)))
            check(f"{sm} un_{op} of inf and NaN is NaN", bool(np.all(np.isnan(got[~np.isfinite(x)]))))
        else:
            compare_f32(f"{sm} un_{op}", out.get(), ref, ulps=ULPS.get(op, 0))
    a = special_f32(n, rng)
    b = np.roll(special_f32(n, np.random.default_rng(2)), 7)
    b[3000:3100] = np.round(b[3000:3100])  # integer exponents for pow
    b[3100:3200] = a[3100:3200]  # ties for max/min/eq
    for op in ["add", "sub", "mul", "div", "max", "min", "pow", "equal", "less", "greater"]:
        out = cp.empty(n, dtype=cp.float32)
        launch_pw(mod, "bin_" + op, [cp.asarray(a), cp.asarray(b), out], n, True)
        ref = binary_ref(op, a, b)
        if op == "pow":
            # exp(b·log a) loses accuracy in proportion to |b·log a|.
            with np.errstate(all="ignore"):
                t = np.abs(b.astype(np.float64) * np.log(np.abs(a.astype(np.float64))))
            ok = ~np.isfinite(t) | (t < 10)
            got = out.get()
            compare_f32(f"{sm} bin_pow (|b log a| < 10)", got[ok], ref[ok], ulps=ULPS["pow"])
        else:
            compare_f32(f"{sm} bin_{op}", out.get(), ref)
    # Max/min ties keep the first argument: -0.0 vs 0.0.
    z = np.array([-0.0, 0.0, -0.0, 0.0] * 1024, dtype=np.float32)
    zb = np.array([0.0, -0.0, -0.0, 0.0] * 1024, dtype=np.float32)
    for op in ["max", "min"]:
        out = cp.empty(n, dtype=cp.float32)
        launch_pw(mod, "bin_" + op, [cp.asarray(z), cp.asarray(zb), out], n, True)
        check(f"{sm} bin_{op} tie keeps the first", np.array_equal(np.signbit(out.get()), np.signbit(z)))

    xs = rng.standard_normal((8, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    out = cp.empty((8, 64), dtype=cp.float32)
    launch_pw(mod, "pw_add_bias", [cp.asarray(xs), cp.asarray(bias), out], 512, True)
    check(f"{sm} pw_add_bias", np.array_equal(out.get(), xs + bias))
    xs = rng.standard_normal((4, 6)).astype(np.float32)
    s = rng.standard_normal(4).astype(np.float32)
    out = cp.empty((4, 6), dtype=cp.float32)
    launch_pw(mod, "pw_scale_rows", [cp.asarray(xs), cp.asarray(s), out], 24, False)
    check(f"{sm} pw_scale_rows", np.array_equal(out.get(), xs * s[:, None]))

    # pw_all_ops: x f16 with strides [1, 21, 3] over [3, 5, 7]; the result
    # select(acc, x, y) is x wherever acc != 0 (or NaN), stored as bf16.
    xbuf = rng.uniform(0.5, 2.0, 105).astype(np.float16)
    ybuf = (rng.uniform(0.5, 2.0, 21).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    out = cp.empty((3, 5, 7), dtype=cp.uint16)
    launch_pw(mod, "pw_all_ops", [cp.asarray(xbuf), cp.asarray(ybuf), out], 105, False)
    i, j, l = np.meshgrid(range(3), range(5), range(7), indexing="ij")
    xv = xbuf[i * 1 + j * 21 + l * 3].astype(np.float32)
    back = (out.get().astype(np.uint32) << 16).view(np.float32)
    want = (to_bf16_bits(xv).astype(np.uint32) << 16).view(np.float32)
    ok = np.array_equal(back, want)
    check(f"{sm} pw_all_ops layout", ok, "" if ok else f"{back.ravel()[:6]} vs {want.ravel()[:6]}")

    casts(mod, sm)


DTYPES = {
    "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": None,
    "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
    "u64": np.uint64, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8, "i1": np.bool_,
}


def to_bf16_bits(x32):
    b = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x32)
    r[nan] = ((b[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def store_ref(name, v):
    """f32 values `v` stored as type `name`, per the kernel semantics."""
    if name == "bf16":
        return to_bf16_bits(v)
    if name == "i1":
        return (v != 0) | np.isnan(v)
    t = DTYPES[name]
    if np.issubdtype(t, np.floating):
        return v.astype(t)
    info = np.iinfo(t)
    with np.errstate(all="ignore"):
        tr = np.trunc(v.astype(np.float64))
        tr = np.where(np.isnan(tr), 0, tr)
        # f32 -> integer saturates at the f32-representable bound.
        return np.clip(tr, float(info.min), float(info.max))


def casts(mod, sm):
    names = [n for n in DTYPES]
    vals = np.array([0.0, 1.0, -1.0, 2.7, -2.7, 127.9, 300.5, -300.5, 70000.0, 1e10], dtype=np.float64)
    for frm, to in zip(names, names[1:] + names[:1]):
        name = f"cast_{frm}_{to}"
        if frm == "bf16":
            src = to_bf16_bits(vals.astype(np.float32))
            loaded = (src.astype(np.uint32) << 16).view(np.float32)
        elif frm == "i1":
            src = (vals != 0)
            loaded = src.astype(np.float32)
        elif np.issubdtype(DTYPES[frm], np.integer):
            info = np.iinfo(DTYPES[frm])
            src = np.clip(vals, info.min, info.max).astype(DTYPES[frm])
            loaded = src.astype(np.float32)
        else:
            src = vals.astype(DTYPES[frm])
            loaded = src.astype(np.float32)
        out_t = np.uint16 if to == "bf16" else DTYPES[to]
        out = cp.zeros(10, dtype=out_t)
        launch_pw(mod, name, [cp.asarray(src), out], 10, False)
        want = store_ref(to, -loaded)
        got = out.get()
        ok = np.array_equal(got.astype(np.float64), np.asarray(want).astype(np.float64))
        check(f"{sm} {name}", ok, "" if ok else f"got {got} want {want}")


def gemm(path, sm, tile):
    bm, bn, bk, wm, wn, stages = tile
    threads = 32 * wm * wn
    mod = cp.RawModule(path=path)
    smem = stages * (bm * (bk + 8) + bk * (bn + 8)) * 2
    rng = np.random.default_rng(3)
    cases = [
        # m, n, k, batch, lda_pad, bias, relu, out
        (128, 128, 32, 1, 0, False, False, "f32"),
        (1000, 300, 77, 1, 0, True, False, "f32"),
        (1000, 304, 80, 1, 0, True, True, "f16"),
        (33, 72, 1000, 2, 0, False, True, "f32"),
        (1, 8, 16, 1, 0, True, False, "f16"),
        (257, 129, 4100, 1, 4, False, False, "f32"),
        (257, 136, 4100, 1, 4, True, False, "f32"),
        (64, 64, 0, 1, 0, True, True, "f32"),
    ]
    for m, n, k, batch, pad, use_bias, relu, out in cases:
        lda, ldb, ldc = k + pad, n, n + 3
        A = rng.uniform(-1, 1, (batch, m, lda)).astype(np.float16)
        B = rng.uniform(-1, 1, (batch, k, ldb)).astype(np.float16)
        bias = rng.uniform(-1, 1, n).astype(np.float32)
        ot = np.float32 if out == "f32" else np.float16
        C = cp.full((batch, m, ldc), np.nan, dtype=ot)
        name = f"gemm_f16_{bm}x{bn}x{bk}_w{wm}x{wn}_s{stages}_{out}{'_relu' if relu else ''}"
        f = mod.get_function(name)
        f.max_dynamic_shared_size_bytes = smem
        grid = ((n + bn - 1) // bn, (m + bm - 1) // bm, batch)
        f(grid, (threads,), (cp.asarray(A), cp.asarray(B),
                         cp.asarray(bias) if use_bias else np.uint64(0), C,
                         np.int32(m), np.int32(n), np.int32(k), np.int32(lda), np.int32(ldb),
                         np.int32(ldc), np.int64(m * lda), np.int64(k * ldb), np.int64(m * ldc)),
          shared_mem=smem)
        got = C.get()
        A32 = A[:, :, :k].astype(np.float64)
        B32 = B[:, :, :n].astype(np.float64)
        ref = A32 @ B32 + (bias if use_bias else 0)
        if relu:
            ref = np.where(ref < 0, 0, ref)
        scale = np.abs(A32) @ np.abs(B32) + 1
        tol = (1e-5 if out == "f32" else 1e-3) * scale + (0 if out == "f32" else 1e-3 * np.abs(ref))
        g = got[:, :, :n].astype(np.float64)
        ok = np.all(np.abs(g - ref) <= tol) and np.all(np.isnan(got[:, :, n:]))
        what = f"{sm} {name} m={m} n={n} k={k} batch={batch} lda={lda}"
        detail = "" if ok else f"max err {np.nanmax(np.abs(g - ref)):.3g}, nan in range {np.isnan(g).sum()}, pad touched {(~np.isnan(got[:, :, n:])).sum()}"
        check(what, ok, detail)


def bench(path, sm, tile):
    bm, bn, bk, wm, wn, stages = tile
    threads = 32 * wm * wn
    mod = cp.RawModule(path=path)
    smem = stages * (bm * (bk + 8) + bk * (bn + 8)) * 2
    f = mod.get_function(f"gemm_f16_{bm}x{bn}x{bk}_w{wm}x{wn}_s{stages}_f16")
    f.max_dynamic_shared_size_bytes = smem
    for size in [4096, 8192]:
        A = cp.random.uniform(-1, 1, (size, size)).astype(cp.float16)
        B = cp.random.uniform(-1, 1, (size, size)).astype(cp.float16)
        C = cp.empty((size, size), dtype=cp.float16)
        args = (A, B, np.uint64(0), C, np.int32(size), np.int32(size), np.int32(size),
                np.int32(size), np.int32(size), np.int32(size), np.int64(0), np.int64(0), np.int64(0))
        grid = ((size + bn - 1) // bn, (size + bm - 1) // bm, 1)
        for _ in range(3):
            f(grid, (threads,), args, shared_mem=smem)
        s, e = cp.cuda.Event(), cp.cuda.Event()
        reps = 10
        s.record()
        for _ in range(reps):
            f(grid, (threads,), args, shared_mem=smem)
        e.record()
        e.synchronize()
        ms = cp.cuda.get_elapsed_time(s, e) / reps
        tf = 2 * size**3 / ms / 1e9
        line = f"{sm} gemm {bm}x{bn}x{bk} w{wm}x{wn} s{stages} {size}^3 f16: {ms:.3f} ms, {tf:.1f} TFLOP/s"
        try:
            import torch

            ta = torch.as_tensor(A, device="cuda")
            tb = torch.as_tensor(B, device="cuda")
            for _ in range(3):
                torch.matmul(ta, tb)
            ts, te = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ts.record()
            for _ in range(reps):
                torch.matmul(ta, tb)
            te.record()
            torch.cuda.synchronize()
            tms = ts.elapsed_time(te) / reps
            line += f"; cuBLAS {tms:.3f} ms, {2 * size**3 / tms / 1e9:.1f} TFLOP/s, ratio {tf / (2 * size**3 / tms / 1e9):.2f}"
        except ImportError:
            pass
        print(line)


def main():
    d = sys.argv[1]
    sms = sys.argv[2:] or ["sm_86", "sm_90", "sm_90a"]
    for sm in sms:
        p = os.path.join(d, f"pointwise-{sm}.ptx")
        if os.path.exists(p):
            pointwise(p, sm)
        for fn in sorted(os.listdir(d)):
            mt = re.fullmatch(r"gemm_(\d+)x(\d+)x(\d+)_w(\d+)x(\d+)_s(\d+)-" + sm + r"\.ptx", fn)
            if mt:
                tile = tuple(int(g) for g in mt.groups())
                gemm(os.path.join(d, fn), sm, tile)
                if tile[0] == 128 and sm in ("sm_86", "sm_90"):
                    bench(os.path.join(d, fn), sm, tile)
    print(f"{len(FAILS)} failures")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
