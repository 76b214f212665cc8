#!/usr/bin/env python3
"""CPU benchmark: aoc's compiled artifact against ONNX Runtime, same model,
same inputs, same thread count, same warm-up and iteration count, measured
in one script (see bench/cpu/README.md).

For each model (OUTDIR/NAME.onnx from bench/models/build_models.py):
  1. aoc import NAME.onnx -o NAME.air
  2. aoc compile NAME.air --target TARGET -o NAME.aoc
  3. aoc run NAME.aoc --input IN=IN.npy ... --output-dir out/   (once; the
     outputs are compared with ONNX Runtime's: max absolute error)
  4. for each thread count N:
       ONNX Runtime: intra_op_num_threads=N, inter_op_num_threads=1,
         ORT_ENABLE_ALL, sequential; p50/p99/mean over the iterations,
         each timed with time.perf_counter around session.run
       aoc bench NAME.aoc --threads N --warmup W --iters I --json
     With --rounds R the two measurements alternate R times (each with
     1/R of the time budget) and the ratio is the median of the rounds'
     ratios: on shared machines whose speed drifts within minutes, both
     sides of a round see the same machine.
Steps 1-2 are skipped when their output is newer than both the input and
the aoc binary (--rebuild forces them). A failure of an aoc step marks that
model's rows `failed: STEP: first line of the error` and the script goes on
with the next model. Progress goes to stderr, the markdown table to stdout.

    run.py [MODEL ...] [--threads 1,2] [--warmup 3] [--iters auto|N] [--rounds R] [--json-out FILE]

MODEL: a name such as resnet18_b1, or a glob / prefix (resnet18 = resnet18*);
default: the seven models of build_models.py (not the older aliases resnet50
and bert_base); any other NAME means MODELS_DIR/NAME.onnx.
"""
import argparse
import fnmatch
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODELS = ["resnet18_b1", "resnet18_b8", "resnet50_b1", "resnet50_b8",
                  "mobilenetv2_b1", "bert_base_s128", "bert_small_s128"]
BENCH_KEYS = ["p50_ms", "p99_ms", "mean_ms", "throughput_per_s", "peak_memory_bytes"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class StepError(Exception):
    """An aoc step failed; str() is `STEP: first line of its error`."""


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def run_step(step, cmd, timeout):
    """Runs one aoc command; returns its stdout, or raises StepError."""
    log("  $ " + " ".join(cmd))
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise StepError(f"{step}: {cmd[0]} not found (cargo build --release -p aoc)")
    except subprocess.TimeoutExpired:
        raise StepError(f"{step}: timed out after {timeout} s")
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        msg = first_line(p.stderr) or first_line(p.stdout) or f"exit status {p.returncode}"
        log(f"    failed ({dt:.1f} s, exit {p.returncode}):")
        for line in (p.stderr or p.stdout).rstrip().splitlines()[:20]:
            log("    | " + line)
        raise StepError(f"{step}: {msg}")
    log(f"    ok ({dt:.1f} s)")
    return p.stdout


def up_to_date(out, inputs):
    if not os.path.exists(out):
        return False
    t = os.path.getmtime(out)
    return all(os.path.getmtime(i) <= t for i in inputs if os.path.exists(i))


def stats_ms(times_s, batch):
    ms = np.asarray(times_s) * 1e3
    mean = float(ms.mean())
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": mean, "min_ms": float(ms.min()), "throughput_per_s": 1e3 / mean,
            "samples_per_s": batch * 1e3 / mean, "iters": len(ms)}


# --- inputs and ONNX Runtime ------------------------------------------------

