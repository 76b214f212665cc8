#!/usr/bin/env python3
"""torch.compile(model, backend="aoc") against `aoc bench` of the artifact
it built, and against PyTorch eager and torch.compile (inductor), on the
GPU: ResNet-50 (torchvision, random weights) and BERT-base (transformers,
random weights, sequence 128), fp16.

    python3 bench/gpu/torch_backend.py --aoc build/device/aoc [--batch 32] [--iters 50] [--models resnet50,bert]

For each model: the backend compiles the captured graph for this GPU
(`sm_90a` on an H200) at fp16; its outputs are checked against eager
PyTorch in fp16 (error of max(1, |eager|)); then each way of running the
model is timed over --iters calls after warm-up, CUDA-synchronized, wall
time per call (what a PyTorch user sees, Python and TorchDynamo's guards
included). The artifact the backend built is saved and run by `aoc bench
--json`, whose `device_p50_ms` is the replay of its CUDA graph alone and
`p50_ms` a run with host inputs and outputs. Each way is timed twice: a
call that waits for the GPU (its host time adds to the GPU's), and calls
queued back to back with one wait at the end (the host runs ahead; this is
the throughput a serving loop sees). The ratio the issue sets a target for
is backend / device_p50 (at most 1.10), read from the second.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch


def timed(fn, x, iters):
    """(median wall time of a call that waits for the GPU, mean time per
    call of `iters` calls queued back to back with one wait at the end), ms."""
    with torch.no_grad():
        for _ in range(5):
            fn(*x)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(*x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn(*x)
        torch.cuda.synchronize()
        queued = (time.perf_counter() - t0) * 1e3 / iters
    times.sort()
    return times[len(times) // 2], queued


def models(names, batch):
    if "resnet50" in names:
        import torchvision

        torch.manual_seed(0)
        m = torchvision.models.resnet50(weights=None).eval().half().cuda()
        yield "resnet50", m, (torch.randn(batch, 3, 224, 224, device="cuda").half(),)
    if "bert" in names:
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        cfg = BertConfig(attn_implementation="eager")
        m = BertModel(cfg, add_pooling_layer=False).eval().half().cuda()

        class Encoder(torch.nn.Module):
            def __init__(self, bert):
                super().__init__()
                self.bert = bert

            def forward(self, ids):
                return self.bert(input_ids=ids).last_hidden_state

        ids = torch.randint(0, cfg.vocab_size, (batch, 128), device="cuda")
        yield "bert_base", Encoder(m).eval(), (ids,)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aoc", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--no-inductor", action="store_true")
    a = ap.parse_args()
    import aoc.torch_backend as tb

    rows = []
    for name, m, x in models(a.models.split(","), a.batch):
        torch._dynamo.reset()
        n_art = len(tb.artifacts)
        t0 = time.perf_counter()
        fast = torch.compile(m, backend="aoc", options={"precision": "fp16"})
        with torch.no_grad():
            got = fast(*x)
            want = m(*x)
        compile_s = time.perf_counter() - t0
        err = ((got.float() - want.float()).abs().max() / max(1.0, want.float().abs().max().item())).item()
        arts = tb.artifacts[n_art:]
        if len(arts) != 1 or tb.partitioned_graphs:
            print(f"{name}: expected one whole-graph artifact, got {len(arts)} (fallbacks: {tb.fallbacks[-2:]})", file=sys.stderr)
        aoc_ms = timed(fast, x, a.iters)
        eager_ms = timed(m, x, a.iters)
        ind_ms = None
        if not a.no_inductor:
            torch._dynamo.reset()
            ind = torch.compile(m)
            ind_ms = timed(ind, x, a.iters)
        # The same artifact straight through aoc.Session on CUDA tensors
        # (DLPack in, bound outputs, PyTorch's stream): the package's cost
        # without TorchDynamo.
        import aoc

        sess = aoc.Session(arts[-1])
        np_to_torch = {"float32": torch.float32, "float16": torch.float16, "int64": torch.int64}
        outs = {n: torch.empty(tuple(sh), dtype=np_to_torch[str(dt)], device="cuda") for n, sh, dt in zip(sess.output_names, sess.output_shapes, sess.output_dtypes)}
        feed = {n: t.to(np_to_torch[str(dt)]) for n, t, dt in zip(sess.input_names, x, sess.input_dtypes)}

        def direct():
            sess.run(feed, outputs=outs, stream=torch.cuda.current_stream().cuda_stream)

        ins_p = [feed[n].data_ptr() for n in sess.input_names]
        outs_p = [outs[n].data_ptr() for n in sess.output_names]

        def raw():
            sess.run_device(ins_p, outs_p, torch.cuda.current_stream().cuda_stream)

        raw_ms = timed(raw, (), a.iters)

        session_ms = timed(direct, (), a.iters)
        del sess
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, f"{name}.aoc")
            arts[-1].save(path)
            out = subprocess.run([a.aoc, "bench", path, "--iters", str(a.iters), "--json"], capture_output=True, text=True, check=True)
            bench = json.loads(out.stdout)
        dev = bench["device_p50_ms"]
        r3 = lambda v: None if v is None else round(v, 3)  # noqa: E731
        row = {
            "model": name,
            "batch": a.batch,
            "target": arts[-1].target,
            "max_err_of_max": err,
            "compile_s": round(compile_s, 1),
            "aoc_bench_device_p50_ms": r3(dev),
            "aoc_bench_p50_ms": r3(bench["p50_ms"]),
            # (waiting for each call, queued back to back)
            "torch_compile_aoc_ms": [r3(v) for v in aoc_ms],
            "session_stream_ms": [r3(v) for v in session_ms],
            "session_run_device_ms": [r3(v) for v in raw_ms],
            "eager_ms": [r3(v) for v in eager_ms],
            "inductor_ms": None if ind_ms is None else [r3(v) for v in ind_ms],
            "ratio_backend_over_device": [r3(v / dev) for v in aoc_ms],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    ok = all(r["ratio_backend_over_device"][1] <= 1.10 and r["max_err_of_max"] <= 1e-2 for r in rows)
    print("target (backend, calls queued back to back, at most 1.10x aoc bench's device time; fp16 error <= 1e-2):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
