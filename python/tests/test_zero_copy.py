"""What Session.run promises about copies: inputs are read in place (so
they must be C-contiguous, exactly typed and shaped: nothing is converted
quietly), and each output is a 64-byte aligned buffer the kernels wrote
into, owned by the returned array (its base), not copied out."""

from __future__ import annotations

import numpy as np

import aoc


def test_outputs_own_the_buffer_the_kernels_wrote(resnet):
    sess = aoc.Session(aoc.compile(resnet.onnx))
    y = sess.run({"input": resnet.input})["logits"]
    base = y.base
    assert type(base).__name__ == "OutputBuffer"
    assert len(base) == y.nbytes  # exactly the output, no wider staging copy
    assert not y.flags.owndata and y.flags.writeable and y.flags.c_contiguous
    assert y.ctypes.data % 64 == 0  # the runtime writes aligned outputs in place
    del base
    np.testing.assert_allclose(y, resnet.expected["logits"], atol=1e-4, rtol=1e-3)


def test_an_output_outlives_its_session(resnet):
    sess = aoc.Session(aoc.compile(resnet.onnx))
    y = sess.run({"input": resnet.input})["logits"]
    del sess
    import gc

    gc.collect()
    np.testing.assert_allclose(y, resnet.expected["logits"], atol=1e-4, rtol=1e-3)


def test_empty_gives_aligned_inputs(resnet):
    x = aoc.empty([1, 3, 32, 32])
    assert x.dtype == np.float32 and x.shape == (1, 3, 32, 32)
    assert x.ctypes.data % 64 == 0 and not x.any()
    x[...] = resnet.input
    sess = aoc.Session(aoc.compile(resnet.onnx))
    np.testing.assert_allclose(sess.run({"input": x})["logits"], resnet.expected["logits"], atol=1e-4, rtol=1e-3)
    assert aoc.empty([2, 5], np.int64).dtype == np.int64


def test_inputs_at_any_alignment_give_the_same_result(resnet):
    sess = aoc.Session(aoc.compile(resnet.onnx))
    want = sess.run({"input": resnet.input})["logits"]
    raw = np.zeros(resnet.input.nbytes + 64, dtype=np.uint8)
    for off in (4, 16, 36):
        x = raw[off : off + resnet.input.nbytes].view(np.float32).reshape(resnet.input.shape)
        x[...] = resnet.input
        np.testing.assert_array_equal(sess.run({"input": x})["logits"], want)


def test_empty_refuses_object_arrays():
    import pytest

    with pytest.raises(aoc.InputError, match="plain numbers"):
        aoc.empty([2], object)


class _DLPackOnly:
    """Speaks only DLPack, as a PyTorch CPU tensor does to NumPy."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_dlpack_inputs_are_read_in_place(resnet):
    sess = aoc.Session(aoc.compile(resnet.onnx))
    want = sess.run({"input": resnet.input})["logits"]
    np.testing.assert_array_equal(sess.run({"input": _DLPackOnly(resnet.input)})["logits"], want)
    assert np.shares_memory(np.from_dlpack(_DLPackOnly(resnet.input)), resnet.input)


class _OnAGpu:
    def __dlpack__(self, **kwargs):
        raise BufferError("the tensor is on cuda:0")

    def __dlpack_device__(self):
        return (2, 0)


def test_device_tensors_are_refused_with_the_reason(resnet):
    import pytest

    sess = aoc.Session(aoc.compile(resnet.onnx))
    # A CPU artifact refuses a CUDA tensor by name, before asking it for
    # its memory (a GPU artifact would read it on the device).
    with pytest.raises(aoc.InputError, match="input `input` is a CUDA tensor, but .* is a CPU artifact .*move it to the CPU first"):
        sess.run({"input": _OnAGpu()})
