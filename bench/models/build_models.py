#!/usr/bin/env python3
"""Builds the benchmark models as ONNX graphs with seeded random weights,
shaped the way PyTorch's exporter writes torchvision / Hugging Face models
(batch norms kept as BatchNormalization nodes, ReLU6 as Clip, Erf-GELU,
LayerNormalization, attention through MatMul/Reshape/Transpose/Softmax),
for the optimizer and backend benchmarks.

Nothing is downloaded; only numpy and onnx are needed (onnxruntime too for
--check). The same command always writes the same bytes.

    build_models.py OUTDIR [NAME ...] [--batch 1] [--seq 128] [--check] [--list]

NAMEs (default: all of them), each written as OUTDIR/NAME.onnx:
    resnet18_b1  resnet18_b8      ResNet-18 (BasicBlock), input 1|8 x3x224x224
    resnet50_b1  resnet50_b8      ResNet-50 (Bottleneck, stride on the 3x3)
    mobilenetv2_b1                MobileNetV2 width 1.0, 1x3x224x224
    bert_base_s128                BERT-base encoder: 12 layers, hidden 768,
                                  input_ids 1x128 (int64)
    bert_small_s128               4 layers, hidden 256, 4 heads, ff 1024
and the older names resnet50 and bert_base (ResNet-50 at --batch, BERT-base
at --batch x --seq): symbolic links to resnet50_b1.onnx / bert_base_s128.onnx
when those are built in the same run with the default --batch and --seq,
files of their own otherwise.

Weights: convolutions He-initialized; every BatchNormalization has its own
non-trivial statistics (gamma 1 +- 0.2, beta +- 0.1, running mean +- 0.2,
running variance in [0.5, 1.5]) so that folding it into the convolution
changes the weights for real; the last batch norm of each residual branch
has its gamma scaled down (as in trained networks), which keeps the
activations of these 16- to 50-layer nets of order 1 and their logits of
order 1 to 10, so that an absolute error of 1e-3 is a meaningful bound.
Outputs are named `logits` (CNNs) and `last_hidden_state` (encoders).
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# ONNX 1.23 writes IR version 14 by default, which ONNX Runtime 1.31 refuses
# ("max supported IR version: 13"); opset 17 belongs to IR version 8.
IR_VERSION = 8


class Graph:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0
        self.shared = {}

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

    def scalar(self, hint, value):
        """One initializer per distinct scalar, shared by all its users."""
        key = (hint, value)
        if key not in self.shared:
            self.shared[key] = self.const(hint, np.array(value, np.float32))
        return self.shared[key]

    def op(self, op_type, inputs, hint=None, **attrs):
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs))
        return out

    def model(self, name, inputs, out, out_name, out_shape):
        """The model whose graph output is `out` (made by the last node), renamed `out_name`."""
        assert self.nodes[-1].output[0] == out
        self.nodes[-1].output[0] = out_name
        graph = helper.make_graph(
            self.nodes, name, inputs,
            [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)],
            self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="aoc bench/models/build_models.py")
        m.ir_version = IR_VERSION
        return m


def batch_norm(g, y, c, gamma=1.0):
    scale = g.const("bn.weight", (gamma * (1.0 + 0.2 * g.rng.standard_normal(c))).astype(np.float32))
    bias = g.const("bn.bias", (0.1 * g.rng.standard_normal(c)).astype(np.float32))
    mean = g.const("bn.running_mean", (0.2 * g.rng.standard_normal(c)).astype(np.float32))
    var = g.const("bn.running_var", (0.5 + g.rng.random(c)).astype(np.float32))
    return g.op("BatchNormalization", [y, scale, bias, mean, var], "bn", epsilon=1e-5)


def conv_bn(g, x, cin, cout, k, stride, act="relu", groups=1, gamma=1.0):
    """Conv (no bias, 'same' padding k//2) + BatchNormalization + activation
    ("relu", "relu6" as Clip(0, 6), or None)."""
    w = g.weight("conv.weight", [cout, cin // groups, k, k])
    attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    if groups != 1:
        attrs["group"] = groups
    y = g.op("Conv", [x, w], "conv", **attrs)
    y = batch_norm(g, y, cout, gamma)
    if act == "relu":
        return g.op("Relu", [y], "relu")
    if act == "relu6":
        return g.op("Clip", [y, g.scalar("clip.min", 0.0), g.scalar("clip.max", 6.0)], "relu6")
    assert act is None, act
    return y


def classifier(g, y, features, classes=1000):
    y = g.op("GlobalAveragePool", [y], "gap")
    y = g.op("Flatten", [y], "flatten", axis=1)
    w = g.weight("fc.weight", [classes, features], (1.0 / features) ** 0.5)
    b = g.const("fc.bias", (0.01 * g.rng.standard_normal(classes)).astype(np.float32))
    return g.op("Gemm", [y, w, b], "fc", transB=1)


def image_input(batch):
    return [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])]


def resnet(depth, batch):
    """torchvision's resnet18 (BasicBlock) or resnet50 (Bottleneck, v1.5:
    the stride on the 3x3 conv)."""
    blocks_per_stage = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[depth]
    expansion = 1 if depth == 18 else 4
    g = Graph(depth)
    y = conv_bn(g, "input", 3, 64, 7, 2)
    y = g.op("MaxPool", [y], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate(zip([64, 128, 256, 512], blocks_per_stage)):
        for b in range(blocks):
            s = 2 if (stage > 0 and b == 0) else 1
            out = width * expansion
            if depth == 18:
                h = conv_bn(g, y, cin, width, 3, s)
                h = conv_bn(g, h, width, out, 3, 1, act=None, gamma=0.3)
            else:
                h = conv_bn(g, y, cin, width, 1, 1)
                h = conv_bn(g, h, width, width, 3, s)
                h = conv_bn(g, h, width, out, 1, 1, act=None, gamma=0.3)
            short = conv_bn(g, y, cin, out, 1, s, act=None) if (s != 1 or cin != out) else y
            y = g.op("Relu", [g.op("Add", [h, short], "add")], "relu")
            cin = out
    y = classifier(g, y, cin)
    return g.model(f"resnet{depth}", image_input(batch), y, "logits", [batch, 1000])


def mobilenetv2(batch):
    """torchvision's mobilenet_v2 at width 1.0 (channels already multiples of 8)."""
    g = Graph(2)
    y = conv_bn(g, "input", 3, 32, 3, 2, act="relu6")
    cin = 32
    # (expansion t, output channels c, repeats n, first stride s)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            residual = stride == 1 and cin == c
            h = conv_bn(g, y, cin, hidden, 1, 1, act="relu6") if t != 1 else y
            h = conv_bn(g, h, hidden, hidden, 3, stride, act="relu6", groups=hidden)
            h = conv_bn(g, h, hidden, c, 1, 1, act=None, gamma=0.5 if residual else 1.0)
            y = g.op("Add", [h, y], "add") if residual else h
            cin = c
    y = conv_bn(g, y, cin, 1280, 1, 1, act="relu6")
    y = classifier(g, y, 1280)
    return g.model("mobilenetv2", image_input(batch), y, "logits", [batch, 1000])


