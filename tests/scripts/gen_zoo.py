#!/usr/bin/env python3
"""Export the architecture zoo: small configurations of the architectures
timm, torchvision and Hugging Face users export, to tests/data/zoo/.

Needs PyTorch with timm, torchvision and transformers (not the CI venv):

    python tests/scripts/gen_zoo.py [OUTDIR]      # default tests/data/zoo

Each model is built with reduced width, depth, resolution and vocabulary,
seeded random weights (`torch.manual_seed`; batch-norm statistics and
affine parameters randomized too, so no branch is an identity), in eval
mode, and exported at opset 17 with fixed shapes and its weights as
initializers. `manifest.json` lists each model's inputs (name, shape,
dtype; for token ids the exclusive upper bound `high`) so that
tests/zoo.rs generates the same inputs without Python.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")
OPSET = 17
VOCAB = 96


def randomize(model: nn.Module) -> nn.Module:
    """Non-trivial normalization statistics and affine parameters."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)) and getattr(m, "weight", None) is not None:
            m.weight.data.copy_(1.0 + 0.1 * torch.randn(m.weight.shape, generator=g))
            if m.bias is not None:
                m.bias.data.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    return model.eval()


class Outputs(nn.Module):
    """A Hugging Face model as a module returning plain tensors."""

    def __init__(self, inner: nn.Module, keys: list[str]):
        super().__init__()
        self.inner = inner
        self.keys = keys

    def forward(self, *args):
        out = self.inner(*args, return_dict=True)
        return tuple(out[k] for k in self.keys)


# ---- hand-written architectures ------------------------------------------


def cbr(cin, cout, k=3, s=1, act=nn.ReLU):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), act())


class UNet(nn.Module):
    """Two-level UNet: ConvTranspose upsampling, skip concatenations."""

    def __init__(self, c=8, classes=3):
        super().__init__()
        self.e1 = nn.Sequential(cbr(3, c), cbr(c, c))
        self.e2 = nn.Sequential(cbr(c, 2 * c), cbr(2 * c, 2 * c))
        self.mid = nn.Sequential(cbr(2 * c, 4 * c), cbr(4 * c, 4 * c))
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, 2)
        self.d2 = nn.Sequential(cbr(4 * c, 2 * c), cbr(2 * c, 2 * c))
        self.up1 = nn.ConvTranspose2d(2 * c, c, 2, 2)
        self.d1 = nn.Sequential(cbr(2 * c, c), cbr(c, c))
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        e1 = self.e1(x)
        e2 = self.e2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.d2(torch.cat([self.up2(m), e2], 1))
        d1 = self.d1(torch.cat([self.up1(d2), e1], 1))
        return self.head(d1)


def silu_conv(cin, cout, k=3, s=1):
    return cbr(cin, cout, k, s, nn.SiLU)


