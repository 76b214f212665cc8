#!/usr/bin/env python3
"""Runs the fp8 (e4m3) convolution kernels of `kernels::gemm_wgmma`
(`qconv_wgmma` with `QuantElem::E4M3`: `wgmma` m64nNk32 `.f32.e4m3.e4m3`,
f32 accumulation, the e4m3 requantizing epilogue) on an sm_90 GPU and
compares them with NumPy.

Usage (on a machine with an H100/H200, CuPy and NumPy):

    AOC_PTX_DUMP_DIR=/tmp/ptx cargo test -p aoc-backend-ptx --test ptx qconv_wgmma_fp8_assembles
    python3 backends/ptx/tests/gpu_checks/gemm_fp8.py /tmp/ptx

The test writes `gemm_fp8_sm_90a.{ptx,txt}` (the manifest lines are
`gemm_s8.py`'s; `x_signed`, `x_zero`, `y_signed`, `y_zero` are 0, `y_min`
and `y_max` the clamp in e4m3 values, or for `out=f32` kernels — the
float-result form, `QuantElem::E4M3ToF32` — in real values, ±2^31-1
meaning none). For each kernel: x and w exact
e4m3 values (random codes of magnitude at most 8, NaN excluded), weights
packed as `pack_weights_wg` lays them out; scale and shift (f32) spread
the results over the whole e4m3 range and past it (saturation). The
reference accumulates exactly in float64, then computes as the kernel's
epilogue does: float32(acc), fma(acc, scale, shift) with one rounding,
the clamp, e4m3 rounding to nearest even with saturation. The check:
every output byte within one e4m3 step of the epilogue of some
accumulator within acc ± b·Σ|x·w| of the exact one (b = `acc_bound(K)`,
below), at least 97% of them equal to the reference, guard bytes around
y untouched. A second check per kernel
runs it with an identity requantization (scale 1, shift 0) on inputs
small enough that every accumulator is exact in e4m3 (one nonzero
product per output): those must be bit exact. One PASS/FAIL line per
kernel; exit status 1 on any failure.

`out=f32` kernels store fma(acc, scale, shift) (clamped) as f32: compared
with the exact float64 value within b·Σ|x·w|·|scale| plus 1e-6 of |shift|.

The accumulator bound b: Hopper's fp8 tensor cores add the 32 products of
one `wgmma` k32 instruction with fewer mantissa bits than f32 (about 13,
aligned to the largest), which no promotion removes: on the H200 a single
instruction (K = 32) is off by up to 2^-11.5 of Σ|x·w|, so b = 2^-10. The
kernel promotes every k-tile (128 products) into f32, so the error does
not grow with K: for K ≥ 1024, b = 2^-12 (measured 2^-13.3 at K = 2448).

With `--time`, the `f8t_` kernels (n³ GEMMs as 1×1 convolutions, e4m3
out) are checked on 256 sampled rows the same way and timed (CUDA events,
median of 20) against `torch._scaled_mm` on the same e4m3 codes.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_s8 import fma32, pack_wg, parse  # noqa: E402

FAILS = []
TIMED = []
WORST = []


def check(what, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + what + ("  " + detail if detail else ""))
    if not ok:
        FAILS.append(what)


def e4m3_table():
    """The value of every e4m3 (E4M3FN) code: 1 sign, 4 exponent (bias 7),
    3 mantissa bits; 0x7F and 0xFF are NaN, no infinities."""
    v = np.zeros(256, np.float64)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            v[c] = np.nan
            continue
        mag = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        v[c] = -mag if s else mag
    return v


E4M3 = e4m3_table()
POS = E4M3[:0x7F]  # codes 0 … 0x7E, increasing


def to_e4m3(v):
    """float values → e4m3 codes: nearest, ties to the even code (the even
    mantissa), saturating to ±448, NaN to 0x7F."""
    v = np.asarray(v, np.float64)
    a = np.minimum(np.abs(v), 448.0)
    hi = np.clip(np.searchsorted(POS, a, side="left"), 0, len(POS) - 1)
    lo = np.maximum(hi - 1, 0)
    dl, dh = a - POS[lo], POS[hi] - a
    pick = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
    pick = np.where(a == POS[hi], hi, pick)
    code = pick.astype(np.uint8) | np.where(np.signbit(v) & (pick > 0), 0x80, 0).astype(np.uint8)
    return np.where(np.isnan(v), 0x7F, code).astype(np.uint8)


def ordinal(codes):
    """e4m3 codes as signed ordinals: adjacent values differ by one."""
    c = codes.astype(np.int64)
    return np.where(c & 0x80, -(c & 0x7F), c)


def conv64(s, x, w):
    """x (NHWC floats), w (oc, kh, kw, c floats): the exact float64
    convolution with zero padding, as an (M, oc) matrix."""
    n, h, wd, c, oh, ow, oc = (s[k] for k in "n h w c oh ow oc".split())
    kh, kw, sh, sw, dh, dw = (s[k] for k in "kh kw sh sw dh dw".split())
    ext_h = max(h + s["pt"], (oh - 1) * sh + (kh - 1) * dh + 1) - h - s["pt"]
    ext_w = max(wd + s["pl"], (ow - 1) * sw + (kw - 1) * dw + 1) - wd - s["pl"]
    xp = np.zeros((n, s["pt"] + h + ext_h, s["pl"] + wd + ext_w, c), np.float64)
    xp[:, s["pt"]:s["pt"] + h, s["pl"]:s["pl"] + wd, :] = x
    m = n * oh * ow
    cols = []
    for ky in range(kh):
        for kx in range(kw):
            sl = xp[:, ky * dh:ky * dh + (oh - 1) * sh + 1:sh, kx * dw:kx * dw + (ow - 1) * sw + 1:sw, :]
            cols.append(sl.reshape(m, c))
    a = np.concatenate(cols, axis=1) if cols else np.zeros((m, 0))
    return a @ w.reshape(oc, kh * kw * c).T


def acc_bound(k):
    """The accumulator error allowed, as a fraction of Σ|x·w| (module doc):
    2^-10 for the truncation inside one `wgmma` k32 instruction, 2^-12
    where k ≥ 1024 (eight or more promoted k-tiles)."""
    return 2.0 ** -12 if k >= 1024 else 2.0 ** -10


def epilogue(s, acc, scale, shift):
    """fma(float32(acc), scale, shift) with one rounding, the clamp, e4m3."""
    v = fma32(acc.astype(np.float32), scale[None, :], shift[None, :])
    return to_e4m3(np.clip(v, np.float32(s["y_min"]), np.float32(s["y_max"])))


def reference(s, x, w, scale, shift):
    """The exact convolution, then the e4m3 epilogue; e4m3 codes."""
    return epilogue(s, conv64(s, x, w), scale, shift)


def e4m3_check(s, got, acc, mag, scale, shift, k):
    """got (e4m3 codes, rows × oc) against the exact accumulators `acc`
    and Σ|x·w| `mag`: each output within one e4m3 step of the epilogue of
    some accumulator within acc ± acc_bound(k)·mag, and at least 97% of
    them the epilogue of acc itself. Returns (ok, detail)."""
    want = epilogue(s, acc, scale, shift)
    d = acc_bound(k) * mag
    ends = [ordinal(epilogue(s, acc + sgn * d, scale, shift)) for sgn in (-1.0, 1.0)]
    lo, hi = np.minimum(*ends) - 1, np.maximum(*ends) + 1
    og = ordinal(got)
    inside = (og >= lo) & (og <= hi)
    steps = np.abs(og - ordinal(want))
    equal = float(np.mean(steps == 0))
    ok = bool(np.all(inside)) and equal >= 0.97
    detail = f"max {steps.max()} steps, {100 * equal:.2f}% equal, {int(np.sum(~inside))} outside the bound"
    if not np.all(inside):
        i = np.unravel_index(int(np.argmax(~inside)), got.shape)
        detail += f"; at {i}: got {E4M3[got[i]]} want {E4M3[want[i]]}"
    return ok, detail


def launch(cp, f, s, xcodes, packed, scale, shift, guard, size=1):
    """Runs kernel f; y of `size`-byte elements between guard bytes."""
    n, oh, ow, oc = (s[k] for k in "n oh ow oc".split())
    total = n * oh * ow * oc * size
    ybuf = cp.full(total + 2 * guard, 0xA5, dtype=cp.uint8)
    dy = ybuf[guard:guard + total]
    comp = cp.zeros(max(oc, 1), dtype=cp.int32)
    if s["smem"] > 0:
        f.max_dynamic_shared_size_bytes = s["smem"]
    f(s["grid"], (s["block"],),
      (cp.asarray(xcodes.reshape(-1)), cp.asarray(packed.reshape(-1)), comp,
       cp.asarray(scale), cp.asarray(shift), dy),
      shared_mem=s["smem"])
    got = ybuf.get()
    guards_ok = np.all(got[:guard] == 0xA5) and np.all(got[len(got) - guard:] == 0xA5)
    return got[guard:guard + total], guards_ok


def run(cp, path, lines, rng):
    mod = cp.RawModule(path=path)
    tag = os.path.basename(path)
    guard = 256
    small = np.flatnonzero(np.abs(np.nan_to_num(E4M3, nan=99.0)) <= 8.0)
    for line in lines:
        name, s = parse(line)
        if name.startswith("f8t_"):
            TIMED.append((name, s, line))
            continue
        f32_out = "out=f32" in line.split()
        n, h, wd, c, oh, ow, oc = (s[k] for k in "n h w c oh ow oc".split())
        k = s["kh"] * s["kw"] * c
        f = mod.get_function(name)
        if n * oh * ow * oc == 0:
            got, guards_ok = launch(cp, f, s, np.zeros(max(n * h * wd * c, 1), np.uint8),
                                    np.zeros(16, np.uint8), np.zeros(1, np.float32), np.zeros(1, np.float32), guard)
            check(f"{tag} {name} (empty)", guards_ok)
            continue
        xc = rng.choice(small, (n, h, wd, c)).astype(np.uint8)
        wc = rng.choice(small, (oc, s["kh"], s["kw"], c)).astype(np.uint8)
        x, w = E4M3[xc], E4M3[wc]
        if f32_out:
            scale = rng.uniform(0.5, 2.0, oc).astype(np.float32)
            shift = rng.uniform(-20, 20, oc).astype(np.float32)
            packed = pack_wg(wc.view(np.int8), oc, k, int(s["pack"][3:]))
            got, guards_ok = launch(cp, f, s, xc, packed, scale, shift, guard, size=4)
            got = got.view(np.float32).reshape(-1, oc).astype(np.float64)
            want = conv64(s, x, w) * scale[None, :].astype(np.float64) + shift[None, :]
            lo = -np.inf if s["y_min"] == -(2 ** 31) else s["y_min"]
            hi = np.inf if s["y_max"] == 2 ** 31 - 1 else s["y_max"]
            want = np.clip(want, lo, hi)
            mag = conv64(s, np.abs(x), np.abs(w)) * np.abs(scale[None, :]).astype(np.float64)
            tol = acc_bound(k) * mag + 1e-6 * np.abs(shift[None, :]) + 1e-30
            err = np.abs(got - want) / tol
            ok = guards_ok and bool(np.all(err <= 1.0))
            rel = np.abs(got - want) / (mag + 1e-30)
            WORST.append((name, k, float(np.log2(rel.max() + 1e-300))))
            i = int(np.argmax(err))
            check(f"{tag} {name}", ok, f"worst {err.reshape(-1)[i]:.3f} of the tolerance, guards {'ok' if guards_ok else 'TOUCHED'}")
            continue
        std = max(1.0, 6.0 * np.sqrt(max(k, 1)))
        scale = (rng.uniform(0.2, 3.0, oc) * 300.0 / std).astype(np.float32)
        shift = rng.uniform(-20, 20, oc).astype(np.float32)
        acc, mag = conv64(s, x, w), conv64(s, np.abs(x), np.abs(w))
        packed = pack_wg(wc.view(np.int8), oc, k, int(s["pack"][3:]))
        got, guards_ok = launch(cp, f, s, xc, packed, scale, shift, guard)
        ok, detail = e4m3_check(s, got.reshape(-1, oc), acc, mag, scale, shift, k)
        check(f"{tag} {name}", ok and guards_ok, detail + f", guards {'ok' if guards_ok else 'TOUCHED'}")
        # x nonzero only at channel 0: a 1×1 kernel's sum is one e4m3 ×
        # e4m3 product (exact in f32); with scale 1 and shift 0 the output
        # must be the reference's rounding of it, bit for bit (more taps
        # add a few products: within one step).
        tiny = np.flatnonzero(np.abs(np.nan_to_num(E4M3, nan=99.0)) <= 2.0)
        xc1 = np.zeros_like(xc)
        xc1[..., 0] = rng.choice(tiny, xc1[..., 0].shape)
        wc1 = rng.choice(tiny, wc.shape).astype(np.uint8)
        one, zero = np.ones(oc, np.float32), np.zeros(oc, np.float32)
        want1 = reference(s, E4M3[xc1], E4M3[wc1], one, zero).reshape(-1)
        packed1 = pack_wg(wc1.view(np.int8), oc, k, int(s["pack"][3:]))
        got1, _ = launch(cp, f, s, xc1, packed1, one, zero, guard)
        d1 = np.abs(ordinal(got1) - ordinal(want1))
        exact = s["kh"] * s["kw"] == 1
        ok1 = (d1.max() == 0) if exact else (d1.max() <= 1)
        check(f"{tag} {name} ({'exact' if exact else 'few products'})", ok1, f"max {d1.max()} steps")


def median_ms(cp, fn, iters=20):
    """CUDA-event milliseconds of fn(), median of `iters` after 3 warm-ups."""
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


def timed(cp, path, rng):
    """The `f8t_` kernels (n³ GEMMs, e4m3 out): checked on 256 sampled rows
    as above (within one e4m3 step, 90% equal), then timed against
    torch._scaled_mm (e4m3 × e4m3, per-tensor scales, f16 and bf16 out)
    on the same codes, same run."""
    import torch

    mod = cp.RawModule(path=path)
    small = np.flatnonzero(np.abs(np.nan_to_num(E4M3, nan=99.0)) <= 8.0)
    cache = {}
    for name, s, line in TIMED:
        n, c, oc = s["n"], s["c"], s["oc"]
        bn = int(s["pack"][3:])
        if n not in cache:
            xc = rng.choice(small, (n, c)).astype(np.uint8)
            wc = rng.choice(small, (oc, c)).astype(np.uint8)
            cache.clear()
            cache[n] = (xc, wc)
        xc, wc = cache[n]
        std = 6.0 * np.sqrt(c)
        scale = (rng.uniform(0.2, 3.0, oc) * 300.0 / std).astype(np.float32)
        shift = rng.uniform(-20, 20, oc).astype(np.float32)
        packed = pack_wg(wc.view(np.int8), oc, c, bn)
        f = mod.get_function(name)
        got, guards_ok = launch(cp, f, s, xc, packed, scale, shift, 256)
        rows = np.sort(rng.choice(n, 256, replace=False))
        acc = E4M3[xc[rows]] @ E4M3[wc].T
        mag = np.abs(E4M3[xc[rows]]) @ np.abs(E4M3[wc]).T
        ok, detail = e4m3_check(s, got.reshape(n, oc)[rows], acc, mag, scale, shift, c)
        ok = ok and guards_ok
        if ok:
            dx, dw = cp.asarray(xc.reshape(-1)), cp.asarray(packed.reshape(-1))
            comp, dsc, dsh = cp.zeros(oc, cp.int32), cp.asarray(scale), cp.asarray(shift)
            y = cp.empty(n * oc, cp.uint8)
            if s["smem"] > 0:
                f.max_dynamic_shared_size_bytes = s["smem"]
            ms = median_ms(cp, lambda: f(s["grid"], (s["block"],), (dx, dw, comp, dsc, dsh, y), shared_mem=s["smem"]))
            ta = torch.from_numpy(xc).cuda().view(torch.float8_e4m3fn)
            tb = torch.from_numpy(wc).cuda().view(torch.float8_e4m3fn).t()
            one = torch.tensor(1.0, device="cuda")
            peers = []
            for dt in (torch.float16, torch.bfloat16):
                peers.append(median_ms(cp, lambda: torch._scaled_mm(ta, tb, scale_a=one, scale_b=one, out_dtype=dt)))
            fl = 2.0 * n * c * oc
            detail += (f"  bn={bn}: {ms:.3f} ms {fl / ms / 1e9:.0f} TFLOP/s; _scaled_mm f16 {peers[0]:.3f} ms, "
                       f"bf16 {peers[1]:.3f} ms; _scaled_mm f16 / aoc {peers[0] / ms:.2f}")
        check(f"{os.path.basename(path)} {name} {n}x{oc}x{c}", ok, detail)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__)
    import cupy as cp

    d = args[0]
    ptx = os.path.join(d, "gemm_fp8_sm_90a.ptx")
    if not os.path.exists(ptx):
        sys.exit(f"no gemm_fp8_sm_90a.ptx in {d}")
    with open(os.path.join(d, "gemm_fp8_sm_90a.txt")) as fh:
        lines = [ln for ln in fh.read().splitlines() if ln.strip()]
    run(cp, ptx, lines, np.random.default_rng(17))
    for name, k, w in WORST:
        print(f"f32 out {name} K={k}: worst |err| = 2^{w:.1f} of sum |x*w*scale|")
    if "--time" in sys.argv:
        timed(cp, ptx, np.random.default_rng(18))
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