def bert(batch, seq, layers=12, hidden=768, heads=12, ff=3072, vocab=30522, seed=7, name="bert_base"):
    g = Graph(seed)
    ids = "input_ids"
    emb = g.weight("word_embeddings", [vocab, hidden], 0.02)
    pos = g.weight("position_embeddings", [512, hidden], 0.02)
    x = g.op("Gather", [emb, ids], "embed", axis=0)
    pos_ids = g.const("position_ids", np.arange(seq, dtype=np.int64)[None, :])
    x = g.op("Add", [x, g.op("Gather", [pos, pos_ids], "pos", axis=0)], "add")

    def layer_norm(v):
        gamma = (1.0 + 0.1 * g.rng.standard_normal(hidden)).astype(np.float32)
        beta = (0.05 * g.rng.standard_normal(hidden)).astype(np.float32)
        return g.op("LayerNormalization", [v, g.const("ln.weight", gamma), g.const("ln.bias", beta)],
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
    return g.model(name, [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
                   x, "last_hidden_state", [batch, seq, hidden])


def bert_base(batch, seq):
    return bert(batch, seq)


def bert_small(batch, seq):
    return bert(batch, seq, layers=4, hidden=256, heads=4, ff=1024, seed=8, name="bert_small")


# name -> (builder, output shape); builders are called lazily (BERT-base takes seconds).
CATALOG = {
    "resnet18_b1": (lambda: resnet(18, 1), [1, 1000]),
    "resnet18_b8": (lambda: resnet(18, 8), [8, 1000]),
    "resnet50_b1": (lambda: resnet(50, 1), [1, 1000]),
    "resnet50_b8": (lambda: resnet(50, 8), [8, 1000]),
    "mobilenetv2_b1": (lambda: mobilenetv2(1), [1, 1000]),
    "bert_base_s128": (lambda: bert_base(1, 128), [1, 128, 768]),
    "bert_small_s128": (lambda: bert_small(1, 128), [1, 128, 256]),
}
# Older names (docs/performance.md): name -> (catalog entry it equals at the default --batch/--seq, builder).
LEGACY = {
    "resnet50": ("resnet50_b1", lambda a: (resnet(50, a.batch), [a.batch, 1000])),
    "bert_base": ("bert_base_s128", lambda a: (bert_base(a.batch, a.seq), [a.batch, a.seq, 768])),
}


def check(path, out_shape):
    """Runs the model once in ONNX Runtime on seeded inputs; checks the output shape and finiteness."""
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        if i.type == "tensor(int64)":
            feeds[i.name] = rng.integers(0, 1000, size=i.shape, dtype=np.int64)
        else:
            feeds[i.name] = rng.standard_normal(i.shape).astype(np.float32)
    (y,) = sess.run(None, feeds)
    ok = list(y.shape) == out_shape and bool(np.isfinite(y).all())
    print(f"  ort: output {list(y.shape)} (expected {out_shape}), |max| {np.abs(y).max():.3g}, "
          f"std {y.std():.3g}: {'ok' if ok else 'WRONG'}")
    return ok


def save(model, path):
    onnx.checker.check_model(model)
    tmp = path + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, path)
    print(f"{path}: {len(model.graph.node)} nodes, {os.path.getsize(path) / 1e6:.1f} MB", flush=True)


def link(target, path):
    tmp = path + ".tmp"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)
    print(f"{path} -> {target}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("names", nargs="*", help="models to build (default: all)")
    ap.add_argument("--batch", type=int, default=1, help="batch of the older names resnet50, bert_base")
    ap.add_argument("--seq", type=int, default=128, help="sequence length of the older name bert_base")
    ap.add_argument("--check", action="store_true", help="run each model once in ONNX Runtime")
    ap.add_argument("--list", action="store_true", help="print the names and exit")
    a = ap.parse_args()
    if a.list:
        print("\n".join(list(CATALOG) + list(LEGACY)))
        return 0
    names = a.names or list(CATALOG) + list(LEGACY)
    unknown = [n for n in names if n not in CATALOG and n not in LEGACY]
    if unknown:
        ap.error(f"unknown model {', '.join(unknown)}; known: {', '.join(list(CATALOG) + list(LEGACY))}")
    os.makedirs(a.outdir, exist_ok=True)
    ok = True
    for name in names:
        path = os.path.join(a.outdir, f"{name}.onnx")
        if name in CATALOG:
            build, shape = CATALOG[name]
            save(build(), path)
        else:
            same_as, build = LEGACY[name]
            if same_as in names and a.batch == 1 and a.seq == 128:
                link(f"{same_as}.onnx", path)
                continue
            model, shape = build(a)
            save(model, path)
        if a.check:
            ok &= check(path, shape)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
