"""Parameters and FLOPs of a model, from torch's own flop counter.

``torch.utils.flop_counter.FlopCounterMode`` counts 2 FLOPs per multiply-accumulate for
matmuls and convolutions (grouped and depthwise included); element-wise ops are not counted, as in
fvcore and most papers' tables.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelCost:
    params: int
    flops: int  # per forward pass of the given inputs (the whole batch)
    batch: int

    @property
    def flops_per_sample(self) -> float:
        return self.flops / max(1, self.batch)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.inference_mode()
def model_cost(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> ModelCost:
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()
    with FlopCounterMode(display=False) as counter:
        model(*inputs)
    model.train(was_training)
    batch = int(inputs[0].shape[0]) if inputs and inputs[0].dim() else 1
    return ModelCost(count_params(model), int(counter.get_total_flops()), batch)