class C2f(nn.Module):
    """YOLOv8's C2f: a 1x1 conv, Split in two, bottlenecks, concat."""

    def __init__(self, cin, cout, n=1):
        super().__init__()
        self.c = cout // 2
        self.cv1 = silu_conv(cin, 2 * self.c, 1)
        self.m = nn.ModuleList(nn.Sequential(silu_conv(self.c, self.c), silu_conv(self.c, self.c)) for _ in range(n))
        self.cv2 = silu_conv((2 + n) * self.c, cout, 1)

    def forward(self, x):
        y = list(self.cv1(x).split((self.c, self.c), 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.cv1 = silu_conv(cin, cin // 2, 1)
        self.cv2 = silu_conv(cin * 2, cout, 1)

    def forward(self, x):
        x = self.cv1(x)
        y1 = F.max_pool2d(x, 5, 1, 2)
        y2 = F.max_pool2d(y1, 5, 1, 2)
        y3 = F.max_pool2d(y2, 5, 1, 2)
        return self.cv2(torch.cat([x, y1, y2, y3], 1))


class Yolo(nn.Module):
    """A YOLOv8-style detector: C2f backbone, SPPF, two-scale head with
    the distribution-focal-loss (DFL) box decode (softmax over 16 bins)."""

    def __init__(self, classes=4, reg_max=16):
        super().__init__()
        self.reg_max, self.classes = reg_max, classes
        self.stem = silu_conv(3, 8, 3, 2)
        self.s1 = nn.Sequential(silu_conv(8, 16, 3, 2), C2f(16, 16))
        self.s2 = nn.Sequential(silu_conv(16, 32, 3, 2), C2f(32, 32))
        self.s3 = nn.Sequential(silu_conv(32, 32, 3, 2), C2f(32, 32), SPPF(32, 32))
        self.box = nn.ModuleList(nn.Sequential(silu_conv(c, 16), nn.Conv2d(16, 4 * reg_max, 1)) for c in (32, 32))
        self.cls = nn.ModuleList(nn.Sequential(silu_conv(c, 16), nn.Conv2d(16, classes, 1)) for c in (32, 32))
        self.register_buffer("proj", torch.arange(reg_max, dtype=torch.float32))

    def forward(self, x):
        x = self.s1(self.stem(x))
        p3 = self.s2(x)
        p4 = self.s3(p3)
        outs = []
        for i, p in enumerate((p3, p4)):
            outs.append(torch.cat([self.box[i](p), self.cls[i](p)], 1).flatten(2))
        y = torch.cat(outs, 2)  # [1, 4*reg_max + classes, anchors]
        box, cls = y.split((4 * self.reg_max, self.classes), 1)
        b, _, a = box.shape
        dist = box.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)
        dist = (dist * self.proj.view(1, -1, 1, 1)).sum(1)  # [1, 4, anchors]
        return torch.cat([dist, cls.sigmoid()], 1)


class DeepLabV3(nn.Module):
    """torchvision's ASPP (dilated convolutions, image pooling) on a small
    dilated ResNet, upsampled bilinearly to the input size."""

    def __init__(self, classes=4):
        super().__init__()
        from torchvision.models.segmentation.deeplabv3 import ASPP

        # output stride 8: the last stage keeps its resolution and dilates
        self.backbone = nn.Sequential(cbr(3, 16, 3, 2), cbr(16, 24, 3, 2), cbr(24, 32, 3, 2),
                                      nn.Conv2d(32, 32, 3, padding=2, dilation=2, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.head = nn.Sequential(ASPP(32, [2, 4, 6], 32), cbr(32, 32), nn.Conv2d(32, classes, 1))

    def forward(self, x):
        y = self.head(self.backbone(x))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


# ---- the zoo ---------------------------------------------------------------


def image(n, size, c=3):
    return {"name": n, "shape": [1, c, size, size], "dtype": "float32"}


def ids(n="input_ids", length=16, high=VOCAB):
    return {"name": n, "shape": [1, length], "dtype": "int64", "high": high}


def timm_model(name, **kw):
    import timm

    return timm.create_model(name, pretrained=False, num_classes=10, **kw)


def efficientnet():
    from timm.models.efficientnet import _gen_efficientnet

    return _gen_efficientnet("efficientnet_b0", channel_multiplier=0.25, depth_multiplier=0.34, num_classes=10), [image("pixels", 64)]


def convnext():
    return timm_model("convnext_tiny", depths=(1, 1, 2, 1), dims=(16, 24, 32, 48)), [image("pixels", 64)]


def vit():
    return timm_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=2), [image("pixels", 32)]


def deit():
    return timm_model("deit_tiny_distilled_patch16_224", img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=2), [image("pixels", 32)]


def swin():
    m = timm_model("swin_tiny_patch4_window7_224", img_size=32, patch_size=2, window_size=4, embed_dim=24, depths=(2, 2), num_heads=(2, 4))
    return m, [image("pixels", 32)]


def regnet():
    from torchvision.models.regnet import BlockParams, RegNet

    return RegNet(BlockParams.from_init_params(depth=5, w_0=16, w_a=8.0, w_m=2.0, group_width=8), num_classes=10), [image("pixels", 64)]


def densenet():
    from torchvision.models import DenseNet

    return DenseNet(growth_rate=8, block_config=(2, 2, 2), num_init_features=16, bn_size=2, num_classes=10), [image("pixels", 64)]


def resnext():
    from timm.models.resnet import Bottleneck, ResNet

    m = ResNet(Bottleneck, (1, 1, 1, 1), num_classes=10, cardinality=4, base_width=16, stem_width=16, channels=(16, 24, 32, 48))
    return m, [image("pixels", 64)]


def mobilevit():
    from transformers import MobileViTConfig, MobileViTForImageClassification

    cfg = MobileViTConfig(image_size=64, hidden_sizes=[24, 32, 40], neck_hidden_sizes=[8, 16, 16, 24, 32, 40, 64],
                          num_attention_heads=2, num_labels=10, attn_implementation="eager")
    return Outputs(MobileViTForImageClassification(cfg), ["logits"]), [image("pixel_values", 64)]


def inception_v3():
    from torchvision.models.inception import BasicConv2d, InceptionA, InceptionC

    class Inception(nn.Module):
        """Inception-v3's stem, an InceptionA (5x5, double 3x3, pool
        branches) and an InceptionC (factorized 1x7/7x1) block."""

        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(BasicConv2d(3, 8, kernel_size=3, stride=2), BasicConv2d(8, 16, kernel_size=3),
                                      nn.MaxPool2d(3, 2))
            self.a = InceptionA(16, pool_features=8)
            self.c = InceptionC(232, channels_7x7=8)
            self.fc = nn.Linear(768, 10)

        def forward(self, x):
            y = self.c(self.a(self.stem(x)))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))

    return Inception(), [image("pixels", 75)]


def ghostnet():
    from timm.models.ghostnet import _create_ghostnet

    m = _create_ghostnet("ghostnet_050", width=0.25, num_classes=10)
    # timm's 1280-wide head would be most of the file: a narrower one
    m.conv_head = nn.Conv2d(m.conv_head.in_channels, 128, 1)
    m.num_features = m.head_hidden_size = 128
    m.classifier = nn.Linear(128, 10)
    return m, [image("pixels", 64)]


def shufflenet():
    from torchvision.models import ShuffleNetV2

    return ShuffleNetV2([2, 2, 2], [8, 16, 32, 64, 128], num_classes=10), [image("pixels", 64)]


def deeplabv3():
    return DeepLabV3(), [image("pixels", 64)]


def lraspp():
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf
    from torchvision.models.segmentation.lraspp import _lraspp_mobilenetv3

    conf, last = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25, dilated=True)
    return _lraspp_mobilenetv3(MobileNetV3(conf, last), 4), [image("pixels", 64)]