def make_inputs(onnx_path, sess, seed=0):
    """Seeded inputs for every graph input: N(0,1) floats; integer inputs
    that index a Gather's table (token ids) uniform over the table's rows,
    other integer inputs in [0, 2) (masks, segment ids)."""
    import onnx
    model = onnx.load(onnx_path, load_external_data=False)
    init_rows = {t.name: t.dims[0] for t in model.graph.initializer if len(t.dims) > 0}
    table_rows = {}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) == 2 and n.input[0] in init_rows:
            table_rows[n.input[1]] = init_rows[n.input[0]]
    del model
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = list(i.shape)
        if not all(isinstance(d, int) for d in shape):
            raise ValueError(f"input {i.name} has symbolic shape {shape}; fix it in the model")
        if i.type in ("tensor(int64)", "tensor(int32)"):
            dt = np.int64 if i.type == "tensor(int64)" else np.int32
            feeds[i.name] = rng.integers(0, table_rows.get(i.name, 2), size=shape).astype(dt)
        elif i.type == "tensor(float)":
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            raise ValueError(f"input {i.name}: type {i.type} not handled by this script")
    return feeds


def ort_session(onnx_path, threads, spin=True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    if not spin:
        # ORT's pool threads busy-wait for work by default; on a shared
        # 2-core machine a spinning thread can steal the core its peer needs.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(onnx_path, sess_options=so, providers=["CPUExecutionProvider"])


def ort_bench(sess, feeds, warmup, iters, time_budget, min_iters, max_iters):
    """Returns (iters used, timing list). iters None: chosen from the warm-up
    runs' mean so that the timed runs take about time_budget seconds."""
    warm = []
    for _ in range(max(warmup, 1)):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        warm.append(time.perf_counter() - t0)
    if iters is None:
        est = float(np.mean(warm[1:] if len(warm) > 1 else warm))
        iters = int(min(max(math.ceil(time_budget / max(est, 1e-6)), min_iters), max_iters))
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return iters, times


# --- checking outputs ------------------------------------------------------

def find_output(out_dir, name, n_outputs):
    """The .npy that `aoc run --output-dir` wrote for ONNX output NAME:
    NAME.npy, else NAME with characters outside [A-Za-z0-9_.] replaced by _,
    else the only .npy there when the model has one output."""
    for cand in (name, re.sub(r"[^A-Za-z0-9_.]", "_", name)):
        p = os.path.join(out_dir, cand + ".npy")
        if os.path.exists(p):
            return p
    files = sorted(f for f in os.listdir(out_dir) if f.endswith(".npy")) if os.path.isdir(out_dir) else []
    if n_outputs == 1 and len(files) == 1:
        return os.path.join(out_dir, files[0])
    raise StepError(f"check: no {name}.npy in {out_dir} (found: {', '.join(files) or 'nothing'})")


def compare(ref, out_dir):
    """Max absolute error over all outputs, and the largest |reference| value."""
    err, scale = 0.0, 0.0
    for name, r in ref.items():
        a = np.load(find_output(out_dir, name, len(ref)))
        if tuple(a.shape) != tuple(r.shape):
            raise StepError(f"check: output {name} has shape {list(a.shape)}, ONNX Runtime's {list(r.shape)}")
        d = np.abs(a.astype(np.float64) - r.astype(np.float64))
        e = float(d.max()) if d.size else 0.0
        err = float("nan") if (math.isnan(e) or not np.isfinite(a).all()) else max(err, e)
        scale = max(scale, float(np.abs(r).max()) if r.size else 0.0)
    return err, scale


def aoc_run(aoc, artifact, in_files, out_dir, timeout, step):
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [aoc, "run", artifact]
    for name, path in in_files.items():
        cmd += ["--input", f"{name}={path}"]
    cmd += ["--output-dir", out_dir]
    run_step(step, cmd, timeout)


def parse_bench_json(stdout):
    text = stdout.strip()
    candidates = [text] + [l.strip() for l in reversed(text.splitlines()) if l.strip().startswith("{")]
    for c in candidates:
        try:
            obj = json.loads(c)
        except ValueError:
            continue
        if isinstance(obj, dict):
            if "p50_ms" not in obj:
                raise StepError(f"bench: no p50_ms in the JSON object ({', '.join(obj) or 'empty'})")
            return obj
    raise StepError(f"bench: no JSON object in the output: {first_line(stdout) or 'nothing printed'}")


# --- one model -------------------------------------------------------------

def median_round(rounds):
    """The measurement of the round with the median p50 (the lower middle
    one for an even count), or None."""
    if not rounds:
        return None
    ordered = sorted(rounds, key=lambda x: float(x["p50_ms"]))
    return ordered[(len(ordered) - 1) // 2]


def bench_model(name, a, threads_list):
    onnx_path = os.path.join(a.models_dir, name + ".onnx")
    work = os.path.join(a.work_dir, name)
    os.makedirs(work, exist_ok=True)
    rows = [{"model": name, "threads": n, "batch": None, "aoc": None, "ort": None,
             "aoc_error": None, "ort_error": None, "ratio": None} for n in threads_list]
    result = {"model": name, "onnx": onnx_path, "rows": rows, "max_abs_err": None,
              "ref_max_abs": None, "check_error": None, "interp_max_abs_err": None,
              "interp_error": None, "commands": []}
    log(f"== {name}")
    if not os.path.exists(onnx_path):
        msg = f"missing {onnx_path} (bench/models/build_models.py {a.models_dir} {name})"
        for r in rows:
            r["aoc_error"] = r["ort_error"] = msg
        result["check_error"] = msg
        log("  " + msg)
        return result

    # Inputs and the reference outputs, from ONNX Runtime at 1 thread
    # (needed for the check even with --no-ort).
    try:
        sess = ort_session(onnx_path, 1)
        feeds = make_inputs(onnx_path, sess)
        out_names = [o.name for o in sess.get_outputs()]
        ref = dict(zip(out_names, sess.run(None, feeds)))
        del sess
    except Exception as e:  # an ORT failure must not stop the other models
        msg = f"onnxruntime: {first_line(str(e))}"
        log("  " + msg)
        feeds, ref = None, None
        for r in rows:
            r["ort_error"] = msg
        result["check_error"] = msg
    batch = None
    if feeds:
        first = next(iter(feeds.values()))
        batch = int(first.shape[0]) if first.ndim else 1
        in_dir = os.path.join(work, "inputs")
        os.makedirs(in_dir, exist_ok=True)
        in_files = {}
        for k, v in feeds.items():
            in_files[k] = os.path.join(in_dir, re.sub(r"[^A-Za-z0-9_.]", "_", k) + ".npy")
            np.save(in_files[k], v)
        os.makedirs(os.path.join(work, "ref"), exist_ok=True)
        for k, v in ref.items():
            np.save(os.path.join(work, "ref", re.sub(r"[^A-Za-z0-9_.]", "_", k) + ".npy"), v)
    for r in rows:
        r["batch"] = batch

    # aoc: import, compile, check once.
    air = os.path.join(work, name + ".air")
    art = os.path.join(work, name + ".aoc")
    aoc_error = None
    if not a.no_aoc:
        try:
            aoc_bin = a.aoc
            deps = [aoc_bin] if os.path.exists(aoc_bin) else []
            cmd = [aoc_bin, "import", onnx_path, "-o", air] + sum((["--input-shape", s] for s in a.input_shape), [])
            result["commands"].append(" ".join(cmd))
            if a.rebuild or not up_to_date(air, [onnx_path] + deps):
                run_step("import", cmd, a.timeout)
            else:
                log(f"  {air} up to date")
            cmd = [aoc_bin, "compile", air, "--target", a.target, "-o", art]
            result["commands"].append(" ".join(cmd))
            if a.rebuild or not up_to_date(art, [air] + deps):
                run_step("compile", cmd, a.timeout)
            else:
                log(f"  {art} up to date")
        except StepError as e:
            aoc_error = str(e)
        if aoc_error is None and feeds is not None:
            try:
                out_dir = os.path.join(work, "out")
                aoc_run(aoc_bin, art, in_files, out_dir, a.timeout, "run")
                err, scale = compare(ref, out_dir)
                result["max_abs_err"], result["ref_max_abs"] = err, scale
                log(f"  max abs error vs ONNX Runtime: {err:.3g} (largest |output| {scale:.3g})")
            except StepError as e:
                result["check_error"] = str(e)
                log("  " + str(e))
        if a.check_air and feeds is not None and os.path.exists(air):
            try:
                out_dir = os.path.join(work, "out-interp")
                aoc_run(a.aoc, air, in_files, out_dir, a.timeout, "interp")
                result["interp_max_abs_err"], _ = compare(ref, out_dir)
                log(f"  interpreter max abs error vs ONNX Runtime: {result['interp_max_abs_err']:.3g}")
            except StepError as e:
                result["interp_error"] = str(e)
                log("  " + str(e))

    for r in rows:
        n = r["threads"]
        sess = None
        if not a.no_ort and feeds is not None:
            try:
                sess = ort_session(onnx_path, n, spin=not a.ort_no_spin)
            except Exception as e:
                r["ort_error"] = f"onnxruntime: {first_line(str(e))}"
                log("  " + r["ort_error"])
        # Rounds alternate ONNX Runtime and aoc, each with a share of the
        # time budget, so that a machine whose speed drifts (shared cores)
        # moves both sides of each round's ratio alike.
        ort_rounds, aoc_rounds = [], []
        for k in range(a.rounds):
            tag = f" (round {k + 1}/{a.rounds})" if a.rounds > 1 else ""
            ort_r = None
            if sess is not None:
                try:
                    iters, times = ort_bench(sess, feeds, a.warmup, a.iters, a.time_budget / a.rounds,
                                             a.min_iters, a.max_iters)
                    ort_r = stats_ms(times, batch)
                    ort_rounds.append(ort_r)
                    log(f"  ort  threads={n}: p50 {ort_r['p50_ms']:.2f} ms over {iters} iters{tag}")
                except Exception as e:
                    r["ort_error"] = f"onnxruntime: {first_line(str(e))}"
                    log("  " + r["ort_error"])
                    sess = None
            if a.no_aoc or aoc_error is not None:
                continue
            iters = a.iters or (ort_r["iters"] if ort_r else a.min_iters)
            cmd = [a.aoc, "bench", art, "--threads", str(n), "--warmup", str(a.warmup), "--iters", str(iters), "--json"]
            if k == 0:
                result["commands"].append(" ".join(cmd))
            try:
                aoc_r = parse_bench_json(run_step("bench", cmd, a.timeout))
                aoc_rounds.append(aoc_r)
                log(f"  aoc  threads={n}: p50 {aoc_r['p50_ms']:.2f} ms over {iters} iters{tag}")
            except StepError as e:
                r["aoc_error"] = str(e)
                break
        if aoc_error is not None and not a.no_aoc:
            r["aoc_error"] = aoc_error
        del sess
        r["ort"] = median_round(ort_rounds)
        r["aoc"] = median_round(aoc_rounds)
        if len(ort_rounds) == len(aoc_rounds) and ort_rounds:
            ratios = [float(x["p50_ms"]) / y["p50_ms"] for x, y in zip(aoc_rounds, ort_rounds) if y["p50_ms"] > 0]
            if ratios:
                r["ratio"] = float(np.median(ratios))
                r["round_ratios"] = ratios
    return result


# --- report ----------------------------------------------------------------

def cell_err(msg, width):
    msg = msg.replace("|", "\\|")
    return "failed: " + (msg if len(msg) <= width else msg[: width - 1] + "…")


def table(results, with_interp):
    head = ["model", "batch", "threads", "aoc p50 ms", "ORT p50 ms", "aoc/ORT", "max abs err"]
    if with_interp:
        head.append("interp err")
    lines = ["| " + " | ".join(head) + " |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if with_interp else "")]
    for res in results:
        if res["max_abs_err"] is not None:
            err = f"{res['max_abs_err']:.2g}"
        elif res["check_error"]:
            err = cell_err(res["check_error"], 60)
        else:
            err = "—"
        for r in res["rows"]:
            aoc = f"{float(r['aoc']['p50_ms']):.2f}" if r["aoc"] else (cell_err(r["aoc_error"], 80) if r["aoc_error"] else "—")
            ort = f"{r['ort']['p50_ms']:.2f}" if r["ort"] else (cell_err(r["ort_error"], 60) if r["ort_error"] else "—")
            ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "—"
            cells = [res["model"], str(r["batch"] if r["batch"] is not None else "?"), str(r["threads"]), aoc, ort, ratio, err]
            if with_interp:
                ie = res["interp_max_abs_err"]
                cells.append(f"{ie:.2g}" if ie is not None else (cell_err(res["interp_error"], 60) if res["interp_error"] else "—"))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def meta(a):
    cpu = ""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not cpu:
                    cpu = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        import onnxruntime
        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": cpu, "cores": os.cpu_count(), "avx512f": "avx512f" in flags, "avx2": "avx2" in flags,
            "loadavg": os.getloadavg(), "onnxruntime": ort_version, "python": platform.python_version(),
            "git": commit, "aoc": a.aoc, "target": a.target, "warmup": a.warmup,
            "iters": a.iters or "auto", "time_budget_s": a.time_budget,
            "ort_spinning": not a.ort_no_spin,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def write_json(path, a, results):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta(a), "results": results}, f, indent=1)
    os.replace(tmp, path)


def select_models(patterns):
    if not patterns:
        return list(DEFAULT_MODELS)
    picked = []
    for p in patterns:
        hits = [m for m in DEFAULT_MODELS if fnmatch.fnmatchcase(m, p)] \
            or [m for m in DEFAULT_MODELS if m.startswith(p)]
        if not hits:
            # A model of one's own: MODELS_DIR/P.onnx.
            hits = [p]
        picked += [h for h in hits if h not in picked]
    return picked


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="model names, globs or prefixes (default: all)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    ap.add_argument("--iters", default="auto",
                    help="timed runs; auto (default): chosen from ONNX Runtime's warm-up so the timed runs "
                         "take about --time-budget seconds, within [--min-iters, --max-iters]; aoc gets the same")
    ap.add_argument("--time-budget", type=float, default=10.0, help="seconds per measurement for --iters auto")
    ap.add_argument("--min-iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate ONNX Runtime and aoc this many times per thread count, each with a share "
                         "of --time-budget; the ratio is the median of the rounds' ratios (default 1)")
    ap.add_argument("--max-iters", type=int, default=500)
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build", "bench-models"))
    ap.add_argument("--work-dir", default=os.path.join(ROOT, "build", "bench-cpu"),
                    help="where .air, .aoc, inputs and outputs go (default build/bench-cpu)")
    ap.add_argument("--aoc", default=os.path.join(ROOT, "target", "release", "aoc"))
    ap.add_argument("--target", default="host", help="aoc compile --target (default host)")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                    help="passed to aoc import (models with symbolic dimensions)")
    ap.add_argument("--rebuild", action="store_true", help="import and compile even when up to date")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per aoc command (default 1800)")
    ap.add_argument("--no-aoc", action="store_true", help="ONNX Runtime only")
    ap.add_argument("--no-ort", action="store_true", help="aoc only (the check still uses ONNX Runtime)")
    ap.add_argument("--ort-no-spin", action="store_true",
                    help="ONNX Runtime with session.intra_op.allow_spinning=0 (default: ORT's default, spinning)")
    ap.add_argument("--check-air", action="store_true",
                    help="also run the .air in aoc's reference interpreter and compare (slow)")
    ap.add_argument("--json-out", metavar="FILE", help="write every result (and the machine) as JSON")
    a = ap.parse_args()
    try:
        threads = [int(t) for t in a.threads.split(",") if t.strip()]
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        ap.error(f"--threads must be a comma-separated list of positive integers, found {a.threads!r}")
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1, found {a.rounds}")
    if a.iters == "auto":
        a.iters = None
    else:
        try:
            a.iters = int(a.iters)
            if a.iters < 1:
                raise ValueError
        except ValueError:
            ap.error(f"--iters must be auto or a positive integer, found {a.iters!r}")
    a.aoc = os.path.abspath(a.aoc)
    models = select_models(a.models)
    m = meta(a)
    log(f"cpu: {m['cpu']} ({m['cores']} cores, avx512f={m['avx512f']}), load average "
        f"{' '.join(f'{x:.2f}' for x in m['loadavg'])}, onnxruntime {m['onnxruntime']}, git {m['git']}")
    results = []
    for name in models:
        results.append(bench_model(name, a, threads))
        if a.json_out:
            write_json(a.json_out, a, results)
    print(table(results, a.check_air))
    if a.json_out:
        write_json(a.json_out, a, results)
        log(f"wrote {a.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
