"""aoc.quantize: the `aoc quantize` engine over in-memory batches."""

from __future__ import annotations

import numpy as np
import pytest

import aoc
from conftest import Example, sqnr_db


def test_quantized_resnet_matches_onnx_runtime(resnet):
    model, report = aoc.quantize(resnet.onnx, resnet.calibration(16))
    assert isinstance(model, aoc.Model)
    assert report["method"] == "entropy"
    assert report["precision"] == "int8"
    assert "core.conv2d" not in model.text or "quant." in model.text
    layers = report["layers"]
    assert layers and sum(1 for l in layers if l["precision"] == "int8") >= 6, layers
    assert "/layer1/conv1/Conv" in report["table"]
    sess = aoc.Session(aoc.compile(model))
    got = sess.run({"input": resnet.input})["logits"]
    assert sqnr_db(resnet.expected["logits"], got) > 25
    # The compiled plan runs convolutions in int8.
    steps = aoc.explain(aoc.compile(model))
    assert any(s["precision"] == "int8" and s["kind"].startswith("qconv") for s in steps), {s["kind"] for s in steps}


def test_calibration_forms_give_the_same_model(resnet):
    batches = resnet.calibration(6)
    as_arrays, _ = aoc.quantize(resnet.onnx, batches, method="minmax")
    as_dicts, _ = aoc.quantize(resnet.onnx, [{"input": b} for b in batches], method="minmax")
    # (input, label) pairs, as a DataLoader yields; a generator, float64.
    as_pairs, _ = aoc.quantize(resnet.onnx, ((b.astype(np.float64), 3) for b in batches), method="minmax")
    assert as_arrays.text == as_dicts.text == as_pairs.text


def test_method_and_eval_reach_the_engine(resnet):
    _, report = aoc.quantize(
        resnet.onnx,
        resnet.calibration(4),
        method="percentile",
        percentile=99.9,
        eval=resnet.calibration(3, seed=5),
    )
    assert report["method"] == "percentile"
    assert report["percentile"] == pytest.approx(99.9)
    assert report["totals"]["eval"]["batches"] == 3, report["totals"]


def test_target_sqnr_keeps_layers_in_float(resnet):
    _, report = aoc.quantize(resnet.onnx, resnet.calibration(4), target_sqnr=200.0, sensitivity_batches=2)
    assert report["target_sqnr_db"] == 200.0
    assert any(l["precision"] == "float" for l in report["layers"]), report["layers"]


def test_keep_leaves_a_layer_in_float(resnet):
    _, report = aoc.quantize(resnet.onnx, resnet.calibration(4), keep=["/stem/*"])
    stem = [l for l in report["layers"] if l["name"].startswith("/stem/")]
    assert stem and all(l["precision"] == "float" for l in stem), stem


def test_save_writes_air_and_weights(tmp_path, resnet):
    model, _ = aoc.quantize(resnet.onnx, resnet.calibration(4))
    written = model.save(tmp_path / "q.air")
    assert written[0] == str(tmp_path / "q.air")
    assert (tmp_path / "q.air").exists() and (tmp_path / "q.safetensors").exists()
    feed = {"input": resnet.input}
    a = aoc.Session(aoc.compile(model)).run(feed)["logits"]
    b = aoc.Session(aoc.compile(tmp_path / "q.air")).run(feed)["logits"]
    np.testing.assert_array_equal(a, b)


def test_two_input_model_calibrates_per_input(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        "two",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 8]), helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 16], np.random.default_rng(0).standard_normal(128).astype(np.float32))],
    )
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(1)
    batches = [{"a": rng.standard_normal((4, 8)).astype(np.float32), "b": rng.standard_normal((4, 16)).astype(np.float32)} for _ in range(4)]
    model, report = aoc.quantize(proto, batches, method="minmax")
    feed = batches[0]
    want = aoc.Session(aoc.compile(proto)).run(feed)["y"]
    got = aoc.Session(aoc.compile(model)).run(feed)["y"]
    assert sqnr_db(want, got) > 25
    with pytest.raises(aoc.InputError, match="missing input `b`"):
        aoc.quantize(proto, [{"a": batches[0]["a"]}])
    with pytest.raises(aoc.InputError, match="one array for a model with 2 inputs"):
        aoc.quantize(proto, [batches[0]["a"]])


def test_bad_calibration(resnet):
    with pytest.raises(aoc.InputError, match=r"calibration batch 1: input `input` must have shape \[1, 3, 32, 32\], found \[3, 32, 32\]"):
        aoc.quantize(resnet.onnx, [resnet.input, resnet.input[0]])
    with pytest.raises(aoc.InputError, match="calibration holds no batches"):
        aoc.quantize(resnet.onnx, [])
    with pytest.raises(aoc.InputError, match="not one batch"):
        aoc.quantize(resnet.onnx, resnet.input)
    with pytest.raises(aoc.InputError, match="unknown input `x`"):
        aoc.quantize(resnet.onnx, [{"x": resnet.input}])
    with pytest.raises(aoc.InputError, match="must be float32, found bool"):
        aoc.quantize(resnet.onnx, [resnet.input > 0])


def test_bad_options(resnet):
    cal = resnet.calibration(2)
    with pytest.raises(aoc.InputError, match="method must be entropy, percentile, mse or minmax, found `kld`"):
        aoc.quantize(resnet.onnx, cal, method="kld")
    with pytest.raises(aoc.InputError, match=r"percentile must be in \(0, 100\]"):
        aoc.quantize(resnet.onnx, cal, method="percentile", percentile=120)
    with pytest.raises(aoc.InputError, match="precision must be int8 or fp8"):
        aoc.quantize(resnet.onnx, cal, precision="int4")


def test_quantizing_a_quantized_model_says_how(resnet):
    ex = Example("qdq_cnn")
    with pytest.raises(aoc.QuantizeError, match="already quantized"):
        aoc.quantize(ex.onnx, ex.calibration(2))


def test_target_decides_placement(encoder):
    cal = encoder.calibration(4)
    _, host = aoc.quantize(encoder.onnx, cal, method="minmax")
    model, gpu = aoc.quantize(encoder.onnx, cal, method="minmax", target="sm_90")
    assert gpu["target"] == "sm_90" and gpu["kept_precision"] == "fp16", {k: gpu[k] for k in ("target", "kept_precision")}
    int8 = lambda r: sum(1 for l in r["layers"] if l["precision"] == "int8")
    assert int8(gpu) < int8(host)  # attention's activation x activation matmuls stay out on the GPU
    assert aoc.compile(model, target="sm_90", precision="fp16").is_gpu
    with pytest.raises(aoc.InputError, match="unknown --target `z80`"):
        aoc.quantize(encoder.onnx, cal, target="z80")
