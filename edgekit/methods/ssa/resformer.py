"""SpikingResformer backbone (Shi et al., CVPR 2024) with interchangeable attention (SSA paper).

The macro design follows the SSA authors' ``models/spikingresformer.py`` [code]: a prologue
(ImageNet: 7x7/2 conv, BN, 3x3/2 max-pool; small images: 3x3 conv, BN), stages of
[attention, GWFFN] blocks joined by downsampling layers (LIF, 3x3/2 conv, BN), global average
pooling and a bias-free linear classifier applied at every step. The residual stream is
real-valued; every block begins with its own neuron, so each convolution sees spikes (except the
prologue's, which sees the image, and the classifier's, which sees the pooled stream).

GWFFN (grouped-wise FFN): ``up = BN(Conv1x1(LIF(x)))`` to ratio*C channels, then
``BN(GroupConv3x3(LIF(.)))`` with ``group_size`` channels per group and an inner residual, then
``BN(Conv1x1(LIF(.)))`` back to C, plus the outer residual.

Configs: ``DIGITS_CONFIG`` trains on scikit-learn's 8x8 digits on a CPU in minutes (T = 4);
``paper_config("ssa-ti")`` etc. give the paper's -Ti ([64, 192, 384], heads [1, 3, 6]) and -S
([64, 256, 512], heads [1, 4, 8]) ImageNet configs, built and counted but not trained here.
``activation="relu"`` with ``T=1`` is the non-spiking twin of the same backbone.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from edgekit.data import DIGITS
from edgekit.errors import UsageError
from edgekit.methods.ssa.attention import ATTENTION_KINDS, make_attention
from edgekit.registry import ExportSettings, ModelEntry, TaskSpec, TrainSettings, register_model
from edgekit.spiking.layers import MultiStepNet, activation, bn, conv, layer

PAPER = ("Efficient Transformer Attention for SNNs via Hadamard Simplification (ICML 2026); "
         "backbone: Shi et al., SpikingResformer, CVPR 2024")
PROLOGUES = ("small", "imagenet")


class GWFFN(nn.Module):
    """Grouped-wise feed-forward network of SpikingResformer [code]."""

    def __init__(self, dim: int, ratio: int = 4, group_size: int = 64, act: str = "lif") -> None:
        super().__init__()
        inner = dim * ratio
        if inner % group_size:
            raise UsageError(f"GWFFN width {inner} is not a multiple of group_size {group_size}")
        self.up = nn.Sequential(activation(act), conv(dim, inner, 1), bn(inner))
        self.mid = nn.Sequential(activation(act), conv(inner, inner, 3, groups=inner // group_size),
                                 bn(inner))
        self.down = nn.Sequential(activation(act), conv(inner, dim, 1), bn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, B, C, H, W]
        up = self.up(x)  # [T, B, ratio*C, H, W]
        return x + self.down(up + self.mid(up))


class Block(nn.Module):
    """One [attention, GWFFN] pair."""

    def __init__(self, dim: int, heads: int, attention: str, ratio: int, group_size: int,
                 act: str) -> None:
        super().__init__()
        self.attn = make_attention(attention, dim, heads, act)
        self.ffn = GWFFN(dim, ratio, group_size, act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.attn(x))


class Downsample(nn.Sequential):
    def __init__(self, cin: int, cout: int, act: str) -> None:
        super().__init__(activation(act), conv(cin, cout, 3, stride=2), bn(cout))


class SpikingResformer(MultiStepNet):
    # Over 8 parameters: the paper config's hyperparameters; the registry builds the net from
    # a config dict (builder(**config)) that checkpoints store
    def __init__(self, T: int = 4, in_channels: int = 1, num_classes: int = 10,
                 input_size: int = 8, channels: Sequence[int] = (32, 64),
                 heads: Sequence[int] = (1, 2), depths: Sequence[int] = (1, 1),
                 attention: str = "ssa", activation: str = "lif", ffn_ratio: int = 4,
                 group_size: int = 32, prologue: str = "small") -> None:
        super().__init__(T, (in_channels, input_size, input_size))
        if not len(channels) == len(heads) == len(depths) >= 1:
            raise UsageError("channels, heads and depths need one entry per stage")
        if attention not in ATTENTION_KINDS:
            raise UsageError(f"unknown attention '{attention}'",
                             hint=f"valid: {', '.join(ATTENTION_KINDS)}")
        if prologue == "imagenet":  # 7x7/2 conv, BN, 3x3/2 max-pool: H/4
            self.prologue = nn.Sequential(conv(in_channels, channels[0], 7, stride=2),
                                          bn(channels[0]),
                                          layer.MaxPool2d(3, 2, padding=1, step_mode="m"))
        elif prologue == "small":  # the authors' CIFAR/DVS prologue: 3x3 conv, BN
            self.prologue = nn.Sequential(conv(in_channels, channels[0], 3), bn(channels[0]))
        else:
            raise UsageError(f"unknown prologue '{prologue}'",
                             hint=f"valid: {', '.join(PROLOGUES)}")
        self.attention, self.activation = attention, activation
        stages = []
        for i, (dim, h, depth) in enumerate(zip(channels, heads, depths, strict=False)):
            blocks: list[nn.Module] = [Downsample(channels[i - 1], dim, activation)] if i else []
            blocks += [Block(dim, h, attention, ffn_ratio, group_size, activation)
                       for _ in range(depth)]
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = layer.AdaptiveAvgPool2d((1, 1), step_mode="m")
        self.head = layer.Linear(channels[-1], num_classes, bias=False, step_mode="m")
        self._init_weights()

    def _init_weights(self) -> None:
        """As the authors' ``init_weight``: truncated normal (std 0.02) weights, unit BN."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward_features(self, x_seq: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.prologue(x_seq))  # [T, B, C, H', W']
        return self.pool(x).flatten(2)  # [T, B, C]

    def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x_seq))  # [T, B, classes]


