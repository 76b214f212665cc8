#!/usr/bin/env python3
"""Small ONNX models of the forms older exporters and recurrent models use,
with ONNX Runtime's outputs, for tests/onnx_cases.rs.

    gen_onnx_cases.py OUTDIR

Writes OUTDIR/<case>/model.onnx, OUTDIR/<case>/inputs/<i>.npy (graph
inputs in order) and OUTDIR/<case>/outputs/<i>.npy (graph outputs in
order, from ONNX Runtime on the CPU with graph optimizations off). Every
model is built with onnx.helper at the opset its case names and passes
onnx.checker; weights and inputs come from a seeded generator.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(18)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def model(opset, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "case", [vi(*i) for i in inputs], [vi(*o) for o in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7 if opset >= 12 else 5
    onnx.checker.check_model(m)
    return m


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------- opsets 7 to 10


@case
def opset7_upsample_nearest():
    n = helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 1.0, 2.0, 3.0])
    return model(7, [n], [("x", [1, 2, 3, 4])], [("y", [1, 2, 6, 12])]), [rand(1, 2, 3, 4)]


@case
def opset8_upsample_linear():
    n = helper.make_node("Upsample", ["x"], ["y"], mode="linear", scales=[1.0, 1.0, 2.0, 2.0])
    return model(8, [n], [("x", [1, 2, 3, 4])], [("y", [1, 2, 6, 8])]), [rand(1, 2, 3, 4)]


@case
def opset9_upsample_scales_input():
    n = helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")
    s = init("s", np.array([1, 1, 2, 2], np.float32))
    return model(9, [n], [("x", [1, 3, 4, 4])], [("y", [1, 3, 8, 8])], [s]), [rand(1, 3, 4, 4)]


@case
def opset10_resize_nearest():
    n = helper.make_node("Resize", ["x", "s"], ["y"], mode="nearest")
    s = init("s", np.array([1, 1, 2, 3], np.float32))
    return model(10, [n], [("x", [1, 2, 3, 3])], [("y", [1, 2, 6, 9])], [s]), [rand(1, 2, 3, 3)]


@case
def opset10_resize_linear():
    n = helper.make_node("Resize", ["x", "s"], ["y"], mode="linear")
    s = init("s", np.array([1, 1, 2, 2], np.float32))
    return model(10, [n], [("x", [1, 2, 4, 3])], [("y", [1, 2, 8, 6])], [s]), [rand(1, 2, 4, 3)]


@case
def opset9_slice_attributes():
    nodes = [
        helper.make_node("Slice", ["x"], ["a"], starts=[1, 0], ends=[3, 100], axes=[1, 2]),
        helper.make_node("Slice", ["x"], ["b"], starts=[0, -2], ends=[1, 1000]),
    ]
    return model(9, nodes, [("x", [2, 4, 5])], [("a", [2, 2, 5]), ("b", [1, 2, 5])]), [rand(2, 4, 5)]


@case
def opset10_slice_steps():
    n = helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])
    inits = [
        init("st", np.array([0, 4], np.int64)),
        init("en", np.array([6, 0], np.int64)),
        init("ax", np.array([1, 2], np.int64)),
        init("sp", np.array([2, -1], np.int64)),
    ]
    return model(10, [n], [("x", [1, 6, 5])], [("y", [1, 3, 4])], inits), [rand(1, 6, 5)]


@case
def opset7_batchnorm_dropout():
    c = 3
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"], epsilon=1e-3, momentum=0.9, spatial=1),
        helper.make_node("Dropout", ["bn"], ["d"], ratio=0.3),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    inits = [
        init("w", rand(c, 2, 3, 3, scale=0.3)),
        init("g", rand(c) + 1.0),
        init("b", rand(c)),
        init("m", rand(c)),
        init("v", np.abs(rand(c)) + 0.5),
    ]
    return model(7, nodes, [("x", [1, 2, 5, 5])], [("y", [1, c, 5, 5])], inits), [rand(1, 2, 5, 5)]


@case
def opset10_dropout_mask():
    n = helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.5)
    out = [("y", [2, 3]), ("mask", [2, 3], TensorProto.BOOL)]
    return model(10, [n], [("x", [2, 3])], out), [rand(2, 3)]


@case
def opset7_dropout_mask():
    n = helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.25)
    out = [("y", [2, 3]), ("mask", [2, 3])]
    return model(7, [n], [("x", [2, 3])], out), [rand(2, 3)]


@case
def opset8_pad_attributes():
    nodes = [
        helper.make_node("Pad", ["x"], ["a"], pads=[0, 1, 2, 0, 2, 1], value=1.5),
        helper.make_node("Pad", ["x"], ["b"], pads=[0, 0, 1, 0, 0, 2]),
    ]
    out = [("a", [1, 6, 6]), ("b", [1, 3, 6])]
    return model(8, nodes, [("x", [1, 3, 3])], out), [rand(1, 3, 3)]


@case
def pad_reflect_edge_wrap():
    # Non-constant pad modes (Silero VAD's STFT pads by reflection): per
    # axis gathers in the lowering. Negative pads crop first.
    nodes = [
        helper.make_node("Pad", ["x", "p1"], ["a"], mode="reflect"),
        helper.make_node("Pad", ["x", "p2"], ["b"], mode="edge"),
        helper.make_node("Pad", ["x", "p3"], ["c"], mode="wrap"),
    ]
    inits = [
        init("p1", np.array([0, 1, 2, 0, 0, 3], np.int64)),
        init("p2", np.array([1, 0, 2, 0, 2, -1], np.int64)),
        init("p3", np.array([0, 2, 1, 0, 1, 3], np.int64)),
    ]
    out = [("a", [2, 4, 9]), ("b", [3, 5, 5]), ("c", [2, 6, 8])]
    return model(19, nodes, [("x", [2, 3, 4])], out, inits), [rand(2, 3, 4)]


@case
def opset9_clip_attributes():
    nodes = [
        helper.make_node("Clip", ["x"], ["a"], min=-0.5, max=0.25),
        helper.make_node("Clip", ["x"], ["b"], max=0.0),
    ]
    return model(9, nodes, [("x", [4, 5])], [("a", [4, 5]), ("b", [4, 5])]), [rand(4, 5)]


@case
def opset9_cnn_classifier():
    nodes = [
        helper.make_node("Conv", ["x", "w", "wb"], ["c"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    inits = [
        init("w", rand(4, 3, 3, 3, scale=0.3)),
        init("wb", rand(4)),
        init("g", rand(4) + 1.0),
        init("b", rand(4)),
        init("m", rand(4)),
        init("v", np.abs(rand(4)) + 0.5),
        init("fw", rand(5, 16, scale=0.3)),
        init("fb", rand(5)),
    ]
    return model(9, nodes, [("x", [2, 3, 9, 9])], [("y", [2, 5])], inits), [rand(2, 3, 9, 9)]


@case
def opset9_shape_ops():
    nodes = [
        helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]),
        helper.make_node("Transpose", ["u"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Squeeze", ["t"], ["s"], axes=[0]),
        helper.make_node("ReduceMean", ["s"], ["m"], axes=[2], keepdims=1),
        helper.make_node("Split", ["s"], ["s0", "s1"], axis=2, split=[1, 3]),
        helper.make_node("Concat", ["s1", "m", "s0"], ["y"], axis=2),
    ]
    return model(9, nodes, [("x", [3, 2, 4])], [("y", [2, 3, 5])]), [rand(3, 2, 4)]


# ---------------------------------------------------------------- recurrent layers

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent(op, *, seq=5, batch=2, inp=3, hidden=4, direction="forward", bias=True, seq_lens=None,
              h0=False, c0=False, peep=False, layout=0, outputs=("Y", "Y_h", "Y_c"), opset=14, **attrs):
    """One recurrent node; seq_lens (a list) becomes an int32 graph input."""
    g = GATES[op]
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = [seq, batch, inp] if layout == 0 else [batch, seq, inp]
    state = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    inits = [init("W", rand(dirs, g * hidden, inp, scale=0.5)), init("R", rand(dirs, g * hidden, hidden, scale=0.5))]
    names = ["X", "W", "R"]
    inputs = [("X", x_shape)]
    feeds = [rand(*x_shape)]
    if bias:
        inits.append(init("B", rand(dirs, 2 * g * hidden, scale=0.5)))
    names.append("B" if bias else "")
    if seq_lens is not None:
        inputs.append(("L", [batch], TensorProto.INT32))
        feeds.append(np.array(seq_lens, np.int32))
    names.append("L" if seq_lens is not None else "")
    for flag, name in [(h0, "H0"), (c0, "C0")]:
        if flag:
            inputs.append((name, state))
            feeds.append(rand(*state))
        names.append(name if flag else "")
    if peep:
        inits.append(init("P", rand(dirs, 3 * hidden, scale=0.5)))
    names.append("P" if peep else "")
    names = names[: 8 if op == "LSTM" else 6]
    while names and names[-1] == "":
        names.pop()
    outs = [o for o in outputs if op == "LSTM" or o != "Y_c"]
    node_outs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node_outs = [o if o in outs else "" for o in node_outs]
    while node_outs[-1] == "":
        node_outs.pop()
    n = helper.make_node(op, names, node_outs, direction=direction, hidden_size=hidden, **attrs)
    if layout:
        n.attribute.append(helper.make_attribute("layout", layout))
    y_shape = [seq, dirs, batch, hidden] if layout == 0 else [batch, seq, dirs, hidden]
    shapes = {"Y": y_shape, "Y_h": state, "Y_c": state}
    return model(opset, [n], inputs, [(o, shapes[o]) for o in outs], inits), feeds


@case
def lstm_forward():
    return recurrent("LSTM")


@case
def lstm_reverse_initial_states():
    return recurrent("LSTM", direction="reverse", h0=True, c0=True)


@case
def lstm_bidirectional_seq_lens_peepholes():
    return recurrent("LSTM", direction="bidirectional", seq_lens=[3, 5], h0=True, c0=True, peep=True)


@case
def lstm_no_bias_initial_states():
    # (layout = 1 is imported, but ONNX Runtime refuses it, so no case here.)
    return recurrent("LSTM", bias=False, h0=True, c0=True)


@case
def lstm_input_forget_clip():
    return recurrent("LSTM", input_forget=1, clip=0.7)


@case
def lstm_activations():
    return recurrent("LSTM", direction="bidirectional", activations=[
        "HardSigmoid", "LeakyRelu", "Softsign", "Sigmoid", "ScaledTanh", "Affine"],
        activation_alpha=[0.3, 0.2, 0.9, 1.5], activation_beta=[0.4, 0.7, 0.1])


@case
def lstm_only_last_state():
    return recurrent("LSTM", outputs=("Y_h",), h0=True)


@case
def gru_forward():
    return recurrent("GRU")


@case
def gru_bidirectional_linear_before_reset_seq_lens():
    return recurrent("GRU", direction="bidirectional", linear_before_reset=1, seq_lens=[5, 2], h0=True)


@case
def gru_reverse_activations():
    return recurrent("GRU", direction="reverse", activations=["Relu", "Elu"], activation_alpha=[0.5], h0=True)


@case
def gru_seq_lens_no_bias():
    return recurrent("GRU", bias=False, seq_lens=[4, 1])


@case
def rnn_forward():
    return recurrent("RNN")


@case
def rnn_bidirectional_seq_lens():
    return recurrent("RNN", direction="bidirectional", seq_lens=[2, 5], h0=True,
                     activations=["Relu", "Softplus"])


@case
def rnn_reverse_thresholded_clip():
    return recurrent("RNN", direction="reverse", activations=["ThresholdedRelu"], activation_alpha=[0.1], clip=1.0)


@case
def opset9_lstm():
    return recurrent("LSTM", opset=9, h0=True, c0=True)


# ---------------------------------------------------------------- ops imported as compositions


@case
def depth_to_space_dcr_crd():
    nodes = [
        helper.make_node("DepthToSpace", ["x"], ["a"], blocksize=2),
        helper.make_node("DepthToSpace", ["x"], ["b"], blocksize=2, mode="CRD"),
    ]
    out = [("a", [1, 2, 6, 4]), ("b", [1, 2, 6, 4])]
    return model(13, nodes, [("x", [1, 8, 3, 2])], out), [rand(1, 8, 3, 2)]


@case
def space_to_depth():
    n = helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)
    return model(13, [n], [("x", [2, 3, 4, 6])], [("y", [2, 12, 2, 3])]), [rand(2, 3, 4, 6)]


@case
def instance_norm():
    n = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)
    inits = [init("s", rand(3)), init("b", rand(3))]
    return model(13, [n], [("x", [2, 3, 4, 5])], [("y", [2, 3, 4, 5])], inits), [rand(2, 3, 4, 5)]


@case
def group_norm_per_channel():
    n = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-4)
    inits = [init("s", rand(6)), init("b", rand(6))]
    return model(21, [n], [("x", [2, 6, 3, 3])], [("y", [2, 6, 3, 3])], inits), [rand(2, 6, 3, 3)]


@case
def group_norm_conv1d():
    # wav2vec2's feature extractor: a grouped Conv1d then GroupNorm with one
    # group per channel, on [N, C, T].
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3], strides=[2]),
        helper.make_node("GroupNormalization", ["c", "s", "b"], ["y"], num_groups=4),
    ]
    inits = [init("w", rand(4, 1, 3, scale=0.5)), init("s", rand(4)), init("b", rand(4))]
    return model(21, nodes, [("x", [1, 1, 17])], [("y", [1, 4, 8])], inits), [rand(1, 1, 17)]


@case
def cumsum_variants():
    nodes = [
        helper.make_node("CumSum", ["x", "a1"], ["p"]),
        helper.make_node("CumSum", ["x", "a0"], ["q"], exclusive=1),
        helper.make_node("CumSum", ["x", "a1"], ["r"], reverse=1),
        helper.make_node("CumSum", ["x", "am1"], ["s"], reverse=1, exclusive=1),
    ]
    inits = [init("a0", np.array(0, np.int64)), init("a1", np.array(1, np.int32)), init("am1", np.array(-1, np.int64))]
    out = [(o, [3, 5]) for o in "pqrs"]
    return model(14, nodes, [("x", [3, 5])], out, inits), [rand(3, 5)]


@case
def argmax_argmin():
    x = rand(2, 5, 3)
    x[0, 1, 2] = x[0, 3, 2] = 9.0  # a tie: the first or the last index
    x[1, 0, 0] = x[1, 4, 0] = -9.0
    nodes = [
        helper.make_node("ArgMax", ["x"], ["a"], axis=1),
        helper.make_node("ArgMax", ["x"], ["b"], axis=1, keepdims=0, select_last_index=1),
        helper.make_node("ArgMin", ["x"], ["c"], axis=-2, keepdims=0),
        helper.make_node("ArgMin", ["x"], ["d"], axis=2, select_last_index=1),
    ]
    i64 = TensorProto.INT64
    out = [("a", [2, 1, 3], i64), ("b", [2, 3], i64), ("c", [2, 3], i64), ("d", [2, 5, 1], i64)]
    return model(13, nodes, [("x", [2, 5, 3])], out), [x]


@case
def int_mask_argmax_cumsum():
    """What exporters write for token ids and masks: `(ids == eos).int()
    .argmax(-1)` and position ids as `mask.cumsum(1) * mask` (int32)."""
    ids = np.array([[5, 2, 7, 2, 0, 0], [1, 1, 3, 9, 2, 4]], np.int32)
    i32, i64 = TensorProto.INT32, TensorProto.INT64
    nodes = [
        helper.make_node("ArgMax", ["ids"], ["a"], axis=1, keepdims=0),
        helper.make_node("ArgMin", ["ids"], ["b"], axis=-1, select_last_index=1),
        helper.make_node("CumSum", ["ids", "ax"], ["c"]),
        helper.make_node("CumSum", ["ids", "ax"], ["d"], exclusive=1, reverse=1),
    ]
    out = [("a", [2], i64), ("b", [2, 1], i64), ("c", [2, 6], i32), ("d", [2, 6], i32)]
    return model(14, nodes, [("ids", [2, 6], i32)], out, [init("ax", np.array(1, np.int64))]), [ids]


@case
def one_hot():
    n = helper.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=1)
    inits = [init("depth", np.array(5, np.int64)), init("v", np.array([-1.0, 2.5], np.float32))]
    idx = np.array([[0, 4, -1], [2, -5, 3]], np.int64)
    return model(11, [n], [("i", [2, 3], TensorProto.INT64)], [("y", [2, 5, 3])], inits), [idx]


@case
def einsum_forms():
    nodes = [
        helper.make_node("Einsum", ["a", "b"], ["mm"], equation="bij,bjk->bik"),
        helper.make_node("Einsum", ["q", "k"], ["att"], equation="bhqd,bhkd->bhqk"),
        helper.make_node("Einsum", ["a"], ["t"], equation="bij->jb"),
        helper.make_node("Einsum", ["a", "b"], ["outer"], equation="bij,bjk"),
        helper.make_node("Einsum", ["q", "k"], ["ell"], equation="...qd,...kd->...qk"),
        helper.make_node("Einsum", ["a", "c"], ["dot"], equation="bij,j->bi"),
    ]
    inputs = [("a", [2, 3, 4]), ("b", [2, 4, 5]), ("q", [1, 2, 3, 4]), ("k", [1, 2, 6, 4]), ("c", [4])]
    out = [("mm", [2, 3, 5]), ("att", [1, 2, 3, 6]), ("t", [4, 2]), ("outer", [3, 5]),
           ("ell", [1, 2, 3, 6]), ("dot", [2, 3])]
    return model(12, nodes, inputs, out), [rand(*s) for _, s in inputs]


# ---------------------------------------------------------------- If known at import time


def branches(out_shape):
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t0"]), helper.make_node("Add", ["t0", "one"], ["then_out"])],
        "then", [], [vi("then_out", out_shape)], [init("one", np.array(1.0, np.float32))])
    other = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["else_out"])], "else", [], [vi("else_out", out_shape)])
    return then, other


@case
def if_constant_condition():
    then, other = branches([2, 3])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    return model(13, nodes, [("x", [2, 3])], [("y", [2, 3])], [init("c", np.array(False))]), [rand(2, 3)]


@case
def if_condition_from_shape():
    # What exporters write for shape-dependent Python branches: the
    # condition folds at import time, and the chosen branch is inlined.
    then, other = branches([4, 3])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Greater", ["d0", "two"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Sigmoid", ["y"], ["z"]),
    ]
    inits = [init("zero", np.array(0, np.int64)), init("two", np.array(2, np.int64))]
    return model(13, nodes, [("x", [4, 3])], [("z", [4, 3])], inits), [rand(4, 3)]


# ---------------------------------------------------------------- control flow at run time


@case
def if_runtime_condition():
    # The condition depends on the input: core.if, both branches compiled;
    # the then branch has its own initializer, the else branch reads x from
    # the enclosing graph. Two inputs exercise both branches.
    then, other = branches([2, 3])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Add", ["y", "x"], ["z"]),
    ]
    x = rand(2, 3)
    x = x if x.sum() > 0 else -x
    return model(13, nodes, [("x", [2, 3])], [("z", [2, 3])], [init("zero", np.array(0.0, np.float32))]), [x]


@case
def if_runtime_condition_else():
    then, other = branches([2, 3])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    x = rand(2, 3)
    x = -x if x.sum() > 0 else x
    return model(13, nodes, [("x", [2, 3])], [("y", [2, 3])], [init("zero", np.array(0.0, np.float32))]), [x]


def lstm_in_if(positive):
    # Silero VAD's shape: an If on a run-time input whose branches hold
    # recurrent layers (forward in one, reverse in the other) reading the
    # enclosing graph's weights; the layers are expanded inside the regions.
    def branch(name, direction):
        lstm = helper.make_node("LSTM", ["X", "W", "R", "B"], ["", f"{name}_h"], direction=direction, hidden_size=5)
        return helper.make_graph([lstm], name, [], [vi(f"{name}_h", [1, 1, 5])])
    nodes = [
        helper.make_node("ReduceSum", ["X"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=branch("fwd", "forward"), else_branch=branch("rev", "reverse")),
    ]
    inits = [
        init("zero", np.array(0.0, np.float32)),
        init("W", rand(1, 20, 4, scale=0.5)),
        init("R", rand(1, 20, 5, scale=0.5)),
        init("B", rand(1, 40, scale=0.5)),
    ]
    x = rand(3, 1, 4)
    x = x if (x.sum() > 0) == positive else -x
    return model(14, nodes, [("X", [3, 1, 4])], [("y", [1, 1, 5])], inits), [x]


@case
def lstm_in_runtime_if_then():
    return lstm_in_if(True)


@case
def lstm_in_runtime_if_else():
    return lstm_in_if(False)


def loop_body(nodes, carried, scans, inits=()):
    inputs = [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL)] + [vi(*c) for c in carried]
    outputs = [vi("cond_out", [], TensorProto.BOOL)] + [vi(*sc) for sc in scans]
    return helper.make_graph(nodes, "body", inputs, outputs, list(inits))


@case
def loop_carried_and_scan():
    # Four iterations (constant trip count): acc += x * w each time, the
    # doubled running value and the iteration number are scanned.
    body = loop_body(
        [
            helper.make_node("Mul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["acc", "xw"], ["acc_next"]),
            helper.make_node("Add", ["acc_next", "acc_next"], ["twice"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["i"], ["i_out"]),
        ],
        [("acc", [2, 3])],
        [("acc_next", [2, 3]), ("twice", [2, 3]), ("i_out", [], TensorProto.INT64)],
    )
    nodes = [helper.make_node("Loop", ["m", "", "a0"], ["acc_final", "twice_all", "is"], body=body)]
    inits = [init("m", np.array(4, np.int64)), init("w", rand(2, 3))]
    out = [("acc_final", [2, 3]), ("twice_all", [4, 2, 3]), ("is", [4])]
    m = model(13, nodes, [("x", [2, 3]), ("a0", [2, 3])], [], inits)
    m.graph.output.extend([vi("acc_final", [2, 3]), vi("twice_all", [4, 2, 3]), vi("is", [4], TensorProto.INT64)])
    return m, [rand(2, 3), rand(2, 3)]


@case
def loop_stops_on_condition():
    # A while loop: no trip count, runs until the sum passes a bound the
    # input decides; two carried values, one swapped each iteration.
    body = loop_body(
        [
            helper.make_node("Add", ["a", "one"], ["a_next"]),
            helper.make_node("ReduceSum", ["a_next"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "limit"], ["cond_out"]),
        ],
        [("a", [3]), ("b", [3])],
        [("a_next", [3]), ("a", [3])],
        [init("one", np.array(1.0, np.float32))],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["limit0"], keepdims=0),
        helper.make_node("Abs", ["limit0"], ["limit1"]),
        helper.make_node("Add", ["limit1", "ten"], ["limit"]),
        helper.make_node("Loop", ["", "t", "x", "x"], ["a_final", "b_final"], body=body),
    ]
    inits = [init("t", np.array(True)), init("ten", np.array(10.0, np.float32))]
    return model(13, nodes, [("x", [3])], [("a_final", [3]), ("b_final", [3])], inits), [rand(3)]


@case
def loop_with_if_inside():
    # An If inside a loop body on a carried float counter (the first two
    # iterations add, the rest halve): nested regions, the If reading the
    # body's values. (The iteration number is i64, and i64 pointwise math
    # has no CPU kernel yet.)
    then = helper.make_graph([helper.make_node("Add", ["acc", "x"], ["t_out"])], "then", [], [vi("t_out", [2])])
    other = helper.make_graph([helper.make_node("Mul", ["acc", "half"], ["e_out"])], "else", [], [vi("e_out", [2])],
                              [init("half", np.array(0.5, np.float32))])
    body = loop_body(
        [
            helper.make_node("Less", ["k", "two"], ["early"]),
            helper.make_node("If", ["early"], ["acc_next"], then_branch=then, else_branch=other),
            helper.make_node("Add", ["k", "one"], ["k_next"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        [("acc", [2]), ("k", [])],
        [("acc_next", [2]), ("k_next", [])],
        [init("one", np.array(1.0, np.float32))],
    )
    nodes = [helper.make_node("Loop", ["m", "", "a0", "k0"], ["acc_final", "k_final"], body=body)]
    inits = [init("m", np.array(5, np.int64)), init("two", np.array(1.5, np.float32)), init("k0", np.array(0.0, np.float32))]
    return model(13, nodes, [("x", [2]), ("a0", [2])], [("acc_final", [2]), ("k_final", [])], inits), [rand(2), rand(2)]


@case
def loop_counter_arithmetic():
    # The body computes on its iteration number: i*i, its Mod 3, a running
    # i64 sum, the condition `i < 4` (with trip count 5 both end together),
    # the sum cast to float into a float accumulator; i*i is scanned.
    body = loop_body(
        [
            helper.make_node("Mul", ["i", "i"], ["sq"]),
            helper.make_node("Mod", ["sq", "three"], ["r"]),
            helper.make_node("Add", ["k", "r"], ["k_next"]),
            helper.make_node("Cast", ["k_next"], ["kf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["acc", "kf"], ["acc_next"]),
            helper.make_node("Less", ["i", "four"], ["cond_out"]),
        ],
        [("acc", [2]), ("k", [], TensorProto.INT64)],
        [("acc_next", [2]), ("k_next", [], TensorProto.INT64), ("sq", [], TensorProto.INT64)],
        [init("three", np.array(3, np.int64)), init("four", np.array(4, np.int64))],
    )
    nodes = [helper.make_node("Loop", ["m", "t", "a0", "k0"], ["acc_final", "k_final", "sqs"], body=body)]
    inits = [init("m", np.array(5, np.int64)), init("t", np.array(True)), init("k0", np.array(-2, np.int64))]
    outs = [("acc_final", [2]), ("k_final", [], TensorProto.INT64), ("sqs", [5], TensorProto.INT64)]
    return model(13, nodes, [("a0", [2])], outs, inits), [rand(2)]


@case
def loop_while_on_integers():
    # A while loop on integer state: k += i + 1 until 2k reaches the i64
    # input `limit`; an i32 vector is updated with Div, Sub, Max and Min.
    body = loop_body(
        [
            helper.make_node("Add", ["i", "one"], ["i1"]),
            helper.make_node("Add", ["k", "i1"], ["k_next"]),
            helper.make_node("Mul", ["k_next", "two"], ["k2"]),
            helper.make_node("Less", ["k2", "limit"], ["cond_out"]),
            helper.make_node("Div", ["v", "three32"], ["q"]),
            helper.make_node("Mul", ["v", "two32"], ["v2"]),
            helper.make_node("Sub", ["v2", "q"], ["d"]),
            helper.make_node("Max", ["d", "lo32"], ["d1"]),
            helper.make_node("Min", ["d1", "hi32"], ["v_next"]),
        ],
        [("k", [], TensorProto.INT64), ("v", [4], TensorProto.INT32)],
        [("k_next", [], TensorProto.INT64), ("v_next", [4], TensorProto.INT32)],
        [
            init("one", np.array(1, np.int64)),
            init("two", np.array(2, np.int64)),
            init("three32", np.array(3, np.int32)),
            init("two32", np.array(2, np.int32)),
            init("lo32", np.array(-1000, np.int32)),
            init("hi32", np.array(1000, np.int32)),
        ],
    )
    nodes = [helper.make_node("Loop", ["", "t", "k0", "v0"], ["k_final", "v_final"], body=body)]
    inits = [init("t", np.array(True)), init("k0", np.array(0, np.int64))]
    ins = [("limit", [], TensorProto.INT64), ("v0", [4], TensorProto.INT32)]
    outs = [("k_final", [], TensorProto.INT64), ("v_final", [4], TensorProto.INT32)]
    return model(13, nodes, ins, outs, inits), [np.array(40, np.int64), np.array([-7, 5, 100, -250], np.int32)]


# ---------------------------------------------------------------- integer pointwise


@case
def int_pointwise():
    # Integer arithmetic and comparisons on i64 (values past 2^24 and 2^32,
    # a product past 2^53, negative dividends and divisors) and i32,
    # broadcast. (ONNX Runtime's integer `fmod` goes through doubles, so
    # dividends stay below 2^53.)
    a = np.array([[-7, 9000000000123, 5], [2**52 + 1, -3, 0]], np.int64)
    b = np.array([2, -4, 3], np.int64)
    c = np.array([[1, -20, 33], [-2**31 + 5, 5, 2**30]], np.int32)
    d = np.array([-3, 7, 4], np.int32)
    ops = [
        ("Add", "a", "b", "add", TensorProto.INT64),
        ("Sub", "a", "b", "sub", TensorProto.INT64),
        ("Mul", "a", "b", "mul", TensorProto.INT64),
        ("Div", "a", "b", "div", TensorProto.INT64),
        ("Mod", "a", "b", "mod", TensorProto.INT64),
        ("Min", "a", "b", "min", TensorProto.INT64),
        ("Max", "a", "b", "max", TensorProto.INT64),
        ("Less", "a", "b", "lt", TensorProto.BOOL),
        ("Greater", "a", "b", "gt", TensorProto.BOOL),
        ("Equal", "a", "a", "eq", TensorProto.BOOL),
        ("Add", "c", "d", "add32", TensorProto.INT32),
        ("Mul", "c", "d", "mul32", TensorProto.INT32),
        ("Div", "c", "d", "div32", TensorProto.INT32),
        ("Mod", "c", "d", "mod32", TensorProto.INT32),
        ("Less", "c", "d", "lt32", TensorProto.BOOL),
    ]
    nodes = [helper.make_node(op, [x, y], [o]) for op, x, y, o, _ in ops]
    nodes += [
        helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1),
        helper.make_node("Mod", ["c", "d"], ["fmod32"], fmod=1),
        helper.make_node("Where", ["lt", "a", "b"], ["where"]),
        helper.make_node("Neg", ["a"], ["neg"]),
        helper.make_node("Abs", ["c"], ["abs32"]),
        helper.make_node("Cast", ["a"], ["a32"], to=TensorProto.INT32),
    ]
    outs = [(o, [2, 3], t) for _, _, _, o, t in ops] + [
        ("fmod", [2, 3], TensorProto.INT64),
        ("fmod32", [2, 3], TensorProto.INT32),
        ("where", [2, 3], TensorProto.INT64),
        ("neg", [2, 3], TensorProto.INT64),
        ("abs32", [2, 3], TensorProto.INT32),
        ("a32", [2, 3], TensorProto.INT32),
    ]
    ins = [("a", [2, 3], TensorProto.INT64), ("b", [3], TensorProto.INT64), ("c", [2, 3], TensorProto.INT32), ("d", [3], TensorProto.INT32)]
    return model(13, nodes, ins, outs), [a, b, c, d]


@case
def gather_elements():
    # Along the last axis with negative indices (i64), along axis 0 of a
    # 3-D tensor with i32 indices smaller than data off the axis.
    nodes = [
        helper.make_node("GatherElements", ["x", "i"], ["y"], axis=-1),
        helper.make_node("GatherElements", ["z", "j"], ["w"], axis=0),
    ]
    i = np.array([[0, -1], [3, 1], [-4, 2]], np.int64)
    j = np.array([[[1, 0, 2]], [[2, 2, -3]]], np.int32)
    ins = [("x", [3, 4]), ("i", [3, 2], TensorProto.INT64), ("z", [3, 2, 3]), ("j", [2, 1, 3], TensorProto.INT32)]
    return model(13, nodes, ins, [("y", [3, 2]), ("w", [2, 1, 3])]), [rand(3, 4), i, rand(3, 2, 3), j]


@case
def scatter_elements():
    # Constant indices (negative ones too) into run-time data and updates:
    # plain writes along the last axis; along axis 0, where two updates
    # land on one element, each reduction (add, mul, max, min).
    nodes = [
        helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1),
        helper.make_node("ScatterElements", ["x", "j", "v"], ["s"], axis=0, reduction="add"),
        helper.make_node("ScatterElements", ["x", "j", "v"], ["p"], axis=0, reduction="mul"),
        helper.make_node("ScatterElements", ["x", "j", "v"], ["hi"], axis=0, reduction="max"),
        helper.make_node("ScatterElements", ["x", "j", "v"], ["lo"], axis=0, reduction="min"),
    ]
    inits = [
        init("i", np.array([[0, -1], [2, 1], [-4, 3]], np.int64)),
        init("j", np.array([[1, 0, 2, 2], [1, 2, 0, -1]], np.int64)),
    ]
    ins = [("x", [3, 4]), ("u", [3, 2]), ("v", [2, 4])]
    outs = [("y", [3, 4]), ("s", [3, 4]), ("p", [3, 4]), ("hi", [3, 4]), ("lo", [3, 4])]
    return model(18, nodes, ins, outs, inits), [rand(3, 4), rand(3, 2), rand(2, 4)]


@case
def scatter_nd():
    # Rows of a 3-D tensor replaced by constant index pairs; whole slices
    # added, one slice twice.
    nodes = [
        helper.make_node("ScatterND", ["x", "i", "u"], ["y"]),
        helper.make_node("ScatterND", ["x", "j", "v"], ["s"], reduction="add"),
    ]
    inits = [
        init("i", np.array([[0, 1], [2, 0], [1, 2]], np.int64)),
        init("j", np.array([[1], [0], [1]], np.int64)),
    ]
    ins = [("x", [3, 3, 4]), ("u", [3, 4]), ("v", [3, 3, 4])]
    outs = [("y", [3, 3, 4]), ("s", [3, 3, 4])]
    return model(16, nodes, ins, outs, inits), [rand(3, 3, 4), rand(3, 4), rand(3, 3, 4)]


@case
def top_k():
    # Largest 3 along the last axis with a tie (the lower index first),
    # smallest 2 along axis 0 unsorted, k from a constant input.
    x = rand(3, 5)
    x[1, 3] = x[1, 1]
    x[1, 1] = x[1, 3] = x[1].max() + 1.0
    nodes = [
        helper.make_node("TopK", ["x", "k3"], ["v", "i"]),
        helper.make_node("TopK", ["x", "k2"], ["w", "j"], axis=0, largest=0, sorted=1),
    ]
    inits = [init("k3", np.array([3], np.int64)), init("k2", np.array([2], np.int64))]
    outs = [("v", [3, 3]), ("i", [3, 3], TensorProto.INT64), ("w", [2, 5]), ("j", [2, 5], TensorProto.INT64)]
    return model(11, nodes, [("x", [3, 5])], outs, inits), [x]


@case
def scatter_run_time_indices():
    # Indices as graph inputs: ScatterElements (none, add, max; negative
    # and repeated indices) and ScatterND (none, add).
    nodes = [
        helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1),
        helper.make_node("ScatterElements", ["x", "j", "v"], ["s"], axis=0, reduction="add"),
        helper.make_node("ScatterElements", ["x", "j", "v"], ["hi"], axis=0, reduction="max"),
        helper.make_node("ScatterND", ["z", "k", "w"], ["t"]),
        helper.make_node("ScatterND", ["z", "k", "w"], ["ta"], reduction="add"),
    ]
    i = np.array([[0, -1], [2, 1], [-4, 3]], np.int64)
    j = np.array([[1, 0, 2, 2], [1, 2, 0, -1]], np.int64)
    k = np.array([[0, 1], [2, -3], [1, 2]], np.int64)
    ins = [("x", [3, 4]), ("i", [3, 2], TensorProto.INT64), ("u", [3, 2]), ("j", [2, 4], TensorProto.INT64), ("v", [2, 4]),
           ("z", [3, 3, 4]), ("k", [3, 2], TensorProto.INT64), ("w", [3, 4])]
    outs = [("y", [3, 4]), ("s", [3, 4]), ("hi", [3, 4]), ("t", [3, 3, 4]), ("ta", [3, 3, 4])]
    return model(18, nodes, ins, outs), [rand(3, 4), i, rand(3, 2), j, rand(2, 4), rand(3, 3, 4), k, rand(3, 4)]


@case
def scan_reverse_axes():
    # Two state variables, two scan inputs (one scanned along axis 1 in
    # reverse), three scan outputs: one reversed, one stacked on axis 1,
    # one on axis -1.
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "a"], ["s_sum"]),
            helper.make_node("Mul", ["s_sum", "b"], ["s_out"]),
            helper.make_node("Mul", ["p_in", "a"], ["p_out"]),
            helper.make_node("Identity", ["s_out"], ["y0"]),
            helper.make_node("Sub", ["a", "b"], ["y1"]),
            helper.make_node("Add", ["p_out", "s_out"], ["y2"]),
        ],
        "body",
        [vi("s_in", [3]), vi("p_in", [3]), vi("a", [3]), vi("b", [3])],
        [vi("s_out", [3]), vi("p_out", [3]), vi("y0", [3]), vi("y1", [3]), vi("y2", [3])],
    )
    node = helper.make_node(
        "Scan", ["s0", "p0", "xa", "xb"], ["s", "p", "o0", "o1", "o2"], body=body, num_scan_inputs=2,
        scan_input_axes=[0, 1], scan_input_directions=[0, 1], scan_output_axes=[0, 1, -1],
        scan_output_directions=[1, 0, 0],
    )
    ins = [("s0", [3]), ("p0", [3]), ("xa", [4, 3]), ("xb", [3, 4])]
    outs = [("s", [3]), ("p", [3]), ("o0", [4, 3]), ("o1", [3, 4]), ("o2", [3, 4])]
    return model(16, [node], ins, outs), [rand(3), rand(3), rand(4, 3), rand(3, 4)]


@case
def scan_opset8_batch():
    # The opset-8 form: a batch axis first, `directions`, no sequence_lens.
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"]), helper.make_node("Mul", ["s_out", "x"], ["y"])],
        "body", [vi("s_in", [2]), vi("x", [2])], [vi("s_out", [2]), vi("y", [2])],
    )
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "y"], body=body, num_scan_inputs=1, directions=[1])
    return model(8, [node], [("s0", [3, 2]), ("x", [3, 5, 2])], [("s", [3, 2]), ("y", [3, 5, 2])]), [rand(3, 2), rand(3, 5, 2)]


@case
def nonzero_constant_folds():
    # NonZero of a constant mask folds at import; its indices feed a Gather.
    mask = np.array([[0, 1, 0, 2], [3, 0, 0, 4]], np.float32)
    nodes = [
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Gather", ["x", "nz"], ["y"], axis=1),
    ]
    return model(13, nodes, [("x", [2, 4])], [("y", [2, 2, 4])], [init("mask", mask)]), [rand(2, 4)]


@case
def grid_sample_opset16():
    # Every mode, padding and align_corners of opset 16's spelling; the
    # grid reaches past [-1, 1] so every padding mode matters.
    nodes, outs = [], []
    for mode in ["bilinear", "nearest", "bicubic"]:
        for pad in ["zeros", "border", "reflection"]:
            for align in [0, 1]:
                y = f"y_{mode}_{pad}_{align}"
                nodes.append(helper.make_node("GridSample", ["x", "g"], [y], mode=mode, padding_mode=pad, align_corners=align))
                outs.append((y, [2, 3, 4, 5]))
    grid = RNG.uniform(-1.6, 1.6, (2, 4, 5, 2)).astype(np.float32)
    grid[0, 0, 0] = [0.0, 0.0]
    grid[0, 0, 1] = [1.0, -1.0]
    return model(16, nodes, [("x", [2, 3, 6, 7]), ("g", [2, 4, 5, 2])], outs), [rand(2, 3, 6, 7), grid]


@case
def grid_sample_opset20():
    # Opset 20's names (linear, cubic) and the default mode.
    nodes = [
        helper.make_node("GridSample", ["x", "g"], ["y0"]),
        helper.make_node("GridSample", ["x", "g"], ["y1"], mode="cubic", padding_mode="border", align_corners=1),
        helper.make_node("GridSample", ["x", "g"], ["y2"], mode="nearest", padding_mode="reflection"),
    ]
    grid = RNG.uniform(-1.3, 1.3, (1, 3, 8, 2)).astype(np.float32)
    outs = [(y, [1, 2, 3, 8]) for y in ["y0", "y1", "y2"]]
    return model(20, nodes, [("x", [1, 2, 5, 4]), ("g", [1, 3, 8, 2])], outs), [rand(1, 2, 5, 4), grid]


@case
def grid_sample_volumetric():
    # 5-D inputs (opset 20): trilinear and nearest (ONNX Runtime has no
    # 5-D cubic mode to compare with).
    nodes = [
        helper.make_node("GridSample", ["x", "g"], ["y0"], padding_mode="reflection"),
        helper.make_node("GridSample", ["x", "g"], ["y1"], mode="nearest", align_corners=1),
        helper.make_node("GridSample", ["x", "g"], ["y2"], padding_mode="border", align_corners=1),
    ]
    grid = RNG.uniform(-1.3, 1.3, (2, 2, 3, 4, 3)).astype(np.float32)
    outs = [(y, [2, 3, 2, 3, 4]) for y in ["y0", "y1", "y2"]]
    return model(20, nodes, [("x", [2, 3, 4, 5, 3]), ("g", [2, 2, 3, 4, 3])], outs), [rand(2, 3, 4, 5, 3), grid]


# ---------------------------------------------------------------- external names


@case
def activations_without_ops():
    # Activations and predicates the importer composes from other ops, on
    # values out to ±100 (Softplus's exp(x) overflows there), exact zeros
    # (Sign, Shrink's bounds), and Round's ties (to even).
    nodes = [
        helper.make_node("Softplus", ["x"], ["softplus"]),
        helper.make_node("Softsign", ["x"], ["softsign"]),
        helper.make_node("Elu", ["x"], ["elu"], alpha=0.7),
        helper.make_node("Celu", ["x"], ["celu"], alpha=1.5),
        helper.make_node("Selu", ["x"], ["selu"]),
        helper.make_node("ThresholdedRelu", ["x"], ["thresholded"], alpha=0.5),
        helper.make_node("Mish", ["x"], ["mish"]),
        helper.make_node("Shrink", ["x"], ["shrink"], bias=0.25, lambd=1.0),
        helper.make_node("Sign", ["x"], ["sign"]),
        helper.make_node("IsNaN", ["x"], ["isnan"]),
        helper.make_node("IsInf", ["x"], ["isinf"], detect_negative=0),
        helper.make_node("Round", ["x"], ["round"]),
        helper.make_node("Sin", ["x"], ["sin"]),
        helper.make_node("Cos", ["x"], ["cos"]),
        helper.make_node("Hardmax", ["x"], ["hardmax"]),
    ]
    x = rand(4, 16, scale=3.0)
    x[0, :10] = [100.0, -100.0, 0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5]
    x[1, 3] = x[1, 7] = 50.0  # a tie: Hardmax marks the first
    names = ["softplus", "softsign", "elu", "celu", "selu", "thresholded", "mish", "shrink", "sign", "round", "sin", "cos", "hardmax"]
    outs = [(y, [4, 16]) for y in names] + [(y, [4, 16], TensorProto.BOOL) for y in ["isnan", "isinf"]]
    return model(18, nodes, [("x", [4, 16])], outs), [x]


@case
def normalizations_tile_trilu():
    # LpNormalization (a zero row: zeros, not NaN), MeanVarianceNormalization,
    # RMSNormalization (opset 23), Tile and Trilu with a constant k.
    nodes = [
        helper.make_node("LpNormalization", ["x"], ["l2"], axis=-1, p=2),
        helper.make_node("LpNormalization", ["x"], ["l1"], axis=1, p=1),
        helper.make_node("MeanVarianceNormalization", ["x"], ["mvn"], axes=[0, 2]),
        helper.make_node("RMSNormalization", ["x", "scale"], ["rms"], axis=-1, epsilon=1e-3),
        helper.make_node("Tile", ["x", "reps"], ["tiled"]),
        helper.make_node("Trilu", ["x", "k"], ["upper"]),
        helper.make_node("Trilu", ["x", "k"], ["lower"], upper=0),
    ]
    x = rand(2, 3, 5)
    x[1, 2, :] = 0.0
    inits = [init("scale", rand(5)), init("reps", np.array([2, 1, 3], np.int64)), init("k", np.array(-1, np.int64))]
    outs = [("l2", [2, 3, 5]), ("l1", [2, 3, 5]), ("mvn", [2, 3, 5]), ("rms", [2, 3, 5]), ("tiled", [4, 3, 15]),
            ("upper", [2, 3, 5]), ("lower", [2, 3, 5])]
    return model(23, nodes, [("x", [2, 3, 5])], outs, inits), [x]


@case
def attention_op():
    # Opset 23's Attention: 3-D inputs with grouped heads and a causal mask,
    # and 4-D inputs with a past cache, a float mask and a softcap.
    nodes = [
        helper.make_node("Attention", ["q3", "k3", "v3"], ["y3"], is_causal=1, q_num_heads=4, kv_num_heads=2),
        helper.make_node("Attention", ["q4", "k4", "v4", "mask", "pk", "pv"], ["y4", "present_k", "present_v"],
                         softcap=3.0, scale=0.3),
    ]
    inits = [init("mask", rand(1, 2, 3, 7)), init("pk", rand(1, 2, 4, 8)), init("pv", rand(1, 2, 4, 6))]
    inputs = [("q3", [2, 5, 32]), ("k3", [2, 5, 16]), ("v3", [2, 5, 16]),
              ("q4", [1, 2, 3, 8]), ("k4", [1, 2, 3, 8]), ("v4", [1, 2, 3, 6])]
    outs = [("y3", [2, 5, 32]), ("y4", [1, 2, 3, 6]), ("present_k", [1, 2, 7, 8]), ("present_v", [1, 2, 7, 6])]
    return model(23, nodes, inputs, outs, inits), [rand(*shape) for _, shape in inputs]


@case
def gather_nd():
    # GatherND with run-time indices (negative ones count from the end):
    # pairs of coordinates into a 3-D tensor, and one coordinate per batch
    # row with batch_dims 1.
    nodes = [
        helper.make_node("GatherND", ["x", "i2"], ["rows"]),
        helper.make_node("GatherND", ["x", "i1"], ["batched"], batch_dims=1),
    ]
    i2 = np.array([[[0, 1], [2, -1]], [[-3, 0], [1, 2]]], dtype=np.int64)
    i1 = np.array([[[2], [0]], [[-1], [1]], [[0], [0]]], dtype=np.int64)
    inputs = [("x", [3, 3, 4]), ("i2", [2, 2, 2], TensorProto.INT64), ("i1", [3, 2, 1], TensorProto.INT64)]
    outs = [("rows", [2, 2, 4]), ("batched", [3, 2, 4])]
    return model(13, nodes, inputs, outs), [rand(3, 3, 4), i2, i1]


@case
def names_with_colons():
    nodes = [
        helper.make_node("Relu", ["input:0"], ["hidden"]),
        helper.make_node("Add", ["hidden", "input:0"], ["output:0"]),
    ]
    return model(13, nodes, [("input:0", [2, 3])], [("output:0", [2, 3])]), [rand(2, 3)]


def write(out_dir, name, m, inputs):
    d = os.path.join(out_dir, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(d, "outputs"), exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    for i, x in enumerate(inputs):
        np.save(os.path.join(d, "inputs", f"{i}.npy"), x)
    for i, y in enumerate(sess.run(None, feeds)):
        np.save(os.path.join(d, "outputs", f"{i}.npy"), y)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    for name, fn in CASES.items():
        m, inputs = fn()
        write(sys.argv[1], name, m, inputs)
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
