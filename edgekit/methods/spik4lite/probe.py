"""One forward pass that only looks: temporary hooks, and membranes reset before and after, so
a probe of the net's structure leaves no state behind for the next real pass."""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from edgekit.spiking.layers import functional


def probe_forward(model: nn.Module, x: torch.Tensor, handles: Iterable[RemovableHandle]) -> None:
    """Run ``model(x)`` from reset membranes; remove ``handles`` and reset again, even on error."""
    handles = list(handles)
    try:
        functional.reset_net(model)
        model(x)
    finally:
        for h in handles:
            h.remove()
        functional.reset_net(model)
