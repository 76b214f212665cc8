#!/usr/bin/env python3
"""GPU check of `kernels::gemm_wgmma` (sm_90a, H100/H200 only).

    AOC_PTX_DUMP_DIR=/tmp/ptx cargo test -p aoc-backend-ptx --test ptx gemm_wgmma
    python3 backends/ptx/tests/gpu_checks/gemm_wgmma.py /tmp/ptx

Reads `gemm_wgmma.ptx`, its manifest `gemm_wgmma.txt` and the sample packed
B `gemm_wgmma_pack.bin`; checks this script's packing of B against the
Rust `pack_b`; runs every kernel of the manifest against a float64
reference (all rows for small products, 64 sampled rows for 4096³ and
8192³, on the GPU in float64), with NaN in A's row padding (the k tail
must be zero-filled, never read) and NaN in C's padding (it must stay
untouched); then times the 4096³ and 8192³ kernels with CUDA events against
cupy.matmul in f16 (cuBLAS) and prints TFLOP/s. One PASS/FAIL line per
case; exit status 1 on any failure.
"""

import ctypes
import os
import sys

import cupy as cp
import numpy as np

FAILS = []


def report(what, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + what + ("  " + detail if detail else ""), flush=True)
    if not ok:
        FAILS.append(what)


def jit_log(ptx):
    """cuModuleLoadDataEx with the JIT's error and info logs, for a module
    that CuPy failed to load."""
    cuda = ctypes.CDLL("libcuda.so.1")
    size = 1 << 16
    err = ctypes.create_string_buffer(size)
    info = ctypes.create_string_buffer(size)
    # CU_JIT_INFO_LOG_BUFFER(3), _SIZE_BYTES(4), CU_JIT_ERROR_LOG_BUFFER(5), _SIZE_BYTES(6)
    opts = (ctypes.c_int * 4)(5, 6, 3, 4)
    vals = (ctypes.c_void_p * 4)(ctypes.cast(err, ctypes.c_void_p).value, size,
                                 ctypes.cast(info, ctypes.c_void_p).value, size)
    mod = ctypes.c_void_p()
    rc = cuda.cuModuleLoadDataEx(ctypes.byref(mod), ctypes.c_char_p(ptx + b"\0"), 4, opts, vals)
    return rc, err.value.decode(errors="replace"), info.value.decode(errors="replace")


def load(path):
    try:
        return cp.RawModule(path=path)
    except Exception as e:  # noqa: BLE001 - print everything the driver says
        print(f"FAIL loading {path}: {e}")
        rc, err, info = jit_log(open(path, "rb").read())
        print(f"cuModuleLoadDataEx rc={rc}\nerror log:\n{err}\ninfo log:\n{info}")
        sys.exit(1)


