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
