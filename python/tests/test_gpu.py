"""GPU artifacts: compiled anywhere; run through the CUDA runtime where a
GPU is (elsewhere the session raises aoc.DeviceError, and the run check
skips with the reason)."""

from __future__ import annotations

import numpy as np
import pytest

import aoc


def test_gpu_artifact_compiles_and_explains(resnet):
    art = aoc.compile(resnet.onnx, target="sm_86")
    assert art.target == "sm_86" and art.is_gpu
    steps = aoc.explain(art)
    assert steps and isinstance(steps[0], dict)
    with pytest.raises(aoc.CompileError, match="precision must be fp32, tf32, fp16 or bf16"):
        aoc.compile(resnet.onnx, target="sm_86", precision="fp64")


# compiler/tests/gpu.rs's tolerances: of max(1, max|expected|).
@pytest.mark.parametrize("precision,tol", [("fp32", 1e-3), ("fp16", 1e-2)])
def test_gpu_session_runs_numpy_in_and_out(resnet, precision, tol):
    art = aoc.compile(resnet.onnx, target="sm_86", precision=precision)
    try:
        sess = aoc.Session(art)
    except aoc.DeviceError as e:
        pytest.skip(f"no usable GPU here: {e}")
    assert sess.device != "cpu"
    got = sess.run({"input": resnet.input})["logits"]
    want = resnet.expected["logits"]
    err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
    assert got.dtype == np.float32 and err <= tol, err
    r = sess.bench(iters=10)
    assert r["iters"] == 10 and r["device_p50_ms"] > 0