def pack_b(b, k, n, bn, xp):
    """The layout of `gemm_wgmma::pack_b`: block (kt, nt) of 64 x bn at
    (nt*ktiles + kt)*64*bn; in it row nr (column n) of 64 k-elements, the
    16-byte chunk c of the row at chunk position c ^ (nr % 8)."""
    kt, nt = -(-k // 64), -(-n // bn)
    p = xp.zeros((kt * 64, nt * bn), dtype=xp.uint16)
    p[:k, :n] = b
    p = p.reshape(kt, 64, nt, bn).transpose(2, 0, 3, 1)  # nt, kt, nr, kr
    p = p.reshape(nt, kt, bn, 8, 8)  # ..., chunk c, element
    pos = xp.arange(8)[None, :] ^ (xp.arange(bn)[:, None] % 8)  # position of chunk c
    out = xp.empty_like(p)
    out[:, :, xp.arange(bn)[:, None], pos, :] = p
    return xp.ascontiguousarray(out).reshape(-1)


def to_bits(x, prec):
    """float32 cupy array -> (uint16 bits, the float64 values they hold)."""
    if prec == "f16":
        h = x.astype(cp.float16)
        return h.view(cp.uint16), h.astype(cp.float64)
    u = x.astype(cp.float32).view(cp.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cp.uint16)  # round to nearest even
    back = (r.astype(cp.uint32) << 16).view(cp.float32)
    return r, back.astype(cp.float64)


def parse(line):
    f = dict(kv.split("=", 1) for kv in line.split())
    for key in ("m", "n", "k", "arow", "crow", "bias", "relu", "bn", "stages", "grid", "block", "smem"):
        f[key] = int(f[key])
    return f


def launch(mod, f, args):
    fn = mod.get_function(f["name"])
    if f["smem"] > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = f["smem"]
    fn((f["grid"], 1, 1), (f["block"], 1, 1), tuple(args), shared_mem=f["smem"])


def run_case(mod, f, rng):
    m, n, k, arow, crow, bn = f["m"], f["n"], f["k"], f["arow"], f["crow"], f["bn"]
    big = m * n * k > 1 << 32
    a32 = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    b32 = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
    abits, a64 = to_bits(a32, f["prec"])
    bbits, b64 = to_bits(b32, f["prec"])
    # A rows `arow` apart; NaN (f16 and bf16 bits 0x7E00 / 0x7FC0) in the padding.
    nan = 0x7E00 if f["prec"] == "f16" else 0x7FC0
    a = cp.full((max(m, 1), arow), nan, dtype=cp.uint16)
    a[:m, :k] = abits
    packed = pack_b(bbits, k, n, bn, cp) if k else cp.zeros(8, dtype=cp.uint16)
    bias = cp.asarray(rng.standard_normal(n, dtype=np.float32))
    c = cp.full((max(m, 1), crow), cp.nan, dtype=cp.float32)
    args = [a, packed] + ([bias] if f["bias"] else []) + [c]
    r = None
    if f["epi"] == "residual":
        r = cp.asarray(rng.standard_normal((m, crow), dtype=np.float32))
        args.append(r)
    launch(mod, f, args)
    cp.cuda.Device().synchronize()
    rows = cp.arange(m)
    if big:
        rows = cp.asarray(np.unique(np.concatenate([[0, m - 1], rng.integers(0, m, 62)])))
    ref = a64[rows] @ b64
    scale = cp.abs(a64[rows]) @ cp.abs(b64)
    if f["bias"]:
        ref = ref + bias.astype(cp.float64)
        scale = scale + cp.abs(bias)
    if f["relu"]:
        ref = cp.maximum(ref, 0)
    if r is not None:
        ref = cp.maximum(ref + r[rows, :n], 0)
        scale = scale + cp.abs(r[rows, :n])
    got = c[rows, :n].astype(cp.float64)
    err = cp.abs(got - ref)
    ok = bool(cp.all(err <= 1e-3 * scale + 1e-5)) and not bool(cp.any(cp.isnan(got)))
    worst = float(cp.max(err / (scale + 1e-5))) if got.size else 0.0
    # C's padding columns stay NaN.
    untouched = bool(cp.all(cp.isnan(c[:m, n:]))) if crow > n else True
    report(f"{f['name']} {m}x{n}x{k} bn={bn} s={f['stages']}", ok and untouched,
           f"worst err/scale {worst:.2e}" + ("" if untouched else ", C padding written"))
    return a, packed, args


def time_it(fn, iters=20):
    for _ in range(3):
        fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / 1e3 / iters


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("AOC_PTX_DUMP_DIR", "")
    if not d:
        sys.exit("usage: gemm_wgmma.py DUMP_DIR")
    cc = cp.cuda.Device().compute_capability
    if cc != "90":
        sys.exit(f"needs an sm_90 GPU (H100/H200), found compute capability {cc}")
    # The Rust pack_b and this script agree (100 x 300, bn 128, values sample(i)).
    ref = np.fromfile(os.path.join(d, "gemm_wgmma_pack.bin"), dtype="<u2")
    i = np.arange(100 * 300, dtype=np.uint32)
    sample = ((i * 40503 + 1) & 0xFFFF).astype(np.uint16).reshape(100, 300)
    mine = pack_b(sample, 100, 300, 128, np)
    report("pack_b layout matches Rust", mine.shape == ref.shape and bool(np.all(mine == ref)))
    mod = load(os.path.join(d, "gemm_wgmma.ptx"))
    rng = np.random.default_rng(7)
    cases = [parse(x) for x in open(os.path.join(d, "gemm_wgmma.txt")) if x.strip()]
    for f in cases:
        try:
            a, packed, args = run_case(mod, f, rng)
        except Exception as e:  # noqa: BLE001 - a launch error is a failure of this case
            report(f["name"], False, repr(e))
            continue
        m, n, k = f["m"], f["n"], f["k"]
        if m * n * k >= 4096**3:
            flops = 2.0 * m * n * k
            t = time_it(lambda: launch(mod, f, args))
            ah = cp.random.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
            bh = cp.random.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
            tc = time_it(lambda: cp.matmul(ah, bh))
            print(f"TIME {f['name']}: {flops / t / 1e12:.0f} TFLOP/s ({t * 1e3:.3f} ms); "
                  f"cupy.matmul f16 {flops / tc / 1e12:.0f} TFLOP/s; ratio {tc / t:.2f}", flush=True)
            del ah, bh
        del a, packed, args
        cp.get_default_memory_pool().free_all_blocks()
    print(f"{len(FAILS)} failure(s)" if FAILS else "all passed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
