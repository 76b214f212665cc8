"""The package and the `aoc` command give the same answers: the same
explain JSON, the same compile and bench fields, the same quantized model
from the same batches. Needs a built `aoc` (AOC_BIN, or the newest of
target/debug/aoc and target/release/aoc, which `cargo test --workspace`
and `make demo` build); skips with the reason when there is none."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

import aoc
from conftest import ROOT


def _aoc_bin() -> str:
    if os.environ.get("AOC_BIN"):
        return os.environ["AOC_BIN"]
    found = [p for p in (ROOT / "target" / "debug" / "aoc", ROOT / "target" / "release" / "aoc") if p.exists()]
    if not found:
        pytest.skip("no aoc binary built (target/debug/aoc or target/release/aoc; set AOC_BIN)")
    return str(max(found, key=lambda p: p.stat().st_mtime))


def cli(*args: str) -> str:
    r = subprocess.run([_aoc_bin(), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_explain_is_the_commands(tmp_path, resnet):
    path = tmp_path / "m.aoc"
    aoc.compile(resnet.onnx).save(path)
    assert aoc.explain(path, full=True) == json.loads(cli("explain", str(path), "--json"))


def test_compile_summary_has_the_commands_fields(tmp_path, resnet):
    out = tmp_path / "m.aoc"
    theirs = json.loads(cli("compile", str(resnet.onnx), "--target", "x86-64", "-o", str(out), "--json"))
    ours = aoc.compile(resnet.onnx, target="x86-64").summary
    assert set(ours) == set(theirs) - {"output"}
    for k in ("steps", "step_kinds", "generated_kernels", "arena_bytes", "weight_bytes", "artifact_bytes", "target"):
        assert ours[k] == theirs[k], k


def test_bench_has_the_commands_fields(tmp_path, resnet):
    path = tmp_path / "m.aoc"
    aoc.compile(resnet.onnx).save(path)
    theirs = json.loads(cli("bench", str(path), "--iters", "5", "--threads", "1", "--json"))
    ours = aoc.Session(path, threads=1).bench(iters=5)
    assert set(ours) == set(theirs)
    assert ours["peak_memory_bytes"] == theirs["peak_memory_bytes"]
    assert ours["iters"] == theirs["iters"] and ours["threads"] == theirs["threads"]


def test_quantize_writes_the_commands_model(tmp_path, resnet):
    batches = resnet.calibration(6)
    calib = tmp_path / "calib"
    calib.mkdir()
    for i, b in enumerate(batches):
        np.save(calib / f"{i:03d}.npy", b)
    out = tmp_path / "cli" / "model.air"
    out.parent.mkdir()
    cli("quantize", str(resnet.onnx), "--calib", str(calib), "--method", "mse", "-o", str(out), "--report", str(tmp_path / "r.json"))
    model, report = aoc.quantize(resnet.onnx, batches, method="mse")
    assert model.text == out.read_text()
    theirs = json.loads((tmp_path / "r.json").read_text())
    report.pop("table")
    for k in ("method", "layers", "tensors", "weights", "precision", "activations"):
        assert report[k] == theirs[k], k
