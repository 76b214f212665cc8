#!/usr/bin/env python3
"""Runs the int8 convolution kernels of `kernels::gemm_s8` on a GPU and
compares them bit for bit with an exact NumPy reference.

Usage (on a machine with a GPU, CuPy and NumPy):

    AOC_PTX_DUMP_DIR=/tmp/ptx cargo test -p aoc-backend-ptx --test ptx gemm_s8_assembles
    python3 backends/ptx/tests/gpu_checks/gemm_s8.py /tmp/ptx

The test writes `gemm_s8_sm_86.{ptx,txt}` and `gemm_s8_sm_90.{ptx,txt}`: the
module and one manifest line per kernel (geometry, zero points, range,
launch); `cargo test ... qconv_wgmma_assembles` writes `gemm_s8_sm_90a.*`,
the `wgmma` kernels of `kernels::gemm_wgmma::qconv_wgmma`, whose lines say
`pack=wg:BN` (weights in 128-byte swizzled tiles of BN rows, as
`pack_weights_wg` lays them out). For each kernel: random x (i8/u8), weights (i8, packed as
`pack_weights` does: rows of K bytes padded with zeros to a multiple of 16),
comp (i32), scale and shift (f32; some scales powers of two so that many
values round at exact ties); the reference accumulates exactly in int64 and
requantizes as `aoc_runtime::kernels::qconv::requantize`: float32(acc),
fma (single rounding, emulated exactly), round half to even, clamp, + y_zero.
y is surrounded by guard bytes that must stay untouched. One PASS/FAIL line
per kernel; exit status 1 on any failure.

With `--time` it also checks and times (CUDA events, mean of 50 launches)
the kernels of `gemm_s8_bench_sm_90a.{ptx,txt}` (`cargo test ...
qconv_wgmma_bert_tiles_assemble`): BERT-base's GEMMs at batch 32 with the
tile the compiler chooses and the alternatives.
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
    g = [int(v) for v in f["geom"].split(":")]
    keys = "n h w c oh ow oc kh kw sh sw dh dw pt pl pb pr group".split()
    spec = dict(zip(keys, g))
    for k in ("x_signed", "x_zero", "y_signed", "y_zero", "y_min", "y_max", "block", "smem"):
        spec[k] = int(f[k])
    spec["grid"] = tuple(int(v) for v in f["grid"].split(":"))
    spec["pack"] = f.get("pack", "rows")
    return f["name"], spec


def fma32(a, b, c):
    """float32 fma(a, b, c) with one rounding: a·b is exact in float64; the
    float64 sum t = p + c carries its exact error e (TwoSum); where t lies
    exactly halfway between two float32 values, e decides the side."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c = c.astype(np.float64)
    t = p + c
    bp = t - c
    e = (p - bp) + (c - (t - bp))
    r = t.astype(np.float32)
    r64 = r.astype(np.float64)
    down = np.nextafter(r, np.float32(-np.inf)).astype(np.float64)
    up = np.nextafter(r, np.float32(np.inf)).astype(np.float64)
    r = np.where((t == (r64 + down) / 2) & (e < 0), down.astype(np.float32), r)
    r = np.where((t == (r64 + up) / 2) & (e > 0), up.astype(np.float32), r)
    return r


def requantize(acc, scale, shift, s):
    v = fma32(acc.astype(np.float32), scale, shift)
    r = np.rint(v)  # half to even
    lo = np.float32(s["y_min"] - s["y_zero"])
    hi = np.float32(s["y_max"] - s["y_zero"])
    r = np.clip(r, lo, hi)
    r = np.nan_to_num(r, nan=0.0)
    return r.astype(np.int64) + s["y_zero"]


