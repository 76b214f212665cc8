#!/usr/bin/env python3
"""Make the example models in examples/: small real networks, exported by PyTorch.

Each example is a folder examples/<name>/ with
    model.onnx                      the model (random weights, fixed seeds)
    input.npy                       a seeded float32 input
    expected/<output>.npy           ONNX Runtime's outputs for input.npy (CPU,
                                    one thread, graph optimizations disabled);
                                    the file stem is the output name with every
                                    char outside [A-Za-z0-9_.-] replaced by '_'
and examples/README.md describes them all (ops, inputs, outputs).

    make_examples.py [--stage export|finish|all] [--out DIR]

`export` needs torch and torchvision: it builds the float models and exports
them (resnet_block, mobilenet_block, encoder_layer, dynamic_batch).
`finish` needs only onnx and onnxruntime: it quantizes resnet_block into
qdq_cnn, writes inputs and expected outputs, checks each graph holds the ops
it exists to show, and writes README.md. `all` (the default) runs both.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_RUN = os.path.join(HERE, "..", "tests", "scripts", "ort_run.py")

OPSET = 17  # for the TorchScript exporter; the dynamo exporter needs >= 18
SEED = 20240601

# name -> (what it is, input name, input shape, output name)
EXAMPLES = {
    "resnet_block": (
        "residual CNN: conv-bn-relu-maxpool stem, two torchvision BasicBlocks "
        "(the second with a strided 1x1 downsample), global avg pool, linear to 10 classes",
        "input", (1, 3, 32, 32), "logits"),
    "mobilenet_block": (
        "torchvision mobilenet_v3_small().features[:5] (depthwise convs, squeeze-excitation "
        "with hardsigmoid, hardswish, residual add) + adaptive avg pool + flatten",
        "input", (1, 3, 64, 64), "features"),
    "encoder_layer": (
        "torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, "
        "activation='gelu', batch_first=True, dropout=0) in eval mode",
        "src", (1, 16, 64), "hidden"),
    "qdq_cnn": (
        "resnet_block quantized by onnxruntime quantize_static: QDQ format, int8 activations "
        "and per-channel int8 weights, 8 seeded random calibration inputs (BN folded first "
        "by ORT's basic graph optimizations, as quant_pre_process does; the quantizer drops the "
        "Relus into the int8 ranges; weights int8 and biases int32, per output channel)",
        "input", (1, 3, 32, 32), "logits"),
    "dynamic_batch": (
        "resnet_block exported with a symbolic batch dimension `batch` on input and output "
        "(import with --input-shape input=2x3x32x32)",
        "input", (2, 3, 32, 32), "logits"),
    "qdq_mobilenet": (
        "mobilenet_block quantized by onnxruntime quantize_static as qdq_cnn is (QDQ, int8 "
        "activations, per-channel int8 weights): quantized depthwise convolutions, residual add",
        "input", (1, 3, 64, 64), "features"),
    "qdq_encoder": (
        "encoder_layer quantized by onnxruntime quantize_static as qdq_cnn is: Q/DQ around its "
        "MatMuls, including attention's products of two activations",
        "src", (1, 16, 64), "hidden"),
}

# Ops each export must contain, or the example does not show what it is for.
REQUIRED_OPS = {
    "resnet_block": [{"Conv"}, {"BatchNormalization"}, {"Relu"}, {"MaxPool"}, {"Add"},
                     {"GlobalAveragePool", "ReduceMean"}, {"Gemm", "MatMul"}],
    "mobilenet_block": [{"Conv"}, {"BatchNormalization"}, {"HardSigmoid"}, {"HardSwish"},
                        {"GlobalAveragePool", "ReduceMean"}, {"Mul"}, {"Add"}],
    "encoder_layer": [{"Erf"}, {"Softmax"}, {"MatMul"}, {"LayerNormalization", "ReduceMean"}],
    "qdq_cnn": [{"QuantizeLinear"}, {"DequantizeLinear"}, {"Conv"}],
    "dynamic_batch": [{"Conv"}, {"BatchNormalization"}],
    "qdq_mobilenet": [{"QuantizeLinear"}, {"DequantizeLinear"}, {"Conv"}],
    "qdq_encoder": [{"QuantizeLinear"}, {"DequantizeLinear"}, {"MatMul"}],
}


# --------------------------------------------------------------------------
# export stage (torch)


def build_torch_models():
    import torch
    from torch import nn
    import torchvision
    from torchvision.models.resnet import BasicBlock

    class ResNetBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 32, 3, stride=1, padding=1, bias=False),
                nn.BatchNorm2d(32),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
            self.layer1 = BasicBlock(32, 32)
            self.layer2 = BasicBlock(
                32, 64, stride=2,
                downsample=nn.Sequential(nn.Conv2d(32, 64, 1, stride=2, bias=False), nn.BatchNorm2d(64)),
            )
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.layer2(self.layer1(self.stem(x)))
            return self.fc(torch.flatten(self.pool(x), 1))

    class MobileNetBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = torchvision.models.mobilenet_v3_small().features[:5]
            self.pool = nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            return torch.flatten(self.pool(self.features(x)), 1)

    def randomize_norms(model, shape, gen):
        """Non-trivial BN/LN parameters and BN running stats that fit the data."""
        norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm))]
        with torch.no_grad():
            for m in norms:
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.2)
            bns = [m for m in norms if isinstance(m, nn.BatchNorm2d)]
            if bns:
                # Running stats from the data the model will see (cumulative
                # average over a few batches), then perturbed so that folding
                # them is visible.
                for m in bns:
                    m.reset_running_stats()
                    m.momentum = None
                model.train()
                for _ in range(4):
                    model(torch.randn((16,) + tuple(shape[1:]), generator=gen))
                for m in bns:
                    m.momentum = 0.1
                    m.running_mean.add_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                    m.running_var.mul_(torch.rand(m.running_var.shape, generator=gen) * 0.5 + 0.75)
        model.eval()
        return model

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    resnet = randomize_norms(ResNetBlock(), EXAMPLES["resnet_block"][2], gen)
    mobilenet = randomize_norms(MobileNetBlock(), EXAMPLES["mobilenet_block"][2], gen)
    encoder = nn.TransformerEncoderLayer(
        d_model=64, nhead=4, dim_feedforward=128, activation="gelu", batch_first=True, dropout=0.0)
    encoder = randomize_norms(encoder, EXAMPLES["encoder_layer"][2], gen)
    return {"resnet_block": resnet, "mobilenet_block": mobilenet, "encoder_layer": encoder,
            "dynamic_batch": resnet}


def export_one(model, name, path, log):
    """Export with the TorchScript exporter at opset 17 if this torch has it,
    else with the dynamo exporter; keep the first export that holds the ops
    the example needs. Failed tries are logged with their reasons."""
    import onnx
    import torch

    _, in_name, shape, out_name = EXAMPLES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(SEED))
    dynamic_axes = {in_name: {0: "batch"}, out_name: {0: "batch"}} if name == "dynamic_batch" else None
    common = dict(input_names=[in_name], output_names=[out_name], dynamic_axes=dynamic_axes)
    torchscript = dict(dynamo=False, opset_version=OPSET, do_constant_folding=False,
                       training=torch.onnx.TrainingMode.EVAL)
    dynamo = dict(dynamo=True, opset_version=18, external_data=False)
    # (label, module, kwargs, under no_grad)
    attempts = [("torchscript exporter, opset 17", model, torchscript, True),
                ("torchscript exporter, opset 17, grad enabled", model, torchscript, False)]
    if isinstance(model, torch.nn.TransformerEncoderLayer):
        attempts.append(("torchscript exporter, opset 17, layer's own _sa_block/_ff_block called in order",
                         PlainEncoderLayer(model), torchscript, True))
    attempts += [("dynamo exporter, opset 18", model, dynamo, True),
                 ("dynamo exporter, opset 18, optimize=False", model, dict(dynamo, optimize=False), True)]
    tried = []
    for label, module, kwargs, no_grad in attempts:
        try:
            with torch.no_grad() if no_grad else torch.enable_grad():
                torch.onnx.export(module, (x,), path, **common, **kwargs)
            m = onnx.load(path)
            missing = missing_ops(name, m)
            if missing:
                tried.append(f"{label}: graph lacks {missing}")
                continue
            if name == "dynamic_batch":
                rename_batch_dim(m, in_name)
                onnx.save(m, path)
            note = ""
            try:
                onnx.checker.check_model(m, full_check=True)
            except Exception as e:
                note = f"; onnx.checker: {one_line(e)}"
            for t in tried:
                log.append(f"{name}: tried {t}")
            import onnxruntime as ort

            with torch.no_grad():
                want = module(x).numpy()
            got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {in_name: x.numpy()})[0]
            diff = float(np.max(np.abs(got - want)))
            log.append(f"{name}: {label} (torch {torch.__version__}); torch vs onnxruntime "
                       f"max abs diff {diff:.2e}{note}")
            return
        except Exception as e:  # try the next exporter
            tried.append(f"{label}: {type(e).__name__}: {one_line(e)}")
    raise RuntimeError(f"{name}: no export worked:\n  " + "\n  ".join(tried))


def one_line(e, limit=400) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _plain_encoder_layer_class():
    from torch import nn

    class PlainEncoderLayer(nn.Module):
        """nn.TransformerEncoderLayer's slow path (norm_first=False), spelled
        out with the layer's own blocks, so no exporter sees the fused
        fast-path kernel."""

        def __init__(self, layer):
            super().__init__()
            assert not layer.norm_first
            self.layer = layer

        def forward(self, x):
            layer = self.layer
            x = layer.norm1(x + layer._sa_block(x, None, None))
            return layer.norm2(x + layer._ff_block(x))

    return PlainEncoderLayer


def PlainEncoderLayer(layer):
    return _plain_encoder_layer_class()(layer).eval()


def rename_batch_dim(model, in_name):
    """Call the input's leading symbolic dim `batch` everywhere (the dynamo
    exporter names its symbols itself)."""
    inp = next(v for v in model.graph.input if v.name == in_name)
    dim0 = inp.type.tensor_type.shape.dim[0]
    if not dim0.HasField("dim_param"):
        raise RuntimeError(f"dynamic_batch: input dim 0 is not symbolic: {dim0}")
    old = dim0.dim_param
    for v in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        for d in v.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param == old:
                d.dim_param = "batch"


def stage_export(out_dir, log):
    import torch

    if hasattr(torch.backends, "mha") and hasattr(torch.backends.mha, "set_fastpath_enabled"):
        # Keep nn.TransformerEncoderLayer on its plain ops, not the fused
        # _transformer_encoder_layer_fwd kernel.
        torch.backends.mha.set_fastpath_enabled(False)
    models = build_torch_models()
    failures = []
    for name, model in models.items():
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        try:
            export_one(model, name, os.path.join(out_dir, name, "model.onnx"), log)
        except Exception as e:
            failures.append(str(e))
            print(e, file=sys.stderr)
    return failures


# --------------------------------------------------------------------------
# finish stage (onnx + onnxruntime)


def op_histogram(model) -> dict[str, int]:
    """Op types of the main graph and of any subgraphs, most frequent first."""
    counts = collections.Counter()

    def walk(graph):
        for node in graph.node:
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            counts[key] += 1
            for attr in node.attribute:
                if attr.g.node:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(model.graph)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def missing_ops(name, model) -> list[str]:
    ops = set(op_histogram(model))
    return [" or ".join(sorted(alts)) for alts in REQUIRED_OPS[name] if not ops & alts]


def make_qdq(out_dir, log, src_name="resnet_block", name="qdq_cnn"):
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    src = os.path.join(out_dir, src_name, "model.onnx")
    dst_dir = os.path.join(out_dir, name)
    os.makedirs(dst_dir, exist_ok=True)
    folded = os.path.join(dst_dir, "folded.tmp.onnx")
    # What quant_pre_process does, without its sympy-based shape inference:
    # ORT's basic graph optimizations fold BatchNormalization into the convs.
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.optimized_model_filepath = folded
    ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])

    _, in_name, shape, _ = EXAMPLES[name]

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(SEED + 1)
            self.batches = iter([{in_name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    dst = os.path.join(dst_dir, "model.onnx")
    quantize_static(folded, dst, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True)
    os.remove(folded)
    m = onnx.load(dst)
    # ORT's optimizer declares every domain it knows; keep the ones in use.
    used = {n.domain for n in m.graph.node} | {""}
    keep = [o for o in m.opset_import if o.domain in used]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    onnx.save(m, dst)
    onnx.checker.check_model(m, full_check=True)
    per_axis = [n.name for n in m.graph.node
                if n.op_type == "DequantizeLinear" and any(a.name == "axis" for a in n.attribute)]
    inits = {i.name: i for i in m.graph.initializer}
    per_axis += [n.name for n in m.graph.node
                 if n.op_type == "DequantizeLinear" and n.input[1] in inits and len(inits[n.input[1]].dims) == 1
                 and inits[n.input[1]].dims[0] > 1 and n.name not in per_axis]
    if not per_axis:
        raise RuntimeError(f"{name}: no per-axis DequantizeLinear in the quantized model")
    log.append(f"{name}: onnxruntime {ort.__version__} quantize_static; {len(per_axis)} per-axis DequantizeLinear")


def describe_value(vi) -> str:
    import onnx

    t = vi.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else str(d.dim_value) for d in t.shape.dim]
    return f"`{vi.name}` {onnx.TensorProto.DataType.Name(t.elem_type).lower()}[{'x'.join(dims)}]"


def sanitize(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def stage_finish(out_dir, log):
    import onnx
    import onnxruntime as ort

    failures = []
    for src_name, name in [("resnet_block", "qdq_cnn"), ("mobilenet_block", "qdq_mobilenet"), ("encoder_layer", "qdq_encoder")]:
        if not os.path.exists(os.path.join(out_dir, src_name, "model.onnx")):
            continue
        try:
            make_qdq(out_dir, log, src_name, name)
        except Exception as e:
            failures.append(f"{name}: {type(e).__name__}: {e}")
            print(failures[-1], file=sys.stderr)

    rows = []
    for i, (name, (what, in_name, shape, out_name)) in enumerate(EXAMPLES.items()):
        d = os.path.join(out_dir, name)
        path = os.path.join(d, "model.onnx")
        if not os.path.exists(path):
            failures.append(f"{name}: no model.onnx")
            continue
        m = onnx.load(path)
        missing = missing_ops(name, m)
        if missing:
            failures.append(f"{name}: graph lacks {missing}")
        x = np.random.default_rng(SEED + 100 + i).standard_normal(shape).astype(np.float32)
        np.save(os.path.join(d, "input.npy"), x)
        exp_dir = os.path.join(d, "expected")
        os.makedirs(exp_dir, exist_ok=True)
        for f in os.listdir(exp_dir):
            os.remove(os.path.join(exp_dir, f))
        subprocess.run([sys.executable, ORT_RUN, path, exp_dir, "--input", f"{in_name}={d}/input.npy"], check=True)
        hist = op_histogram(m)
        opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in m.opset_import)
        outs = []
        for o in m.graph.output:
            y = np.load(os.path.join(exp_dir, sanitize(o.name) + ".npy"))
            outs.append(f"{describe_value(o)} (runs as {'x'.join(map(str, y.shape))})")
        size_kb = os.path.getsize(path) / 1024
        print(f"\n== {name} ({size_kb:.0f} KiB, opset {opsets}, {len(m.graph.node)} nodes, "
              f"{len(m.graph.initializer)} initializers)")
        print("   inputs: ", "; ".join(describe_value(v) for v in m.graph.input))
        print("   outputs:", "; ".join(outs))
        print("   ops:    ", ", ".join(f"{k} {v}" for k, v in hist.items()))
        rows.append((name, what, "; ".join(describe_value(v) for v in m.graph.input) +
                     f" (input.npy: {'x'.join(map(str, shape))})",
                     "; ".join(outs), opsets, size_kb, hist))

    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(README_HEAD)
        f.write("| model | what it is | inputs | outputs | opset | size | op types (count) |\n")
        f.write("| --- | --- | --- | --- | --- | --- | --- |\n")
        for name, what, ins, outs, opsets, size_kb, hist in rows:
            ops = ", ".join(f"{k} {v}" for k, v in hist.items())
            f.write(f"| `{name}` | {what} | {ins} | {outs} | {opsets} | {size_kb:.0f} KiB | {ops} |\n")
        f.write("\nHow they were made:\n\n")
        for line in log:
            f.write(f"- {line}\n")
        f.write(f"- inputs and expected outputs: numpy {np.__version__}, onnxruntime {ort.__version__}\n")
    return failures


README_HEAD = """# Examples

