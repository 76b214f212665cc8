"""aoc.compile and aoc.Session against ONNX Runtime on the example models."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import aoc
from conftest import Example, assert_close, sqnr_db

FLOAT = ["resnet_block", "mobilenet_block", "encoder_layer"]
QDQ = ["qdq_cnn", "qdq_mobilenet", "qdq_encoder"]


def ort_run(model, feed):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    s = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


@pytest.mark.parametrize("name", FLOAT)
def test_float_examples_match_onnx_runtime(name):
    ex = Example(name)
    sess = aoc.Session(aoc.compile(str(ex.onnx), target="host"))
    feed = {sess.input_names[0]: ex.input}
    got = sess.run(feed)
    assert list(got) == list(ex.expected)
    for k, want in ex.expected.items():
        assert_close(got[k], want, atol=1e-4, rtol=1e-3)
    # And ONNX Runtime itself on another input.
    x = np.random.default_rng(1).standard_normal(ex.input.shape).astype(np.float32)
    feed = {sess.input_names[0]: x}
    want = ort_run(ex.onnx, feed)
    got = sess.run(feed)
    for k in want:
        assert_close(got[k], want[k], atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name", QDQ)
def test_quantized_examples_agree_with_onnx_runtime(name):
    ex = Example(name)
    sess = aoc.Session(aoc.compile(ex.onnx))
    got = sess.run({sess.input_names[0]: ex.input})
    for k, want in ex.expected.items():
        assert got[k].shape == want.shape
        assert sqnr_db(want, got[k]) > 30, (k, sqnr_db(want, got[k]))


def test_every_model_form_compiles_to_the_same_outputs(resnet):
    feed = {"input": resnet.input}
    want = aoc.Session(aoc.compile(str(resnet.onnx))).run(feed)["logits"]
    forms = [
        resnet.onnx,  # a pathlib.Path
        resnet.onnx.read_bytes(),
        onnx.load(str(resnet.onnx)),
        str(resnet.air),
    ]
    for m in forms:
        got = aoc.Session(aoc.compile(m)).run(feed)["logits"]
        assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_input_shapes_fix_a_symbolic_batch():
    ex = Example("dynamic_batch")
    art = aoc.compile(ex.onnx, input_shapes={"input": (2, 3, 32, 32)})
    sess = aoc.Session(art)
    assert sess.input_shapes == [[2, 3, 32, 32]]
    got = sess.run({"input": ex.input})
    for k, want in ex.expected.items():
        assert_close(got[k], want, atol=1e-4, rtol=1e-3)


def test_onnx_runtime_calling_style(resnet):
    sess = aoc.Session(aoc.compile(resnet.onnx))
    feed = {"input": resnet.input}
    as_dict = sess.run(feed)
    as_list = sess.run(None, feed)
    picked = sess.run(["logits"], feed)
    assert isinstance(as_list, list) and isinstance(picked, list)
    np.testing.assert_array_equal(as_list[0], as_dict["logits"])
    np.testing.assert_array_equal(picked[0], as_dict["logits"])
    assert_close(as_dict["logits"], resnet.expected["logits"])


def test_session_describes_its_inputs_and_outputs(encoder):
    sess = aoc.Session(aoc.compile(encoder.onnx), threads=1)
    assert sess.input_names == ["src"]
    assert sess.output_names == ["hidden"]
    assert sess.input_shapes == [[1, 16, 64]]
    assert sess.output_shapes == [[1, 16, 64]]
    assert sess.input_dtypes == [np.dtype(np.float32)]
    assert sess.output_dtypes == [np.dtype(np.float32)]
    assert sess.device == "cpu"
    assert sess.threads == 1
    assert sess.target == aoc.compile(encoder.onnx).target


def test_save_load_round_trip(tmp_path, resnet):
    art = aoc.compile(resnet.onnx)
    path = tmp_path / "model.aoc"
    art.save(path)
    assert path.stat().st_size == len(art) == len(art.to_bytes())
    assert art.path == str(path)
    loaded = aoc.load(path)
    assert loaded.target == art.target
    assert loaded.to_bytes() == art.to_bytes()
    feed = {"input": resnet.input}
    want = aoc.Session(art).run(feed)["logits"]
    for s in (aoc.Session(loaded), aoc.Session(str(path)), aoc.Session(path)):
        np.testing.assert_array_equal(s.run(feed)["logits"], want)


def test_compile_summary_is_the_commands_json(resnet):
    art = aoc.compile(resnet.onnx, target="x86-64")
    assert art.target == "x86-64"
    s = art.summary
    assert s["target"] == "x86-64"
    assert s["steps"] > 0 and s["artifact_bytes"] == len(art)
    assert "output" not in s  # the scratch file is gone


def test_explain_lists_every_step(resnet):
    art = aoc.compile(resnet.onnx)
    steps = aoc.explain(art)
    assert isinstance(steps, list) and steps
    assert [s["index"] for s in steps] == list(range(len(steps)))
    kinds = {s["kind"] for s in steps}
    assert "conv2d" in kinds and "gemm" in kinds, kinds
    assert all({"kernel", "precision", "op", "origin"} <= set(s) for s in steps)
    full = aoc.explain(art, full=True)
    assert full["steps"] == steps
    assert full["inputs"] == [{"name": "input", "dtype": "f32", "shape": [1, 3, 32, 32]}]
    assert full["artifact"].startswith("<compiled from")


def test_explain_of_a_file(tmp_path, resnet):
    path = tmp_path / "m.aoc"
    aoc.compile(resnet.onnx).save(path)
    assert aoc.explain(path) == aoc.explain(aoc.load(path))


def test_bench_reports_what_aoc_bench_json_does(resnet):
    sess = aoc.Session(aoc.compile(resnet.onnx), threads=1)
    r = sess.bench(iters=20, warmup=2)
    assert set(r) == {"p50_ms", "p99_ms", "mean_ms", "throughput_per_s", "peak_memory_bytes", "iters", "threads", "load_ms", "profile"}
    assert r["iters"] == 20 and r["threads"] == 1
    assert 0 < r["p50_ms"] <= r["p99_ms"]
    assert r["throughput_per_s"] == pytest.approx(1e3 / r["mean_ms"])
    r2 = sess.bench(iters=5, inputs={"input": resnet.input})
    assert r2["iters"] == 5


def test_outputs_are_fresh_each_run(resnet):
    sess = aoc.Session(aoc.compile(resnet.onnx))
    a = sess.run({"input": resnet.input})["logits"]
    keep = a.copy()
    a[:] = 0  # the caller owns the result
    b = sess.run({"input": resnet.input})["logits"]
    np.testing.assert_array_equal(b, keep)
    assert not np.shares_memory(a, b)


def _multi_io_model():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"]),
            helper.make_node("Gather", ["x", "idx"], ["z"], axis=0),
            helper.make_node("Shape", ["x"], ["s"]),
        ],
        "multi",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]), helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
    )
    # IR version 8: what the pinned ONNX Runtime reads.
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_several_inputs_outputs_and_integer_tensors():
    proto = _multi_io_model()
    sess = aoc.Session(aoc.compile(proto))
    assert sess.input_names == ["x", "idx"] and sess.output_names == ["y", "z", "s"]
    assert sess.input_dtypes == [np.dtype(np.float32), np.dtype(np.int64)]
    assert sess.output_dtypes == [np.dtype(np.float32), np.dtype(np.float32), np.dtype(np.int64)]
    feed = {"idx": np.array([2, 0], dtype=np.int64), "x": np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)}
    want = ort_run(_save(proto), feed)
    got = sess.run(feed)
    assert list(got) == ["y", "z", "s"]
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    s, z = sess.run(["s", "z"], feed)  # ONNX Runtime's order: as asked
    np.testing.assert_array_equal(s, want["s"])
    np.testing.assert_array_equal(z, want["z"])
    with pytest.raises(aoc.InputError, match=r"input `idx` must be int64 with shape \[2\], found int32"):
        sess.run({**feed, "idx": feed["idx"].astype(np.int32)})


def _save(proto):
    import tempfile

    d = tempfile.mkdtemp(prefix="aoc-test-")
    path = os.path.join(d, "m.onnx")
    onnx.save(proto, path)
    return path
