#!/usr/bin/env python3
"""What a Python call of aoc.Session.run costs over the Rust API's.

    .venv/bin/python bench/python/overhead.py [--aoc target/release/aoc] [--iters 20000]

Builds a tiny model (one Relu and one Add on a 1x64 tensor), compiles it
for this CPU, and times the same artifact three ways, one thread each:

  rust      `aoc bench --json --threads 1` (Session::run_into in a loop), when
            the binary is there; otherwise Session.bench, the same Rust loop
            called from Python
  python    Session.run({"x": x}) from Python: binding the dict, checking
            dtype/shape/contiguity, releasing the GIL, allocating and
            wrapping the output array
  ort-style Session.run(None, {"x": x})

and prints the medians (µs per inference) and the overhead, python - rust.
The issue's target is at most 20 µs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def tiny_model():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def median_us(fn, iters: int) -> float:
    for _ in range(min(1000, iters)):
        fn()
    times = []
    clock = time.perf_counter_ns
    for _ in range(iters):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    times.sort()
    return times[len(times) // 2] / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aoc", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "release", "aoc"))
    ap.add_argument("--iters", type=int, default=20000)
    a = ap.parse_args()

    import aoc

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny.aoc")
        aoc.compile(tiny_model(), target="host").save(path)
        sess = aoc.Session(path, threads=1)
        x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
        feed = {"x": x}
        np.testing.assert_allclose(sess.run(feed)["y"], np.maximum(x, 0) + x, rtol=1e-6)

        if os.path.exists(a.aoc):
            out = subprocess.run(
                [a.aoc, "bench", path, "--threads", "1", "--iters", str(a.iters), "--warmup", "1000", "--json"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rust_us = json.loads(out)["p50_ms"] * 1e3
            rust_src = f"{os.path.relpath(a.aoc)} bench --threads 1 --json"
        else:
            rust_us = sess.bench(iters=a.iters, warmup=1000)["p50_ms"] * 1e3
            rust_src = "Session.bench (no aoc binary at --aoc)"
        py_us = median_us(lambda: sess.run(feed), a.iters)
        ort_us = median_us(lambda: sess.run(None, feed), a.iters)

    print(f"tiny model (Relu + Add on 1x64 f32), {sess.target}, 1 thread, median of {a.iters} runs")
    print(f"  rust       {rust_us:8.2f} µs   ({rust_src})")
    print(f"  python     {py_us:8.2f} µs   Session.run(dict)   overhead {py_us - rust_us:+.2f} µs")
    print(f"  ort-style  {ort_us:8.2f} µs   Session.run(None, dict)   overhead {ort_us - rust_us:+.2f} µs")
    print(f"Python {sys.version.split()[0]}, numpy {np.__version__}, aoc {aoc.__version__}")


if __name__ == "__main__":
    main()
