#!/usr/bin/env python3
"""Builds the binaries the GPU machine runs (it has no cargo) and copies
them, stripped, to build/device/: the release `aoc`, the runtime's unit
tests (with the `cuda` feature: AVX-512/AMX kernels and GPU tests), the x86
backend's generated-code tests, and the GEMM benchmarks.

    python3 tests/scripts/device_bins.py [OUT_DIR]

Then carry `build/device` to the machine and run e.g.
`build/device/runtime_tests --test-threads 4`.
"""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "device")


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
    subprocess.run(["strip", "--strip-debug", dst], check=False)
    print(f"{dst}: {os.path.getsize(dst) // 1024} KiB")


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, kind, path in executables(["build", "--release", "-p", "aoc"]):
        if name == "aoc":
            copy(path, "aoc")
    for name, kind, path in executables(["test", "--release", "-p", "aoc-runtime", "--features", "cuda", "--no-run"]):
        if name == "aoc_runtime":
            copy(path, "runtime_tests")
    for name, kind, path in executables(["test", "--release", "-p", "aoc-backend-x86", "--no-run"]):
        if name in ("pointwise", "pointwise_math"):
            copy(path, f"{name}_tests")
    for name, kind, path in executables(["bench", "-p", "aoc-runtime", "--no-run"]):
        if kind == "bench":
            copy(path, f"bench_{name}")


if __name__ == "__main__":
    main()
