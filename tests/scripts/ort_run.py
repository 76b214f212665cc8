#!/usr/bin/env python3
"""Run an ONNX model in ONNX Runtime and write its outputs as .npy files.

The Rust tests call this as their ONNX Runtime oracle:

    ort_run.py MODEL.onnx OUTDIR --input NAME=PATH.npy ...
    ort_run.py MODEL.onnx OUTDIR --random-inputs SEED [--shape NAME=1x3x32x32 ...]

Each graph output is written to OUTDIR/<sanitized name>.npy, where every
character outside [A-Za-z0-9_.-] becomes '_'. With --random-inputs, every
graph input without an --input binding is filled from a seeded generator
(standard normal for float inputs, integers in [0, 3) for integer inputs,
random booleans for bool inputs) and saved to OUTDIR/inputs/<sanitized name>.npy
before the run, so the Rust side can feed the same values to aoc.

ONNX Runtime runs on the CPU with one thread and every graph optimization
disabled, so its results are as close to the op definitions as it gets.

Exit status: 0 on success, 2 on a usage error (bad arguments, missing or
mismatched input), 1 if ONNX Runtime fails.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import numpy as np

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

# ONNX Runtime's type strings for tensor inputs -> numpy dtypes.
_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16,
    "tensor(int32)": np.int32,
    "tensor(uint32)": np.uint32,
    "tensor(int64)": np.int64,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


def sanitize(name: str) -> str:
    """The file stem used for a tensor name (shared with the Rust tests)."""
    return _UNSAFE.sub("_", name)


class UsageError(Exception):
    pass


def parse_binding(text: str, what: str) -> tuple[str, str]:
    name, sep, value = text.rpartition("=")
    if not sep or not name or not value:
        raise UsageError(f"{what} must look like NAME=VALUE, got {text!r}")
    return name, value


def parse_shape(text: str) -> list[int]:
    if text in ("", "scalar"):
        return []
    try:
        dims = [int(d) for d in text.lower().split("x")]
    except ValueError:
        raise UsageError(f"bad shape {text!r}: expected dims joined by 'x', e.g. 1x3x32x32")
    if any(d < 0 for d in dims):
        raise UsageError(f"bad shape {text!r}: dims must be non-negative")
    return dims


def concrete_shape(inp, overrides: dict[str, list[int]]) -> list[int]:
    """The shape to use for a graph input: an override, or its static dims."""
    if inp.name in overrides:
        shape = overrides[inp.name]
        declared = inp.shape or []
        if len(declared) != len(shape):
            raise UsageError(
                f"--shape {inp.name}: rank {len(shape)} does not match the model's rank {len(declared)} ({declared})"
            )
        for i, (want, have) in enumerate(zip(declared, shape)):
            if isinstance(want, int) and want >= 0 and want != have:
                raise UsageError(f"--shape {inp.name}: dim {i} is fixed to {want} in the model, got {have}")
        return shape
    shape = []
    for i, d in enumerate(inp.shape or []):
        if not isinstance(d, int) or d < 0:
            raise UsageError(
                f"input {inp.name!r} has symbolic dim {i} ({d!r}) in shape {inp.shape}; "
                f"give it a size with --shape {inp.name}=..."
            )
        shape.append(d)
    return shape


def random_array(rng: np.random.Generator, ort_type: str, shape: list[int]) -> np.ndarray:
    dtype = _ORT_DTYPES.get(ort_type)
    if dtype is None:
        raise UsageError(f"cannot make random data of type {ort_type}")
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(size=shape).astype(dtype)
    # Integers in [0, 3): small, and valid as indices into any axis of size
    # >= 3 (integer inputs are mostly indices: Gather, embeddings).
    return rng.integers(0, 3, size=shape).astype(dtype)


def make_session(model: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the .onnx file")
    ap.add_argument("outdir", help="where <output>.npy files go (created)")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=PATH.npy",
                    help="bind a graph input to a .npy file (repeatable)")
    ap.add_argument("--random-inputs", type=int, metavar="SEED",
                    help="fill unbound inputs with seeded random data, saved under OUTDIR/inputs/")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x32x32",
                    help="concrete shape for a random input with symbolic dims (repeatable)")
    args = ap.parse_args(argv)

    try:
        sess = make_session(args.model)
    except Exception as e:  # ORT raises its own exception types
        print(f"ort_run: cannot load {args.model}: {e}", file=sys.stderr)
        return 1

    try:
        inputs = {i.name: i for i in sess.get_inputs()}
        feeds: dict[str, np.ndarray] = {}
        for b in args.input:
            name, path = parse_binding(b, "--input")
            if name not in inputs:
                raise UsageError(f"--input {name}: the model has no input of that name (inputs: {list(inputs)})")
            try:
                feeds[name] = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise UsageError(f"--input {name}: cannot read {path}: {e}")

        overrides = {}
        for s in args.shape:
            name, text = parse_binding(s, "--shape")
            if name not in inputs:
                raise UsageError(f"--shape {name}: the model has no input of that name (inputs: {list(inputs)})")
            overrides[name] = parse_shape(text)

        missing = [n for n in inputs if n not in feeds]
        if missing and args.random_inputs is None:
            raise UsageError(f"no value for input(s) {missing}: use --input NAME=PATH.npy or --random-inputs SEED")
        if args.random_inputs is not None:
            rng = np.random.default_rng(args.random_inputs)
            in_dir = os.path.join(args.outdir, "inputs")
            os.makedirs(in_dir, exist_ok=True)
            # Graph order, so one seed always gives the same values.
            for name, inp in inputs.items():
                if name in feeds:
                    continue
                feeds[name] = random_array(rng, inp.type, concrete_shape(inp, overrides))
                np.save(os.path.join(in_dir, sanitize(name) + ".npy"), feeds[name])
    except UsageError as e:
        print(f"ort_run: {e}", file=sys.stderr)
        return 2

    try:
        outputs = sess.run(None, feeds)
    except Exception as e:
        print(f"ort_run: onnxruntime failed on {args.model}: {e}", file=sys.stderr)
        return 1

    os.makedirs(args.outdir, exist_ok=True)
    for meta, value in zip(sess.get_outputs(), outputs):
        np.save(os.path.join(args.outdir, sanitize(meta.name) + ".npy"), np.asarray(value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