# -- configs --------------------------------------------------------------------------------------

DIGITS_CONFIG: dict[str, Any] = {
    "T": 4, "in_channels": 1, "num_classes": 10, "input_size": 8,
    "channels": (32, 64), "heads": (1, 2), "depths": (1, 1),
    "attention": "ssa", "activation": "lif", "ffn_ratio": 4, "group_size": 32,
    "prologue": "small",
}
ATTENTION_VARIANTS = {"reference": {"attention": "reference"}, "ussa": {"attention": "ussa"}}

PAPER_SIZES: dict[str, dict[str, Any]] = {  # [code] spikingresformer_ti / _s
    "ti": {"channels": (64, 192, 384), "heads": (1, 3, 6)},
    "s": {"channels": (64, 256, 512), "heads": (1, 4, 8)},
}
PAPER_CONFIG_NAMES = tuple(f"{a}-{s}" for a in ATTENTION_KINDS for s in PAPER_SIZES)


def paper_config(name: str, **overrides: Any) -> dict[str, Any]:
    """The ImageNet config ``ATTENTION-SIZE`` (``"ssa-ti"``, ``"reference-s"``, ...): 224x224,
    1000 classes, T = 4, depths [1, 2, 3], group size 64, the 7x7/2 + max-pool prologue."""
    attention, _, size = name.partition("-")
    if attention not in ATTENTION_KINDS or size not in PAPER_SIZES:
        raise UsageError(f"unknown SpikingResformer paper config '{name}'",
                         hint=f"valid: {', '.join(PAPER_CONFIG_NAMES)}")
    cfg = {"T": 4, "in_channels": 3, "num_classes": 1000, "input_size": 224, "depths": (1, 2, 3),
           "attention": attention, "activation": "lif", "ffn_ratio": 4, "group_size": 64,
           "prologue": "imagenet", **PAPER_SIZES[size]}
    unknown = set(overrides) - set(cfg)
    if unknown:
        raise UsageError(f"unknown config keys: {', '.join(sorted(unknown))}")
    cfg.update(overrides)
    return cfg


def build_paper_model(name: str, **overrides: Any) -> SpikingResformer:
    """A paper-size model; pass ``input_size`` to run it on smaller images (counting, tests)."""
    return SpikingResformer(**paper_config(name, **overrides))


def paper_entry(name: str, **overrides: Any) -> ModelEntry:
    """An unregistered ``ModelEntry`` for a paper config (ImageNet contract, no built-in
    dataset), so the exporters and the profiler can take it like any registry model:
    ``registry_source(entry, None, entry.build())``."""
    cfg = paper_config(name, **overrides)
    size = cfg["input_size"]
    task = TaskSpec(dataset="imagenet", metric="accuracy",
                    input_shape=(cfg["in_channels"], size, size), num_classes=cfg["num_classes"])
    return ModelEntry(name=f"spikingresformer-{name}", family="spiking", builder=SpikingResformer,
                      config=cfg, task=task, description=f"SpikingResformer paper config {name}",
                      paper=PAPER, export=_SPIKING_EXPORT, spiking=cfg["activation"] == "lif")


_SPIKING_EXPORT = ExportSettings(atol=1e-4, rtol=1e-3, dynamo=True)
_TRAIN = TrainSettings(epochs=30, batch_size=64, lr=3e-3, weight_decay=1e-4)

register_model(ModelEntry(
    name="spikingresformer",
    family="spiking",
    builder=SpikingResformer,
    config=DIGITS_CONFIG,
    task=DIGITS.task,
    description="SpikingResformer with SSA (Hadamard) attention, LIF neurons, T=4, digits-sized",
    variants=ATTENTION_VARIANTS,
    paper=PAPER,
    export=_SPIKING_EXPORT,
    train=_TRAIN,
    spiking=True,
))

register_model(ModelEntry(
    name="resformer-ann",
    family="spiking",
    builder=SpikingResformer,
    config={**DIGITS_CONFIG, "T": 1, "activation": "relu"},
    task=DIGITS.task,
    description="the non-spiking twin of spikingresformer: ReLU for every LIF, one step",
    variants=ATTENTION_VARIANTS,
    paper=PAPER,
    export=ExportSettings(),
    train=_TRAIN,
    spiking=False,
))

