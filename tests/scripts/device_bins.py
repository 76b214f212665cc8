#!/usr/bin/env python3
"""Builds the binaries the GPU machine runs (it has no cargo) and copies
them, stripped, to build/device/: the release `aoc`, the runtime's unit
tests (with the `cuda` feature: AVX-512/AMX kernels and GPU tests), the
GPU end-to-end tests (compiler/tests/gpu.rs), the PTX backend's tests
(`ptx_tests`: with AOC_PTX_DUMP_DIR they write the kernels the
`backends/ptx/tests/gpu_checks/*.py` scripts and `bench/gpu/sparse_gemm.py`
run), the x86 backend's generated-code tests, and the GEMM benchmarks
(`--gpu-only`: the first four).

    python3 tests/scripts/device_bins.py [OUT_DIR] [--gpu-only]

Then carry `build/device` to the machine and run e.g.
`build/device/runtime_tests --test-threads 4`.
"""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith('--') else os.path.join(ROOT, "build", "device")


def executables(args):
    """Runs cargo with --message-format=json; yields (target name, kind, path)."""
    cmd = ["cargo"] + args + ["--message-format=json"]
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, check=True, text=True)
    for line in p.stdout.splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("executable"):
            t = m["target"]
            yield t["name"], t["kind"][0], m["executable"]


def copy(src, name):
    dst = os.path.join(OUT, name)
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o755)
    subprocess.run(["strip", "--strip-all", dst], check=False)
    print(f"{dst}: {os.path.getsize(dst) // 1024} KiB")


def pack(names):
    """build/device-pack/bins.tar.gz with `names` from OUT: the carry limit
    (64 MiB) is below the binaries' size, not their compressed size. On the
    machine: `mkdir -p build/device && tar xzf build/device-pack/bins.tar.gz -C build/device`."""
    dst = os.path.join(os.path.dirname(OUT), "device-pack")
    os.makedirs(dst, exist_ok=True)
    tar = os.path.join(dst, "bins.tar.gz")
    subprocess.run(["tar", "czf", tar, "-C", OUT, *names], check=True)
    print(f"{tar}: {os.path.getsize(tar) // 1024} KiB")


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, kind, path in executables(["build", "--release", "-p", "aoc"]):
        if name == "aoc":
            copy(path, "aoc")
    for name, kind, path in executables(["test", "--release", "-p", "aoc-runtime", "--features", "cuda", "--no-run"]):
        if name == "aoc_runtime":
            copy(path, "runtime_tests")
    for name, kind, path in executables(["test", "--release", "-p", "aoc", "--test", "gpu", "--no-run"]):
        if name == "gpu":
            copy(path, "gpu_tests")
    for name, kind, path in executables(["test", "--release", "-p", "aoc-backend-ptx", "--test", "ptx", "--no-run"]):
        if name == "ptx":
            copy(path, "ptx_tests")
    if "--gpu-only" in sys.argv:
        pack(["aoc", "gpu_tests", "runtime_tests", "ptx_tests"])
        return
    for name, kind, path in executables(["test", "--release", "-p", "aoc-backend-x86", "--no-run"]):
        if name in ("pointwise", "pointwise_math"):
            copy(path, f"{name}_tests")
    for name, kind, path in executables(["bench", "-p", "aoc-runtime", "--no-run"]):
        if kind == "bench":
            copy(path, f"bench_{name}")


if __name__ == "__main__":
    main()
