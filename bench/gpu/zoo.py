#!/usr/bin/env python3
"""The architecture zoo on the GPU: aoc fp16 against PyTorch fp16, same
weights, same inputs, same run (issue 18's GPU table in docs/models.md).

For each model of tests/data/zoo (made by tests/scripts/gen_zoo.py):
- aoc: `aoc compile tests/data/zoo/NAME.onnx --target SM --precision fp16`,
  then `aoc bench --json`: the device time of one inference's CUDA-graph
  replay (median over the iterations after warm-up);
- PyTorch: the same module gen_zoo.py exported, rebuilt with the same seeds
  (so the same weights), in fp16 on the GPU: eager, and torch.compile in
  each of --modes, each timed with CUDA events around the call after
  warm-up (median); "best" is the fastest of the compiled modes.
The ratio columns are aoc / peer: below 1.0, aoc is faster. Needs PyTorch
with timm, torchvision and transformers (the GPU machine has them).

    zoo.py --aoc build/device/aoc [--sm sm_90a] [--models a,b] [--modes reduce-overhead,default]
           [--iters 100] [--out zoo.json]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "scripts"))
sys.path.insert(0, HERE)
import gen_zoo  # noqa: E402
from run import cuda_median_ms  # noqa: E402  (bench/gpu/run.py: CUDA events, median)

warnings.filterwarnings("ignore")


def torch_model(name):
    """The module gen_zoo.export() exported, with its example inputs, in fp16 on the GPU."""
    fn = getattr(gen_zoo, name)
    torch.manual_seed(0)
    model, specs = fn()
    if fn is gen_zoo.lraspp:
        model = gen_zoo.LrasppOut(model)
    model = gen_zoo.randomize(model).half().cuda()
    args = []
    for s in specs:
        a = gen_zoo.example(s)
        args.append(a.cuda() if a.dtype == torch.int64 else a.half().cuda())
    return model, args


def bench_torch(name, modes, iters):
    model, args = torch_model(name)
    res = {}
    with torch.inference_mode():
        res["eager_ms"] = cuda_median_ms(lambda: model(*args), iters)
        for mode in modes:
            torch._dynamo.reset()
            try:
                c = torch.compile(model, mode=mode)
                t0 = time.perf_counter()
                c(*args)
                torch.cuda.synchronize()
                res[f"compile_{mode}_s"] = time.perf_counter() - t0
                res[f"compiled_{mode}_ms"] = cuda_median_ms(lambda: c(*args), iters)
            except Exception as e:  # one mode failing on one model is a result, not a reason to stop
                res[f"compiled_{mode}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    compiled = [res[f"compiled_{m}_ms"] for m in modes if f"compiled_{m}_ms" in res]
    res["compiled_best_ms"] = min(compiled) if compiled else None
    return res


def bench_aoc(aoc, name, sm, iters, workdir):
    onnx_path = os.path.join(ROOT, "tests", "data", "zoo", f"{name}.onnx")
    art = os.path.join(workdir, f"{name}.{sm}.aoc")
    p = subprocess.run([aoc, "compile", onnx_path, "--target", sm, "--precision", "fp16", "-o", art],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": "compile: " + (p.stderr.strip().splitlines() or ["?"])[0]}
    p = subprocess.run([aoc, "bench", art, "--json", "--iters", str(iters), "--warmup", "10"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": "bench: " + (p.stderr.strip().splitlines() or ["?"])[0]}
    r = json.loads(p.stdout)
    return {"device_p50_ms": r["device_p50_ms"], "e2e_p50_ms": r["p50_ms"]}


def fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}f}"


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aoc", default=os.path.join(ROOT, "build", "device", "aoc"))
    ap.add_argument("--sm", default="sm_90a")
    ap.add_argument("--models", default="", help="comma-separated zoo names (default: all of gen_zoo.ZOO)")
    ap.add_argument("--modes", default="reduce-overhead,default", help="torch.compile modes; best of them is reported")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--workdir", default="/tmp/aoc-zoo-gpu")
    ap.add_argument("--out", help="JSON of every result")
    a = ap.parse_args()
    names = [f.__name__ for f in gen_zoo.ZOO]
    if a.models:
        wanted = a.models.split(",")
        unknown = [m for m in wanted if m not in names]
        if unknown:
            ap.error(f"not in the zoo: {', '.join(unknown)} (known: {', '.join(names)})")
        names = wanted
    modes = [m for m in a.modes.split(",") if m]
    os.makedirs(a.workdir, exist_ok=True)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, aoc --target {a.sm} --precision fp16, "
          f"torch.compile modes {', '.join(modes)}", flush=True)
    print("| Model | aoc ms | eager ms | compiled best ms | aoc / eager | aoc / compiled |", flush=True)
    print("| --- | ---: | ---: | ---: | ---: | ---: |", flush=True)
    results = {}
    for name in names:
        r = {"aoc": bench_aoc(a.aoc, name, a.sm, a.iters, a.workdir)}
        try:
            r["torch"] = bench_torch(name, modes, a.iters)
        except Exception as e:
            r["torch"] = {"error": f"{type(e).__name__}: {e}"}
        results[name] = r
        ao, t = r["aoc"].get("device_p50_ms"), r["torch"]
        eager, best = t.get("eager_ms"), t.get("compiled_best_ms")
        r["vs_eager"] = ao / eager if ao and eager else None
        r["vs_compiled"] = ao / best if ao and best else None
        note = r["aoc"].get("error") or t.get("error") or ""
        print(f"| {name} | {fmt(ao)} | {fmt(eager)} | {fmt(best)} | {fmt(r['vs_eager'], 2)} | "
              f"{fmt(r['vs_compiled'], 2)} |{' ' + note if note else ''}", flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)
    ge = geomean([r["vs_eager"] for r in results.values()])
    gc = geomean([r["vs_compiled"] for r in results.values()])
    print(f"\ngeometric mean of aoc / eager: {fmt(ge, 3)}; of aoc / torch.compile at its best: {fmt(gc, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