def reference(s, x, w, comp, scale, shift):
    """Exact int64 NHWC convolution, padding read as x_zero, then the
    requantization; returns the output bytes (uint8)."""
    n, h, wd, c, oh, ow, oc = (s[k] for k in "n h w c oh ow oc".split())
    kh, kw, sh, sw, dh, dw, g = (s[k] for k in "kh kw sh sw dh dw group".split())
    cg, ocg = c // g, oc // g
    ext_h = max(h + s["pt"], (oh - 1) * sh + (kh - 1) * dh + 1) - h - s["pt"]
    ext_w = max(wd + s["pl"], (ow - 1) * sw + (kw - 1) * dw + 1) - wd - s["pl"]
    xp = np.full((n, s["pt"] + h + ext_h, s["pl"] + wd + ext_w, c), s["x_zero"], np.int64)
    xp[:, s["pt"]:s["pt"] + h, s["pl"]:s["pl"] + wd, :] = x
    m = n * oh * ow
    acc = np.zeros((m, oc), np.int64)
    for grp in range(g):
        cols = []
        for ky in range(kh):
            for kx in range(kw):
                sl = xp[:, ky * dh:ky * dh + (oh - 1) * sh + 1:sh,
                        kx * dw:kx * dw + (ow - 1) * sw + 1:sw, grp * cg:(grp + 1) * cg]
                cols.append(sl.reshape(m, cg))
        a = np.concatenate(cols, axis=1) if cols else np.zeros((m, 0), np.int64)
        wg = w[grp * ocg:(grp + 1) * ocg].reshape(ocg, kh * kw * cg).astype(np.int64)
        # In float64 (BLAS): every product and partial sum is an integer
        # below 2^53 for these sizes, so the result is exact.
        acc[:, grp * ocg:(grp + 1) * ocg] = (a.astype(np.float64) @ wg.T.astype(np.float64)).astype(np.int64)
    acc = (acc + comp).astype(np.int32)  # exact for these sizes, wraps as i32
    y = requantize(acc, scale[None, :], shift[None, :], s)
    return (y & 0xFF).astype(np.uint8)


def pack(w, oc, k):
    kp = (k + 15) // 16 * 16
    out = np.zeros((oc, kp), np.int8)
    out[:, :k] = w.reshape(oc, k)
    return out


