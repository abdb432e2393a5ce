"""A user's own script, as one would write it: a model class of their own and the callables
edgekit is pointed at (``my_model.py:build`` and friends)."""
import torch
from torch import nn


class TwoHeads(nn.Module):
    """A small CNN with two outputs, returned as a dict: class scores and an embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.classify = nn.Linear(128, 5)
        self.embed = nn.Linear(128, 16)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.features(image)
        return {"scores": self.classify(h), "embedding": self.embed(h)}


def build():
    torch.manual_seed(1)
    return TwoHeads().eval(), torch.rand(1, 3, 32, 32)


def bare():
    """The module alone: its inputs must come from --input."""
    torch.manual_seed(1)
    return TwoHeads().eval()


def broken():
    raise RuntimeError("the weights file is missing")


def not_a_module():
    return 42
