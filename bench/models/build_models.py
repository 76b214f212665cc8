#!/usr/bin/env python3
"""Builds ResNet-50 and a BERT-base encoder as ONNX graphs with seeded random
weights, shaped the way PyTorch's exporter writes them (batch norms kept as
BatchNormalization nodes, Erf-GELU, LayerNormalization, attention through
MatMul/Reshape/Transpose/Softmax), for optimizer and backend benchmarks.

Nothing is downloaded; only numpy and onnx are needed.

    build_models.py OUTDIR [--batch 1] [--seq 128]
writes OUTDIR/resnet50.onnx and OUTDIR/bert_base.onnx.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Graph:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def weight(self, hint, shape, scale=None):
        n = self.name(hint)
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * s).astype(np.float32), n))
        return n

    def const(self, hint, array):
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def op(self, op_type, inputs, hint=None, **attrs):
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs))
        return out


def conv_bn(g, x, cin, cout, k, stride, relu=True):
    w = g.weight("conv.weight", [cout, cin, k, k])
    y = g.op("Conv", [x, w], "conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    scale = g.const("bn.weight", (1.0 + 0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    bias = g.const("bn.bias", (0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    mean = g.const("bn.running_mean", (0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    var = g.const("bn.running_var", (1.0 + 0.1 * g.rng.random(cout)).astype(np.float32))
    y = g.op("BatchNormalization", [y, scale, bias, mean, var], "bn", epsilon=1e-5)
    return g.op("Relu", [y], "relu") if relu else y


def resnet50(batch):
    g = Graph(50)
    x = "input"
    y = conv_bn(g, x, 3, 64, 7, 2)
    y = g.op("MaxPool", [y], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]):
        for b in range(blocks):
            s = stride if b == 0 else 1
            out = width * 4
            h = conv_bn(g, y, cin, width, 1, 1)
            h = conv_bn(g, h, width, width, 3, s)
            h = conv_bn(g, h, width, out, 1, 1, relu=False)
            short = conv_bn(g, y, cin, out, 1, s, relu=False) if (s != 1 or cin != out) else y
            y = g.op("Relu", [g.op("Add", [h, short], "add")], "relu")
            cin = out
    y = g.op("GlobalAveragePool", [y], "gap")
    y = g.op("Flatten", [y], "flatten", axis=1)
    w = g.weight("fc.weight", [1000, 2048])
    b = g.const("fc.bias", np.zeros(1000, np.float32))
    y = g.op("Gemm", [y, w, b], "fc", transB=1)
    graph = helper.make_graph(
        g.nodes, "resnet50",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [batch, 1000])],
        g.inits)
    graph.output[0].name = y
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bert_base(batch, seq, layers=12, hidden=768, heads=12, ff=3072, vocab=30522):
    g = Graph(7)
    ids = "input_ids"
    emb = g.weight("word_embeddings", [vocab, hidden], 0.02)
    pos = g.weight("position_embeddings", [512, hidden], 0.02)
    x = g.op("Gather", [emb, ids], "embed", axis=0)
    pos_ids = g.const("position_ids", np.arange(seq, dtype=np.int64)[None, :])
    x = g.op("Add", [x, g.op("Gather", [pos, pos_ids], "pos", axis=0)], "add")

    def layer_norm(v):
        return g.op("LayerNormalization", [v, g.const("ln.weight", np.ones(hidden, np.float32)),
                                           g.const("ln.bias", np.zeros(hidden, np.float32))],
                    "ln", axis=-1, epsilon=1e-12)

    def linear(v, cin, cout):
        w = g.weight("dense.weight", [cin, cout], 0.02)
        b = g.const("dense.bias", (0.02 * g.rng.standard_normal(cout)).astype(np.float32))
        return g.op("Add", [g.op("MatMul", [v, w], "matmul"), b], "add")

    x = layer_norm(x)
    dh = hidden // heads
    split_shape = g.const("split_heads", np.array([batch, seq, heads, dh], np.int64))
    merge_shape = g.const("merge_heads", np.array([batch, seq, hidden], np.int64))
    scale = g.const("scale", np.array(1.0 / np.sqrt(dh), np.float32))
    for _ in range(layers):
        def heads_of(v, perm):
            return g.op("Transpose", [g.op("Reshape", [v, split_shape], "reshape")], "transpose", perm=perm)
        q = heads_of(linear(x, hidden, hidden), [0, 2, 1, 3])
        k = heads_of(linear(x, hidden, hidden), [0, 2, 3, 1])
        v = heads_of(linear(x, hidden, hidden), [0, 2, 1, 3])
        s = g.op("Mul", [g.op("MatMul", [q, k], "scores"), scale], "scaled")
        p = g.op("Softmax", [s], "softmax", axis=-1)
        c = g.op("Transpose", [g.op("MatMul", [p, v], "context")], "transpose", perm=[0, 2, 1, 3])
        c = g.op("Reshape", [c, merge_shape], "reshape")
        x = layer_norm(g.op("Add", [linear(c, hidden, hidden), x], "residual"))
        h = linear(x, hidden, ff)
        # Erf-GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt(2)))
        e = g.op("Erf", [g.op("Div", [h, g.const("sqrt2", np.array(1.4142135, np.float32))], "div")], "erf")
        e = g.op("Add", [e, g.const("one", np.array(1.0, np.float32))], "add")
        h = g.op("Mul", [g.op("Mul", [h, e], "mul"), g.const("half", np.array(0.5, np.float32))], "gelu")
        x = layer_norm(g.op("Add", [linear(h, ff, hidden), x], "residual"))
    graph = helper.make_graph(
        g.nodes, "bert_base",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, seq, hidden])],
        g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for name, model in [("resnet50", resnet50(a.batch)), ("bert_base", bert_base(a.batch, a.seq))]:
        onnx.checker.check_model(model)
        path = os.path.join(a.outdir, f"{name}.onnx")
        onnx.save(model, path)
        print(f"{path}: {len(model.graph.node)} nodes, {os.path.getsize(path) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
