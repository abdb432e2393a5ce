"""A MobileNet-style depthwise-separable CNN (Howard et al., 2017, arXiv:1704.04861), digits-sized.

Stem conv, then blocks of depthwise 3x3 + pointwise 1x1 convolutions (each with BN and ReLU),
global average pooling and a linear classifier. ``width`` scales every channel count as
MobileNet's width multiplier does.
"""
from __future__ import annotations

from torch import nn

from edgekit.data import DIGITS
from edgekit.registry import ModelEntry, TrainSettings, register_model


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class DepthwiseSeparable(nn.Sequential):
    """Depthwise kxk (spatial mixing per channel) then pointwise 1x1 (channel mixing)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__(_conv_bn(cin, cin, 3, stride, groups=cin), _conv_bn(cin, cout, 1))


class DSCNN(nn.Module):
    def __init__(self, in_channels: int = 1, num_classes: int = 10,
                 channels: tuple[int, ...] = (16, 32, 64), strides: tuple[int, ...] = (1, 2, 2),
                 width: float = 1.0) -> None:
        super().__init__()
        widths = [max(4, round(c * width)) for c in channels]
        self.stem = _conv_bn(in_channels, widths[0], 3)
        blocks = []
        for cin, cout, stride in zip(widths, widths[1:] + [widths[-1]], strides, strict=False):
            blocks.append(DepthwiseSeparable(cin, cout, stride))
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(widths[-1], num_classes)

    def forward_features(self, x):  # (B, C, H, W) -> (B, C')
        return self.pool(self.blocks(self.stem(x))).flatten(1)

    def forward(self, x):
        return self.head(self.forward_features(x))  # (B, num_classes)


register_model(ModelEntry(
    name="ds-cnn",
    family="reference",
    builder=DSCNN,
    config={"in_channels": 1, "num_classes": 10, "channels": (16, 32, 64), "strides": (1, 2, 2),
            "width": 1.0},
    task=DIGITS.task,
    description="MobileNet-style depthwise-separable CNN",
    variants={"tiny": {"width": 0.5}, "wide": {"width": 2.0}},
    paper="Howard et al. 2017, MobileNets, arXiv:1704.04861",
    train=TrainSettings(epochs=25, lr=5e-3),
))
