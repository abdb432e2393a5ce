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


def spiking():
    """A spiking CNN of the user's own on edgekit's ``MultiStepNet`` (SpikingJelly LIF
    neurons, T=4): NIR export and ``edgekit simulate`` take it."""
    import math

    from edgekit.spiking.layers import MultiStepNet, layer, lif

    class MySpikingNet(MultiStepNet):
        def __init__(self) -> None:
            super().__init__(T=4, input_shape=(1, 12, 12))
            self.body = nn.Sequential(
                layer.Conv2d(1, 8, 3, padding=1, bias=True, step_mode="m"), lif(),
                layer.AvgPool2d(2, 2, step_mode="m"), layer.Flatten(step_mode="m"),
                layer.Linear(8 * 6 * 6, 4, step_mode="m"))
            for m in self.body.modules():  # scaled so that the neurons fire
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.normal_(m.weight, std=2.0 * math.sqrt(2.0 / m.weight[0].numel()))

        def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
            return self.body(x_seq)

    torch.manual_seed(2)
    return MySpikingNet().eval(), torch.rand(1, 1, 12, 12)
