"""Find every convolution and linear layer fed by spikes and gate it (``wrap``), or take the
gates out again (``unwrap``).

"Fed by spikes" is decided by running the net, not by names: a probe batch goes through the net in
training mode (BatchNorm on batch statistics, so an untrained net fires), and a layer is gated
when every value it receives is 0 or 1. The first convolution (it sees the image) and a
classifier on the pooled stream (real-valued) are left alone; so is every layer of a net without
spiking neurons, which is refused.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.methods.spik4lite.gates import GatedLayer, gated_layers
from edgekit.methods.spik4lite.probe import probe_forward
from edgekit.spiking.layers import functional, is_spiking


def _probe_input(model: nn.Module, batch: int = 4) -> torch.Tensor:
    shape = getattr(model, "input_shape", None)
    if shape is None:
        raise UsageError(f"{type(model).__name__} has no input_shape; Spik4lite gates multi-step "
                         "spiking nets (edgekit.spiking.layers.MultiStepNet)")
    gen = torch.Generator().manual_seed(0)
    return torch.rand((batch, *shape), generator=gen)


@torch.no_grad()
def spike_fed_layers(model: nn.Module, x: torch.Tensor | None = None) -> list[str]:
    """Qualified names of the conv/linear layers whose every input value is 0 or 1 on ``x``."""
    if not is_spiking(model):
        raise UsageError(f"{type(model).__name__} has no spiking neurons; Spik4lite gates the "
                         "layers of spiking nets", hint="pick a model with spiking=True")
    x = _probe_input(model) if x is None else x
    binary: dict[str, bool] = {}

    def check(name: str) -> Any:
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            s = args[0]
            ok = bool(((s == 0) | (s == 1)).all())
            binary[name] = binary.get(name, True) and ok
        return hook

    handles = [m.register_forward_pre_hook(check(n)) for n, m in model.named_modules()
               if isinstance(m, (nn.Conv2d, nn.Linear)) and not _inside_gate(n)]
    was_training = model.training
    model.train()
    saved = _bn_state(model)
    try:
        probe_forward(model, x, handles)
    finally:
        _restore_bn(model, saved)
        model.train(was_training)
    return [n for n, ok in binary.items() if ok]


def _inside_gate(name: str) -> bool:
    return name.endswith(".gate") or name == "gate"


def _bn_state(model: nn.Module) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
    """The probe runs in training mode; BatchNorm's running statistics must not move."""
    return [(m, {k: v.clone() for k, v in m.state_dict().items()}) for m in model.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def _restore_bn(model: nn.Module, saved: list[tuple[nn.Module, dict[str, torch.Tensor]]]) -> None:
    for m, state in saved:
        m.load_state_dict(state)


def _set(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def wrap(model: nn.Module, x: torch.Tensor | None = None) -> list[str]:
    """Gate every conv/linear of ``model`` fed by spikes, in place; returns their names."""
    if gated_layers(model):
        raise UsageError("this model is already gated by Spik4lite")
    names = spike_fed_layers(model, x)
    if not names:
        raise UsageError(f"{type(model).__name__}: no convolution or linear layer receives spikes")
    for name in names:
        layer = model.get_submodule(name)
        _set(model, name, GatedLayer(layer).to(next(layer.parameters()).device))
    functional.invalidate_reset_cache(model)  # reset_net caches a net's modules
    return names


def unwrap(model: nn.Module) -> list[str]:
    """Delete every gate, putting each layer back under its own name (the static fine-tune)."""
    names = [n for n, _ in gated_layers(model)]
    for name in names:
        _set(model, name, model.get_submodule(name).layer)
    functional.invalidate_reset_cache(model)
    return names
