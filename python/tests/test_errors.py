"""Bad input raises an aoc.Error subclass with the command's message."""

from __future__ import annotations

import numpy as np
import pytest

import aoc


@pytest.fixture(scope="module")
def sess(resnet):
    return aoc.Session(aoc.compile(resnet.onnx))


def test_the_classes():
    for cls in (aoc.CompileError, aoc.LoadError, aoc.InputError, aoc.RunError, aoc.QuantizeError, aoc.DeviceError, aoc.InternalError):
        assert issubclass(cls, aoc.Error) and cls.__module__ == "aoc"
    assert issubclass(aoc.InputError, ValueError)
    assert issubclass(aoc.LoadError, OSError)


def test_unknown_input_name(sess, resnet):
    with pytest.raises(aoc.InputError, match=r"unknown input `img`; the model's inputs are: input \(float32 \[1, 3, 32, 32\]\)"):
        sess.run({"img": resnet.input})


def test_missing_input(sess):
    with pytest.raises(aoc.InputError, match=r"missing input input \(float32 \[1, 3, 32, 32\]\)"):
        sess.run({})


def test_wrong_dtype(sess, resnet):
    with pytest.raises(aoc.InputError, match=r"input `input` must be float32 with shape \[1, 3, 32, 32\], found float64"):
        sess.run({"input": resnet.input.astype(np.float64)})
    with pytest.raises(aoc.InputError, match="found float64"):
        sess.run({"input": resnet.input.tolist()})  # a list becomes float64, never silently float32


def test_wrong_byte_order(sess, resnet):
    with pytest.raises(aoc.InputError, match="must be float32"):
        sess.run({"input": resnet.input.astype(">f4")})


def test_wrong_shape(sess, resnet):
    with pytest.raises(aoc.InputError, match=r"input `input` must have shape \[1, 3, 32, 32\] \(float32\), found \[1, 3, 32\]"):
        sess.run({"input": resnet.input[..., 0]})
    with pytest.raises(aoc.InputError, match="must have shape"):
        sess.run({"input": resnet.input.reshape(3, 32, 32)})


def test_non_contiguous(sess, resnet):
    x = np.asfortranarray(resnet.input)
    with pytest.raises(aoc.InputError, match=r"input `input` is not C-contiguous \(strides \[4, 4, 12, 384\]\); pass numpy.ascontiguousarray"):
        sess.run({"input": x})
    strided = np.zeros((1, 3, 32, 64), np.float32)[..., ::2]
    with pytest.raises(aoc.InputError, match="not C-contiguous"):
        sess.run({"input": strided})


def test_feed_must_be_a_dict(sess, resnet):
    with pytest.raises(aoc.InputError, match="must be a dict"):
        sess.run([resnet.input])
    with pytest.raises(aoc.InputError, match="must be a dict"):
        sess.run(None, resnet.input)


def test_unknown_output_name(sess, resnet):
    with pytest.raises(aoc.InputError, match="unknown output `prob`; the model's outputs are: logits"):
        sess.run(["prob"], {"input": resnet.input})


def test_missing_model_file(tmp_path):
    with pytest.raises(aoc.CompileError, match=r"cannot read .*nothing\.onnx: No such file"):
        aoc.compile(tmp_path / "nothing.onnx")


def test_missing_artifact(tmp_path):
    with pytest.raises(aoc.LoadError, match=r"nothing\.aoc"):
        aoc.load(tmp_path / "nothing.aoc")
    with pytest.raises(aoc.LoadError, match=r"nothing\.aoc"):
        aoc.Session(str(tmp_path / "nothing.aoc"))


def test_malformed_air_is_located(tmp_path):
    bad = tmp_path / "bad.air"
    bad.write_text("func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %y = core.nonsense %x : tensor<2xf32>\n  return %y\n}\n")
    with pytest.raises(aoc.CompileError) as e:
        aoc.compile(bad)
    assert f"{bad}:2:" in str(e.value), str(e.value)


def test_malformed_artifact(tmp_path, resnet):
    bad = tmp_path / "bad.aoc"
    bad.write_bytes(b"not an artifact at all")
    with pytest.raises(aoc.LoadError, match="not an aoc artifact"):
        aoc.load(bad)
    # A real artifact cut short.
    good = aoc.compile(resnet.onnx).to_bytes()
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(aoc.LoadError):
        aoc.Session(str(bad))


def test_bad_compile_options(resnet):
    with pytest.raises(aoc.CompileError, match="unknown target `z80`"):
        aoc.compile(resnet.onnx, target="z80")
    with pytest.raises(aoc.CompileError, match="precision fp16 is for GPU targets"):
        aoc.compile(resnet.onnx, precision="fp16")
    with pytest.raises(aoc.CompileError, match="unknown pass|no pass|`nonsense`"):
        aoc.compile(resnet.onnx, passes="nonsense")
    with pytest.raises(aoc.InputError, match="model must be a path"):
        aoc.compile(42)
    with pytest.raises(aoc.InputError, match="input_shapes"):
        aoc.compile(resnet.onnx, input_shapes={"input": 7})


def test_bad_onnx_bytes():
    with pytest.raises(aoc.CompileError):
        aoc.compile(b"\x08\x07garbage that is not a protobuf")


def test_session_arguments(resnet):
    art = aoc.compile(resnet.onnx)
    with pytest.raises(aoc.InputError, match="device must be None or `cpu`"):
        aoc.Session(art, device="cuda")
    with pytest.raises(aoc.InputError, match="Session takes an aoc.Artifact"):
        aoc.Session(3.5)
    with pytest.raises(aoc.InputError, match="iters must be at least 1"):
        aoc.Session(art).bench(iters=0)


def test_input_names_are_strings(sess, resnet):
    with pytest.raises(aoc.InputError, match="input names must be strings, found 0"):
        sess.run({0: resnet.input})
