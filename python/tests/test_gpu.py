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


def _torch_cuda():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (CI has none); CUDA tensors are tested where it is")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch here")
    major, minor = torch.cuda.get_device_capability()
    return torch, "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def test_cuda_tensors_in_and_out_through_dlpack(resnet):
    torch, target = _torch_cuda()
    sess = aoc.Session(aoc.compile(resnet.onnx, target=target, precision="fp16"))
    want = resnet.expected["logits"]
    x = torch.from_numpy(resnet.input).cuda()
    # In from the device, out as device arrays that PyTorch views in place.
    out = sess.run({"input": x})["logits"]
    assert isinstance(out, aoc.DeviceArray) and out.device == "cuda:0"
    assert out.shape == list(want.shape) and out.dtype == np.float32
    t = torch.from_dlpack(out)
    assert t.is_cuda and tuple(t.shape) == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    assert float(np.abs(t.cpu().numpy() - want).max()) / scale <= 1e-2
    np.testing.assert_array_equal(out.numpy(), t.cpu().numpy())
    # The caller's own tensors as outputs: written in place, returned.
    dest = torch.full(want.shape, float("nan"), device="cuda")
    ptr = dest.data_ptr()
    (got,) = sess.run(None, {"input": x}, outputs={"logits": dest})
    assert got is dest and dest.data_ptr() == ptr
    np.testing.assert_array_equal(dest.cpu().numpy(), t.cpu().numpy())
    # Ordered on PyTorch's stream, the call may return before the run is
    # done; what PyTorch queues next on that stream sees the outputs.
    for _ in range(3):
        late = torch.full(want.shape, float("nan"), device="cuda")
        sess.run({"input": x}, outputs={"logits": late}, stream=torch.cuda.current_stream().cuda_stream)
        seen = late.clone()
        np.testing.assert_array_equal(seen.cpu().numpy(), t.cpu().numpy())
    # A CUDA input on a stream other than the default one is waited for.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.from_numpy(resnet.input).cuda() * 1.0
        got = torch.from_dlpack(sess.run({"input": y})["logits"])
    np.testing.assert_array_equal(got.cpu().numpy(), t.cpu().numpy())


def test_bad_cuda_tensors_are_refused(resnet):
    torch, target = _torch_cuda()
    sess = aoc.Session(aoc.compile(resnet.onnx, target=target))
    x = torch.from_numpy(resnet.input).cuda()
    with pytest.raises(aoc.InputError, match="must be float32"):
        sess.run({"input": x.half()})
    with pytest.raises(aoc.InputError, match="must have shape"):
        sess.run({"input": x[:, :, 1:]})
    n, c, h, w = x.shape
    strided = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    with pytest.raises(aoc.InputError, match="not contiguous"):
        sess.run({"input": strided})
    with pytest.raises(aoc.InputError, match="must have shape"):
        sess.run({"input": x}, outputs={"logits": torch.empty(3, device="cuda")})
    with pytest.raises(aoc.InputError, match="only CUDA tensors"):
        sess.run({"input": x}, outputs={"logits": np.empty(sess.output_shapes[0], np.float32)})
    cpu = aoc.Session(aoc.compile(resnet.onnx, target="host"))
    with pytest.raises(aoc.InputError, match="CPU artifact"):
        cpu.run({"input": x})