Small real models, made by `make_examples.py` (PyTorch + torchvision for the
float models, onnxruntime for quantization and for the expected outputs).
Weights are random with fixed seeds. Each folder holds `model.onnx`,
`input.npy` and `expected/<output>.npy`: ONNX Runtime's outputs for
`input.npy` (CPU, one thread, graph optimizations disabled). Try one with

```
make demo        # imports resnet_block, runs it in the interpreter, compares
```

To remake them: `python3 examples/make_examples.py` where torch and
torchvision are installed (the export is deterministic for a given torch);
`.venv/bin/python examples/make_examples.py --stage finish` (after
`make setup`) redoes the quantization, inputs, expected outputs and this
page from the exported float models with the pinned onnxruntime.

Worth knowing when importing them: `encoder_layer` is exported by the
TorchScript exporter without constant folding, so its attention holds the
Shape/Slice/Gather/Unsqueeze/Concat chains (and Cast/Sqrt of a shape for the
1/sqrt(d) scale) that static reshapes leave behind; `dynamic_batch` needs
`--input-shape input=2x3x32x32`.

"""


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stage", choices=["export", "finish", "all"], default="all")
    ap.add_argument("--out", default=HERE, help="where the example folders go (default: this folder)")
    args = ap.parse_args(argv)
    log: list[str] = []
    failures = []
    if args.stage in ("export", "all"):
        failures += stage_export(args.out, log)
        with open(os.path.join(args.out, "EXPORT_LOG.txt"), "w") as f:
            f.write("\n".join(log) + "\n")
    if args.stage in ("finish", "all"):
        if args.stage == "finish":
            # Keep the exporter's record from the export stage.
            p = os.path.join(args.out, "EXPORT_LOG.txt")
            if os.path.exists(p):
                log += [l for l in open(p).read().splitlines() if l]
        failures += stage_finish(args.out, log)
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
