"""BatchNorm recalibration after a removal, and the measurement of what compensation buys.

``prune`` folds each removed channel's expected contribution into its consumers (see
``prune.py``); recalibrating BatchNorm's running statistics on a few batches then adapts every
normalisation to the narrower net. ``removal_effect`` measures the accuracy right after removal
three ways on copies of one gated net: plain slicing, with the fold, with the fold and the
recalibration (so the accuracy right after removal is known with and without compensation).
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from edgekit.methods.spik4lite.gates import gated_layers
from edgekit.methods.spik4lite.prune import prune
from edgekit.spiking.layers import functional
from edgekit.training import evaluate

NORMS = nn.modules.batchnorm._BatchNorm


@torch.no_grad()
def recalibrate_bn(model: nn.Module, batches: list[torch.Tensor]) -> None:
    """Running statistics of every BatchNorm as exact averages over ``batches``; every other
    module (gates, neurons) runs in eval mode, so nothing else moves."""
    norms = [m for m in model.modules() if isinstance(m, NORMS)]
    saved = [m.momentum for m in norms]
    was_training = model.training
    model.eval()
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
        m.train()
    try:
        for x in batches:
            functional.reset_net(model)
            model(x)
    finally:
        for m, momentum in zip(norms, saved, strict=False):
            m.momentum = momentum
        functional.reset_net(model)
        model.train(was_training)


def removal_effect(model: nn.Module, batches: list[torch.Tensor], x_test: np.ndarray,
                   y_test: np.ndarray, **prune_args: Any) -> dict[str, float]:
    """Test accuracy of a gated net before removal and right after it, on copies: without
    compensation, with the fold, and with the fold plus BatchNorm recalibration."""
    result = {"before": evaluate(model, x_test, y_test)}
    for _, gate in gated_layers(model):
        gate.penalty = None  # the last forward's graph; copies need plain tensors
    for label, compensate, recalibrate in (("plain", False, False), ("folded", True, False),
                                           ("folded_recalibrated", True, True)):
        trial = copy.deepcopy(model)
        prune(trial, batches[0], compensate=compensate, batches=batches, **prune_args)
        if recalibrate:
            recalibrate_bn(trial, batches)
        result[label] = evaluate(trial, x_test, y_test)
    return result