class LrasppOut(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def unet():
    return UNet(), [image("pixels", 32)]


def yolo():
    return Yolo(), [image("pixels", 64)]


def hf_text(model_cls, cfg, keys, length=16):
    return Outputs(model_cls(cfg), keys), [ids(length=length)]


def distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=2, hidden_dim=128, max_position_embeddings=32,
                           attn_implementation="eager")
    return hf_text(DistilBertModel, cfg, ["last_hidden_state"])


def roberta():
    from transformers import RobertaConfig, RobertaModel

    cfg = RobertaConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                        max_position_embeddings=40, attn_implementation="eager")
    return hf_text(RobertaModel, cfg, ["last_hidden_state", "pooler_output"])


def gpt2():
    import transformers.masking_utils as mu
    from transformers import GPT2Config, GPT2Model

    # one unpacked sequence: the packed-sequence check (aten::diff) has no ONNX export
    mu.find_packed_sequence_indices = lambda position_ids: None

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=64, n_layer=2, n_head=2, attn_implementation="eager", use_cache=False)
    return hf_text(GPT2Model, cfg, ["last_hidden_state"])


def albert():
    from transformers import AlbertConfig, AlbertModel

    cfg = AlbertConfig(vocab_size=VOCAB, embedding_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=128, max_position_embeddings=32, attn_implementation="eager")
    return hf_text(AlbertModel, cfg, ["last_hidden_state", "pooler_output"])


