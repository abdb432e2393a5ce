"""A small spiking CNN built only from NIR primitives, so it exports to NIR (``exporters/nir.py``).

conv (with bias) -> LIF -> 2x2 average pool, twice, then flatten -> linear -> LIF -> linear. No
BatchNorm, residual or product: each layer maps to one NIR node (Conv2d, LIF, AvgPool2d,
Flatten, Affine), so a NIR simulator runs exactly this net. The output layer is a plain linear
readout whose values are averaged over the T steps (rate decoding).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from edgekit.data import DIGITS
from edgekit.registry import ExportSettings, ModelEntry, TrainSettings, register_model
from edgekit.spiking.layers import MultiStepNet, layer, lif


class SpikingCNN(MultiStepNet):
    def __init__(self, T: int = 4, in_channels: int = 1, num_classes: int = 10,
                 input_size: int = 8, channels: Sequence[int] = (16, 32), hidden: int = 64) -> None:
        super().__init__(T, (in_channels, input_size, input_size))
        blocks: list[nn.Module] = []
        cin, side = in_channels, input_size
        for cout in channels:
            blocks += [layer.Conv2d(cin, cout, 3, padding=1, bias=True, step_mode="m"), lif(),
                       layer.AvgPool2d(2, 2, step_mode="m")]
            cin, side = cout, side // 2
        blocks += [layer.Flatten(step_mode="m"),  # [T, B, C*H*W]
                   layer.Linear(cin * side * side, hidden, step_mode="m"), lif(),
                   layer.Linear(hidden, num_classes, step_mode="m")]
        self.body = nn.Sequential(*blocks)
        for m in self.body.modules():  # He init doubled: without BatchNorm the default init
            if isinstance(m, (nn.Conv2d, nn.Linear)):  # leaves every neuron below threshold
                nn.init.normal_(m.weight, std=2.0 * math.sqrt(2.0 / m.weight[0].numel()))
                nn.init.zeros_(m.bias)

    def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.body(x_seq)  # [T, B, C, H, W] -> [T, B, classes]


register_model(ModelEntry(
    name="spiking-cnn",
    family="spiking",
    builder=SpikingCNN,
    config={"T": 4, "in_channels": 1, "num_classes": 10, "input_size": 8, "channels": (16, 32),
            "hidden": 64},
    task=DIGITS.task,
    description="spiking CNN of NIR primitives (conv, LIF, avg-pool, flatten, linear), T=4",
    export=ExportSettings(),
    train=TrainSettings(epochs=40, batch_size=64, lr=3e-3, weight_decay=1e-4),
    spiking=True,
))
