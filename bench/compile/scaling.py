#!/usr/bin/env python3
"""Compile time against model size: `aoc compile` of op chains of 1k to
200k ops, next to ONNX Runtime's session creation (its graph optimizer and
kernel setup) for the same chain as ONNX.

    .venv/bin/python bench/compile/scaling.py [--sizes 1000,10000,50000,100000,200000]
        [--aoc target/release/aoc] [--work build/bench-compile] [--no-ort]

A chain alternates relu and neg on a 1x16 tensor (nothing to fold or fuse
away beyond pairs, so every op reaches code generation). For each size it
prints aoc's wall time and peak memory, the time per 1,000 ops, the growth
against linear from the previous size (1.0 = linear), and ORT's session
creation time with the ratio aoc / ORT. Results go in docs/performance.md
with the command line.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time


def write_air(path: str, n: int) -> None:
    with open(path, "w") as f:
        f.write("func @main(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {\n")
        prev = "x"
        for i in range(n):
            op = "core.relu" if i % 2 == 0 else "core.neg"
            f.write(f"  %v{i} = {op} %{prev} : tensor<1x16xf32>\n")
            prev = f"v{i}"
        f.write(f"  return %{prev} : tensor<1x16xf32>\n}}\n")


def write_onnx(path: str, n: int) -> None:
    import onnx
    from onnx import TensorProto, helper

    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Relu" if i % 2 == 0 else "Neg", [prev], [f"v{i}"]))
        prev = f"v{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)


def time_aoc(aoc: str, air: str, out: str) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of `aoc compile`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    r = subprocess.run([aoc, "-q", "compile", air, "--target", "host", "-o", out], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"aoc compile {air} failed:\n{r.stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024.0


def time_ort(path: str) -> float:
    import onnxruntime as ort

    t0 = time.perf_counter()
    ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,50000,100000,200000")
    ap.add_argument("--aoc", default="target/release/aoc")
    ap.add_argument("--work", default="build/bench-compile")
    ap.add_argument("--no-ort", action="store_true")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    os.makedirs(a.work, exist_ok=True)
    print("command:", " ".join([os.path.basename(sys.executable)] + sys.argv))
    print()
    print("| ops | aoc compile | peak memory | per 1k ops | growth vs linear | ORT session | aoc / ORT |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    prev = None
    for n in sizes:
        air = os.path.join(a.work, f"chain{n}.air")
        write_air(air, n)
        wall, mib = time_aoc(a.aoc, air, os.path.join(a.work, "chain.aoc"))
        growth = "" if prev is None else f"{(wall / prev[1]) / (n / prev[0]):.2f}"
        ort_s, ratio = "", ""
        if not a.no_ort:
            onnx_path = os.path.join(a.work, f"chain{n}.onnx")
            write_onnx(onnx_path, n)
            t = time_ort(onnx_path)
            ort_s, ratio = f"{t:.2f} s", f"{wall / t:.2f}"
        print(f"| {n:,} | {wall:.2f} s | {mib:.0f} MiB | {1000 * wall / n:.2f} s | {growth} | {ort_s} | {ratio} |", flush=True)
        prev = (n, wall)


if __name__ == "__main__":
    main()
