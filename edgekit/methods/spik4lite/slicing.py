"""Physical channel removal on one layer: parameters, buffers, attributes, optimizer state.

Every function takes the sorted indices to *keep*. A parameter is replaced by a new one, and the
optimizer's state for it (Adam's moments, momentum buffers) is sliced the same way and moved to
the new parameter, so training continues where it was (the authors' ``prune_optimizer_state``
does the same).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from edgekit.methods.spik4lite.gates import GatedLayer

Slice = Callable[[torch.Tensor], torch.Tensor]


def _replace(module: nn.Module, attr: str, cut: Slice,
             optimizer: torch.optim.Optimizer | None) -> None:
    old = getattr(module, attr)
    if old is None:
        return
    if not isinstance(old, nn.Parameter):  # a buffer
        setattr(module, attr, cut(old).clone())
        return
    new = nn.Parameter(cut(old.detach()).clone(), requires_grad=old.requires_grad)
    setattr(module, attr, new)
    if optimizer is None:
        return
    state = optimizer.state.pop(old, None)
    if state is not None:
        optimizer.state[new] = {k: cut(v).clone() if torch.is_tensor(v) and v.shape == old.shape
                                else v for k, v in state.items()}
    for group in optimizer.param_groups:
        group["params"] = [new if p is old else p for p in group["params"]]


def _along(dim: int, keep: torch.Tensor) -> Slice:
    return lambda t: t.index_select(dim, keep)


def cut_out(layer: nn.Module, keep: torch.Tensor, optimizer: torch.optim.Optimizer | None) -> None:
    """Keep output channels ``keep`` of a conv/linear, or features ``keep`` of a BatchNorm."""
    if isinstance(layer, nn.modules.batchnorm._BatchNorm):
        for attr in ("weight", "bias", "running_mean", "running_var"):
            _replace(layer, attr, _along(0, keep), optimizer)
        layer.num_features = len(keep)
        return
    _replace(layer, "weight", _along(0, keep), optimizer)
    _replace(layer, "bias", _along(0, keep), optimizer)
    if isinstance(layer, nn.Conv2d):
        if layer.groups == layer.in_channels == layer.out_channels:  # depthwise: groups go too
            layer.groups = layer.in_channels = len(keep)
        layer.out_channels = len(keep)
    else:
        layer.out_features = len(keep)


def _grouped_in(groups: int, width: int, keep: torch.Tensor) -> Slice:
    """Input-channel slice of a grouped conv's weight ``[C_out, C_in/groups, k, k]``: the rows of
    group g keep the local indices of ``keep`` that fall in g (the same count in every group)."""
    per = width // groups
    local = [keep[(keep >= g * per) & (keep < (g + 1) * per)] - g * per for g in range(groups)]

    def cut(t: torch.Tensor) -> torch.Tensor:
        rows = t.shape[0] // groups
        index = torch.cat([local[g].expand(rows, -1) for g in range(groups)])  # [C_out, kept/g]
        return t.gather(1, index.view(*index.shape, *([1] * (t.dim() - 2))).expand(
            -1, -1, *t.shape[2:]))
    return cut


def cut_in(layer: nn.Module, keep: torch.Tensor, optimizer: torch.optim.Optimizer | None) -> None:
    """Keep input channels ``keep`` of a conv/linear (and of its Spik4lite gate, if gated)."""
    if isinstance(layer, GatedLayer):
        pairs = torch.stack([2 * keep, 2 * keep + 1], 1).flatten()  # (drop, keep) rows of c
        _replace(layer.gate, "weight", lambda t: t.index_select(0, pairs).index_select(1, keep),
                 optimizer)
        _replace(layer.gate, "bias", _along(0, pairs), optimizer)
        layer.gate.in_features, layer.gate.out_features = len(keep), 2 * len(keep)
        layer.running_fr = layer.running_fr.index_select(0, keep).clone()
        layer.stop_accumulating()
        layer = layer.layer
    if isinstance(layer, nn.Linear):
        _replace(layer, "weight", _along(1, keep), optimizer)
        layer.in_features = len(keep)
        return
    if layer.groups == layer.in_channels == layer.out_channels:
        return  # depthwise: the output side removes the whole group (cut_out)
    if layer.groups > 1:
        _replace(layer, "weight", _grouped_in(layer.groups, layer.in_channels, keep), optimizer)
    else:
        _replace(layer, "weight", _along(1, keep), optimizer)
    layer.in_channels = len(keep)
