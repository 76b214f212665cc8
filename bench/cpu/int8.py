#!/usr/bin/env python3
"""int8 on the CPU: aoc against ONNX Runtime on the same QDQ model, and
against aoc's own fp32 build of the float model, in one script.

For each model of bench/models/build_models.py:
  1. the float model OUT/NAME.onnx (built once);
  2. ONNX Runtime's quantize_static (QDQ, per channel, u8 activations,
     s8 weights, MinMax over --calib seeded batches) -> NAME.qdq.onnx;
  3. aoc compile NAME.onnx -> NAME.fp32.aoc, aoc compile NAME.qdq.onnx ->
     NAME.int8.aoc (--target, default host);
  4. outputs on one held-out input: ORT fp32 (the reference), ORT int8,
     aoc int8 (`aoc run`); output SQNR of each int8 result against it;
  5. for each thread count: ORT int8, aoc int8 (`aoc bench --json`), aoc
     fp32, alternating --rounds times; the table gives the medians and the
     ratios aoc int8 / ORT int8 and aoc int8 / aoc fp32. With --aoc-base
     OLD (another aoc binary, e.g. a build of an earlier commit), the same
     int8 artifact is also timed on OLD's runtime in each round, before
     and after aoc int8 in turn: an A/B of two runtimes on the same bytes,
     in the same run.

    int8.py [MODEL ...] [--threads 1,2] [--rounds 3] [--iters N] [--target T] [--aoc-base OLD]

Progress goes to stderr, the markdown table to stdout (first the command).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
import run as cpu  # noqa: E402  (bench/cpu/run.py: ORT sessions, timing, JSON parsing)

DEFAULT_MODELS = ["resnet18_b1", "resnet50_b1", "mobilenetv2_b1", "bert_small_s128"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(cmd, timeout=3600):
    log("  $ " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} {cmd[1]} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout


def sqnr_db(ref, out):
    ref = ref.astype(np.float64)
    noise = np.sum((ref - out.astype(np.float64)) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(ref ** 2) / noise))


def quantize(src, dst, feeds_list):
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds_list)

        def get_next(self):
            return next(self.it, None)

    pre = dst + ".pre.onnx"
    try:
        quant_pre_process(src, pre)
    except Exception as e:  # noqa: BLE001 - quantize the raw model then
        log(f"  quant_pre_process failed ({e}); quantizing the raw model")
        pre = src
    quantize_static(pre, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)


def aoc_bench(a, art, threads, iters, binary=None):
    out = sh([binary or a.aoc, "bench", art, "--threads", str(threads), "--warmup", "5",
              "--iters", str(iters), "--json"])
    return float(cpu.parse_bench_json(out)["p50_ms"])


def ort_p50(sess, feeds, iters):
    _, times = cpu.ort_bench(sess, feeds, 5, iters, 0, iters, iters)
    return float(np.percentile(np.asarray(times) * 1e3, 50))


def bench(name, a):
    import build_models
    import onnx
    work = os.path.join(a.work, name)
    os.makedirs(work, exist_ok=True)
    fp = os.path.join(work, name + ".onnx")
    if not os.path.exists(fp):
        build, _ = build_models.CATALOG[name]
        build_models.save(build(), fp)
    qdq = os.path.join(work, name + ".qdq.onnx")
    sess32 = cpu.ort_session(fp, 1)
    calib = [cpu.make_inputs(fp, sess32, seed=100 + i) for i in range(a.calib)]
    if not os.path.exists(qdq):
        log(f"{name}: quantize_static over {a.calib} batches")
        quantize(fp, qdq, calib)
    feeds = cpu.make_inputs(fp, sess32, seed=1)
    ref = sess32.run(None, feeds)[0]
    out_name = sess32.get_outputs()[0].name
    art32, art8 = os.path.join(work, name + ".fp32.aoc"), os.path.join(work, name + ".int8.aoc")
    sh([a.aoc, "compile", fp, "--target", a.target, "-o", art32])
    summary = sh([a.aoc, "compile", qdq, "--target", a.target, "-o", art8])
    reference_steps = "reference" in summary.split("steps (")[-1].split(")")[0]
    # Accuracy on one held-out input.
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.aoc, "run", art8, "--output-dir", tmp]
        for k, v in feeds.items():
            p = os.path.join(tmp, k.replace("/", "_") + ".in.npy")
            np.save(p, v)
            args += ["--input", f"{k}={p}"]
        sh(args)
        aoc8 = np.load(cpu.find_output(tmp, out_name, 1))
    sq8 = cpu.ort_session(qdq, 1)
    ort8 = sq8.run(None, feeds)[0]
    rows = []
    for t in a.threads:
        s8 = cpu.ort_session(qdq, t)
        rounds = []
        for i in range(a.rounds):
            o = ort_p50(s8, feeds, a.iters)
            # The two runtimes swap places every round: the run right after
            # ONNX Runtime's (whose pool threads spin on for a while) is
            # slower on a busy machine.
            base = float("nan")
            if a.aoc_base and i % 2 == 0:
                base = aoc_bench(a, art8, t, a.iters, a.aoc_base)
            c8 = aoc_bench(a, art8, t, a.iters)
            if a.aoc_base and i % 2 == 1:
                base = aoc_bench(a, art8, t, a.iters, a.aoc_base)
            rounds.append((o, c8, aoc_bench(a, art32, t, a.iters), base))
        o8, c8, c32, cb = (float(np.median([r[i] for r in rounds])) for i in range(4))
        log(f"  threads {t}: ORT int8 {o8:.2f} ms, aoc int8 {c8:.2f} ms, aoc fp32 {c32:.2f} ms")
        row = [name, str(t), f"{o8:.2f}", f"{c8:.2f}", f"{c32:.2f}", f"{c8 / o8:.2f}",
               f"{c8 / c32:.2f}", f"{sqnr_db(ref, ort8):.1f}", f"{sqnr_db(ref, aoc8):.1f}",
               "yes" if reference_steps else "no"]
        if a.aoc_base:
            row += [f"{cb:.2f}", f"{c8 / cb:.2f}"]
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--target", default="host")
    ap.add_argument("--aoc", default=os.path.join(ROOT, "target", "release", "aoc"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench-int8"))
    ap.add_argument("--aoc-base", default=None,
                    help="another aoc binary whose runtime also runs the int8 artifact (A/B)")
    a = ap.parse_args()
    a.threads = [int(t) for t in a.threads.split(",")]
    print("`" + " ".join(["bench/cpu/int8.py"] + sys.argv[1:]) + "`\n")
    head = ["model", "threads", "ORT int8 ms", "aoc int8 ms", "aoc fp32 ms", "aoc int8/ORT int8",
            "aoc int8/aoc fp32", "ORT SQNR dB", "aoc SQNR dB", "reference steps"]
    if a.aoc_base:
        head += ["aoc-base int8 ms", "aoc int8/aoc-base int8"]
    rows = []
    for m in a.models:
        try:
            rows += bench(m, a)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            log(f"{m}: {e}")
            rows.append([m, "-", "failed: " + str(e).splitlines()[0][:80]] + [""] * (len(head) - 3))
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