def pack_wg(w, oc, k, bn):
    """`pack_weights_wg`: block (n-tile nt, k-tile kt) of bn rows × 128
    bytes at (nt·ktiles + kt)·128·bn; row nr's 16-byte chunk c at chunk
    position c ^ (nr % 8); zeros past k and oc."""
    kt, nt = -(-k // 128), -(-oc // bn)
    out = np.zeros(kt * nt * 128 * bn, np.int8)
    o, kk = np.meshgrid(np.arange(oc), np.arange(k), indexing="ij")
    nr, kr = o % bn, kk % 128
    at = ((o // bn) * kt + kk // 128) * 128 * bn + nr * 128 + ((kr // 16) ^ (nr % 8)) * 16 + kr % 16
    out[at.reshape(-1)] = w.reshape(oc, k).reshape(-1)
    return out


def run(cp, path, lines, rng, time=False):
    mod = cp.RawModule(path=path)
    tag = os.path.basename(path)
    guard = 256
    for line in lines:
        name, s = parse(line)
        n, h, wd, c, oh, ow, oc = (s[k] for k in "n h w c oh ow oc".split())
        g = s["group"]
        cg = c // g
        k = s["kh"] * s["kw"] * cg
        lo_x, hi_x = (-128, 128) if s["x_signed"] else (0, 256)
        x = rng.integers(lo_x, hi_x, (n, h, wd, c)).astype(np.int64)
        w = rng.integers(-128, 128, (oc, s["kh"], s["kw"], cg)).astype(np.int8)
        comp = rng.integers(-3000, 3000, oc).astype(np.int32)
        # Scales spreading the results over (and past) the output range;
        # every third a power of two with a shift of a quarter, for ties.
        mag = 127.0 / max(1.0, 128.0 * 128.0 * np.sqrt(max(k, 1)) / 4)
        scale = (rng.uniform(0.2, 3.0, oc) * mag).astype(np.float32)
        shift = rng.uniform(-20, 20, oc).astype(np.float32)
        scale[::3] = np.float32(2.0) ** -rng.integers(6, 12, scale[::3].shape)
        shift[::3] = np.float32(0.25) * rng.integers(-8, 8, shift[::3].shape)
        want = reference(s, x, w, comp, scale, shift)
        xb = x.astype(np.int8 if s["x_signed"] else np.uint8).view(np.uint8)
        dx = cp.asarray(xb.reshape(-1))
        if s["pack"].startswith("wg:"):
            packed = pack_wg(w, oc, k, int(s["pack"][3:]))
        else:
            packed = pack(w, oc, k)
        dw = cp.asarray(packed.reshape(-1))
        ybuf = cp.full(n * oh * ow * oc + 2 * guard, 0xA5, dtype=cp.uint8)
        dy = ybuf[guard:guard + n * oh * ow * oc]
        f = mod.get_function(name)
        if s["smem"] > 0:
            f.max_dynamic_shared_size_bytes = s["smem"]
        f(s["grid"], (s["block"],),
          (dx, dw, cp.asarray(comp), cp.asarray(scale), cp.asarray(shift), dy),
          shared_mem=s["smem"])
        got = ybuf.get()
        body = got[guard:guard + n * oh * ow * oc].reshape(-1, oc) if oc else got[:0]
        guards_ok = np.all(got[:guard] == 0xA5) and np.all(got[len(got) - guard:] == 0xA5)
        ok = guards_ok and np.array_equal(body.reshape(-1), want.reshape(-1))
        detail = ""
        if not ok:
            bad = np.flatnonzero(body.reshape(-1) != want.reshape(-1))
            detail = f"{bad.size} wrong bytes, guards {'ok' if guards_ok else 'TOUCHED'}"
            if bad.size:
                i = bad[0]
                detail += f"; first at {i} (row {i // max(oc, 1)}, ch {i % max(oc, 1)}): got {body.reshape(-1)[i]} want {want.reshape(-1)[i]}"
        if time:
            args = (dx, dw, cp.asarray(comp), cp.asarray(scale), cp.asarray(shift), dy)
            for _ in range(3):
                f(s["grid"], (s["block"],), args, shared_mem=s["smem"])
            reps = 50
            t0, t1 = cp.cuda.Event(), cp.cuda.Event()
            t0.record()
            for _ in range(reps):
                f(s["grid"], (s["block"],), args, shared_mem=s["smem"])
            t1.record()
            t1.synchronize()
            us = cp.cuda.get_elapsed_time(t0, t1) * 1000 / reps
            ops = 2 * n * oh * ow * oc * k
            detail = (detail + "  " if detail else "") + f"{us:.1f} us {ops / us / 1e6:.0f} TOPS"
        check(f"{tag} {name}", ok, detail)


def main():
    args = [a for a in sys.argv[1:] if a != "--time"]
    if len(args) != 1:
        sys.exit(__doc__)
    import cupy as cp

    d = args[0]
    found = False
    for sm in ("sm_86", "sm_90", "sm_90a"):
        ptx = os.path.join(d, f"gemm_s8_{sm}.ptx")
        if not os.path.exists(ptx):
            continue
        found = True
        with open(os.path.join(d, f"gemm_s8_{sm}.txt")) as fh:
            lines = [ln for ln in fh.read().splitlines() if ln.strip()]
        run(cp, ptx, lines, np.random.default_rng(8))
    bench = os.path.join(d, "gemm_s8_bench_sm_90a.ptx")
    if "--time" in sys.argv[1:] and os.path.exists(bench):
        with open(os.path.join(d, "gemm_s8_bench_sm_90a.txt")) as fh:
            lines = [ln for ln in fh.read().splitlines() if ln.strip()]
        run(cp, bench, lines, np.random.default_rng(9), time=True)
    if not found:
        sys.exit(f"no gemm_s8_sm_*.ptx in {d}")
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
