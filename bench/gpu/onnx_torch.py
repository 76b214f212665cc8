"""Runs an ONNX graph as a PyTorch module, node by node with torch ops, so
that PyTorch eager and torch.compile see exactly the model (and the weights)
aoc compiles. Covers the operators bench/models/build_models.py writes.

    module = OnnxModule(onnx.load(path), dtype=torch.float16, device="cuda")
    y = module(x)

Initializers become buffers in `dtype` (integer ones keep their type);
float inputs are cast to `dtype`. BatchNormalization runs as
torch's inference batch norm (PyTorch eager does not fold it; torch.compile
may), Gemm honours transA/transB/alpha/beta, LayerNormalization the last
axes from `axis`.
"""
import numpy as np
import torch
import torch.nn.functional as F
from onnx import numpy_helper


def _attrs(node):
    out = {}
    for a in node.attribute:
        if a.type == a.INT:
            out[a.name] = a.i
        elif a.type == a.FLOAT:
            out[a.name] = a.f
        elif a.type == a.INTS:
            out[a.name] = list(a.ints)
        elif a.type == a.FLOATS:
            out[a.name] = list(a.floats)
        elif a.type == a.STRING:
            out[a.name] = a.s.decode()
    return out


class OnnxModule(torch.nn.Module):
    def __init__(self, model, dtype=torch.float16, device="cuda", channels_last=False):
        super().__init__()
        g = model.graph
        self.dtype = dtype
        self.channels_last = channels_last
        self.names = {}
        # Small integer constants (Reshape shapes, Clip bounds) as Python
        # values, so torch.compile sees static shapes instead of reading
        # tensors (a graph break and a recompile per distinct value).
        self.consts = {}
        for i, init in enumerate(g.initializer):
            arr = numpy_helper.to_array(init)
            if arr.size <= 8:
                self.consts[init.name] = arr.reshape(-1).tolist()
            t = torch.from_numpy(np.ascontiguousarray(arr)).to(device)
            if t.is_floating_point():
                t = t.to(dtype)
                if channels_last and t.dim() == 4:
                    t = t.contiguous(memory_format=torch.channels_last)
            key = f"w{i}"
            self.register_buffer(key, t)
            self.names[init.name] = key
        self.nodes = [(n.op_type, list(n.input), list(n.output), _attrs(n)) for n in g.node]
        self.inputs = [i.name for i in g.input if i.name not in self.names]
        self.outputs = [o.name for o in g.output]

    def forward(self, *args):
        env = {}
        for name, x in zip(self.inputs, args):
            if x.is_floating_point():
                x = x.to(self.dtype)
                if self.channels_last and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
            env[name] = x

        def get(n):
            if n == "":
                return None
            if n in env:
                return env[n]
            return getattr(self, self.names[n])

        for op, ins, outs, a in self.nodes:
            if op == "Reshape" and ins[1] in self.consts:
                x = get(ins[0])
                shape = [x.shape[i] if v == 0 else int(v) for i, v in enumerate(self.consts[ins[1]])]
                env[outs[0]] = x.reshape(shape)
                continue
            if op == "Clip":
                lo = self.consts.get(ins[1], [None])[0] if len(ins) > 1 and ins[1] else None
                hi = self.consts.get(ins[2], [None])[0] if len(ins) > 2 and ins[2] else None
                env[outs[0]] = torch.clamp(get(ins[0]), lo, hi)
                continue
            x = [get(n) for n in ins]
            env[outs[0]] = self._run(op, x, a)
        res = tuple(env[o] for o in self.outputs)
        return res[0] if len(res) == 1 else res

    @staticmethod
    def _run(op, x, a):
        if op == "Conv":
            pads = a.get("pads", [0, 0, 0, 0])
            assert pads[0] == pads[2] and pads[1] == pads[3], "asymmetric conv padding"
            return F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, stride=a.get("strides", [1, 1]),
                            padding=pads[:2], dilation=a.get("dilations", [1, 1]), groups=a.get("group", 1))
        if op == "BatchNormalization":
            return F.batch_norm(x[0], x[3], x[4], x[1], x[2], training=False, eps=a.get("epsilon", 1e-5))
        if op == "Relu":
            return torch.relu(x[0])
        if op == "Clip":
            return torch.clamp(x[0], x[1].item() if x[1] is not None else None,
                               x[2].item() if len(x) > 2 and x[2] is not None else None)
        if op == "Add":
            return x[0] + x[1]
        if op == "Mul":
            return x[0] * x[1]
        if op == "Div":
            return x[0] / x[1]
        if op == "Erf":
            return torch.erf(x[0])
        if op == "MaxPool":
            pads = a.get("pads", [0, 0, 0, 0])
            return F.max_pool2d(x[0], a["kernel_shape"], a.get("strides", [1, 1]), pads[:2])
        if op == "GlobalAveragePool":
            return x[0].mean(dim=(2, 3), keepdim=True)
        if op == "Flatten":
            return torch.flatten(x[0], a.get("axis", 1))
        if op == "Gemm":
            A = x[0].t() if a.get("transA", 0) else x[0]
            B = x[1].t() if a.get("transB", 0) else x[1]
            y = a.get("alpha", 1.0) * (A @ B)
            if len(x) > 2 and x[2] is not None:
                y = y + a.get("beta", 1.0) * x[2]
            return y
        if op == "MatMul":
            return torch.matmul(x[0], x[1])
        if op == "Reshape":
            shape = [int(v) for v in x[1].tolist()]
            shape = [x[0].shape[i] if v == 0 else v for i, v in enumerate(shape)]
            return x[0].reshape(shape)
        if op == "Transpose":
            return x[0].permute(a["perm"])
        if op == "Softmax":
            return torch.softmax(x[0], dim=a.get("axis", -1))
        if op == "LayerNormalization":
            axis = a.get("axis", -1)
            shape = x[0].shape[axis:]
            return F.layer_norm(x[0], shape, x[1], x[2] if len(x) > 2 else None, a.get("epsilon", 1e-5))
        if op == "Gather":
            return torch.index_select(x[0], a.get("axis", 0), x[1].reshape(-1)).reshape(
                *x[0].shape[:a.get("axis", 0)], *x[1].shape, *x[0].shape[a.get("axis", 0) + 1:])
        raise NotImplementedError(f"onnx_torch: {op}")
