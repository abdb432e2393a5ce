"""A plain multilayer perceptron on flattened pixels: the smallest sensible baseline."""
from __future__ import annotations

import math

from torch import nn

from edgekit.data import DIGITS
from edgekit.registry import ModelEntry, TrainSettings, register_model


class MLP(nn.Module):
    def __init__(self, input_shape: tuple[int, ...] = (1, 8, 8), num_classes: int = 10,
                 hidden: tuple[int, ...] = (128, 64), dropout: float = 0.1) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]  # (B, C, H, W) -> (B, C*H*W)
        width = math.prod(input_shape)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)  # (B, num_classes)


register_model(ModelEntry(
    name="mlp",
    family="reference",
    builder=MLP,
    config={"input_shape": (1, 8, 8), "num_classes": 10, "hidden": (128, 64), "dropout": 0.1},
    task=DIGITS.task,
    description="multilayer perceptron on flattened pixels",
    variants={"small": {"hidden": (32,)}, "large": {"hidden": (512, 256)}},
    train=TrainSettings(epochs=30, lr=3e-3),
))
