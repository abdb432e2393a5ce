"""A spiking net as the chain of layers a chip would host, read by running it once.

Forward hooks record every leaf module in call order with its input and output shapes (time and
batch dimensions dropped), so the walk sees the net a chip would run whatever Python built it,
a registry model or the user's own ``MultiStepNet``. The encoding (``encode``) runs on the host;
the walk starts at ``forward_seq``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.spiking.layers import MultiStepNet, SumPool2d, functional, neuron

POOLS: dict[type, str] = {SumPool2d: "sum", nn.AvgPool2d: "avg", nn.MaxPool2d: "max"}


@dataclass
class NetLayer:
    kind: str  # "conv", "linear", "neuron", "pool", "flatten" or "other"
    module: nn.Module
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return type(self.module).__name__


def max_spikes(node: nn.Module) -> int | None:
    """The spikes a multi-spike neuron (``XyloLIFNode``) may fire per step; None for the
    one-spike neurons of SpikingJelly."""
    value = getattr(node, "max_spikes", None)
    return int(value) if value is not None else None


def neuron_kind(node: nn.Module) -> str:
    """"lif" (leaky; Xylo's current-based LIF too), "iaf" (no leak) or the class name of another
    neuron."""
    if isinstance(node, neuron.LIFNode) or max_spikes(node) is not None:
        return "lif"
    if isinstance(node, neuron.IFNode):
        return "iaf"
    return type(node).__name__


def _classify(module: nn.Module) -> tuple[str, dict[str, Any]]:
    if isinstance(module, nn.Conv2d):
        return "conv", {"kernel": tuple(module.kernel_size), "stride": tuple(module.stride),
                        "padding": module.padding, "bias": module.bias is not None}
    if isinstance(module, nn.Linear):
        return "linear", {"bias": module.bias is not None}
    if isinstance(module, neuron.BaseNode):
        return "neuron", {"model": neuron_kind(module),
                          "reset": "subtract" if module.v_reset is None else "to_reset",
                          "threshold": float(module.v_threshold),
                          "max_spikes": max_spikes(module)}
    pool = next((kind for base, kind in POOLS.items() if isinstance(module, base)), None)
    if pool is not None:
        size = module.kernel_size
        return "pool", {"pool": pool, "kernel": size if isinstance(size, tuple) else (size, size)}
    if isinstance(module, nn.Flatten):
        return "flatten", {}
    return "other", {}


def _leaves(model: nn.Module) -> list[nn.Module]:
    """Every neuron and every module without children outside neurons (a neuron's surrogate
    function is part of the neuron)."""
    inside = {id(m) for node in model.modules() if isinstance(node, neuron.BaseNode)
              for m in node.modules() if m is not node}
    return [m for m in model.modules() if id(m) not in inside
            and (not list(m.children()) or isinstance(m, neuron.BaseNode))]


@torch.no_grad()
def walk(model: MultiStepNet, sample: torch.Tensor) -> list[NetLayer]:
    """The layers of ``model.forward_seq`` in call order, shapes per sample ([T, B] dropped)."""
    if not isinstance(model, MultiStepNet):
        raise UsageError(f"{type(model).__name__} is not an edgekit MultiStepNet",
                         hint="a chip target needs a spiking net of edgekit.spiking.layers")
    seen: list[NetLayer] = []

    def hook(module: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
        kind, detail = _classify(module)
        seen.append(NetLayer(kind, module, tuple(args[0].shape[2:]), tuple(out.shape[2:]),
                             detail))

    handles = [m.register_forward_hook(hook) for m in _leaves(model)]
    functional.reset_net(model)
    try:
        model.eval().forward_seq(model.encode(sample[:1]))
    finally:
        for h in handles:
            h.remove()
        functional.reset_net(model)
    return seen