def t5_encoder():
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(vocab_size=VOCAB, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2,
                   relative_attention_num_buckets=8, relative_attention_max_distance=16, attn_implementation="eager")
    return hf_text(T5EncoderModel, cfg, ["last_hidden_state"])


def whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=128,
                        max_source_positions=32, attn_implementation="eager")
    spec = [{"name": "input_features", "shape": [1, 16, 64], "dtype": "float32"}]
    return Outputs(WhisperEncoder(cfg), ["last_hidden_state"]), spec


def wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = Wav2Vec2Config(conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2), feat_extract_norm="group",
                         hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, attn_implementation="eager")
    spec = [{"name": "input_values", "shape": [1, 1600], "dtype": "float32"}]
    return Outputs(Wav2Vec2Model(cfg), ["last_hidden_state", "extract_features"]), spec


def clip_text():
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = CLIPTextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                         max_position_embeddings=16, eos_token_id=2, attn_implementation="eager")
    return hf_text(CLIPTextModel, cfg, ["last_hidden_state", "pooler_output"])


def clip_vision():
    from transformers import CLIPVisionConfig, CLIPVisionModel

    cfg = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                           patch_size=8, attn_implementation="eager")
    return Outputs(CLIPVisionModel(cfg), ["last_hidden_state", "pooler_output"]), [image("pixel_values", 32)]


ZOO = [efficientnet, convnext, vit, deit, swin, regnet, densenet, resnext, mobilevit, inception_v3, ghostnet, shufflenet,
       deeplabv3, lraspp, unet, yolo, distilbert, roberta, gpt2, albert, t5_encoder, whisper_encoder, wav2vec2, clip_text,
       clip_vision]


def example(spec):
    g = torch.Generator().manual_seed(0)
    if spec["dtype"] == "int64":
        return torch.randint(0, spec["high"], spec["shape"], generator=g)
    return torch.randn(spec["shape"], generator=g)


def export(fn, outdir):
    torch.manual_seed(0)
    model, specs = fn()
    if fn is lraspp:
        model = LrasppOut(model)
    model = randomize(model)
    args = tuple(example(s) for s in specs)
    path = os.path.join(outdir, f"{fn.__name__}.onnx")
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=[s["name"] for s in specs], opset_version=OPSET, dynamo=False,
                          do_constant_folding=True)
    import numpy as np
    import onnx
    import onnxruntime as ort

    m = onnx.load(path)
    outputs = [o.name for o in m.graph.output]
    # the export is faithful: ONNX Runtime against PyTorch on the example input
    with torch.no_grad():
        want = model(*args)
    want = want if isinstance(want, tuple) else (want,)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {s["name"]: a.numpy() for s, a in zip(specs, args)})
    for w, g in zip(want, got):
        err = float(np.max(np.abs(w.numpy() - g))) / max(1.0, float(np.max(np.abs(w.numpy()))))
        if not err <= 1e-4:
            raise RuntimeError(f"ONNX Runtime differs from PyTorch by {err:.2e}")
    return {"file": f"{fn.__name__}.onnx", "inputs": specs, "outputs": outputs}


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "zoo")
    only = set(sys.argv[2:])
    os.makedirs(outdir, exist_ok=True)
    manifest_path = os.path.join(outdir, "manifest.json")
    manifest = {}
    if only and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    failed = []
    for fn in ZOO:
        if only and fn.__name__ not in only:
            continue
        try:
            manifest[fn.__name__] = export(fn, outdir)
            size = os.path.getsize(os.path.join(outdir, f"{fn.__name__}.onnx"))
            print(f"{fn.__name__}: {size / 1e6:.2f} MB")
        except Exception as e:  # report and go on: one architecture's exporter bug is no reason to stop
            failed.append(fn.__name__)
            print(f"{fn.__name__}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    with open(manifest_path, "w") as f:
        json.dump({k: manifest[k] for k in sorted(manifest)}, f, indent=1)
        f.write("\n")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
