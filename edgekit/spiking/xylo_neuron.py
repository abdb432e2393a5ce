"""Xylo's neuron in floating point, for training: a current-based LIF that fires several spikes
per step.

Stands in for Rockpool's ``LIFTorch`` (``rockpool.nn.modules.torch.lif_torch``, 3.1.0) with
``leak_mode="bitshifts"`` and ``max_spikes_per_dt``, the float model Rockpool trains Xylo nets
with; Rockpool is not a dependency of edgekit (its Xylo package imports samna, docs/chips.md).
``tests/test_xylo_neuron.py`` compares the two step by step where Rockpool imports. One step, as
LIFTorch (and, in integers, Xylo's core: ``edgekit/neuromorphic/xylo_sim.py``) does it::

    i = (i + x) * (1 - 2**-dash_syn)      # synaptic current: the input, then the decay
    v = v * (1 - 2**-dash_mem) + i + b    # membrane: leak, current, bias
    s = clamp(floor(v / v_th), 0, max_spikes)
    v = v - s * v_th                      # subtractive reset, once per spike

Xylo's hidden neurons fire at most 31 times a step, its readout neurons once. The spike function's
gradient is LIFTorch's ``StepPWL``: ``1 / v_th`` where ``v >= v_th - window``, also past the cap
(a saturated neuron still learns to fire less), with a wider window than LIFTorch's default 0.5:
trained for 40 epochs on digits (docs/chips.md), spiking-cnn:xylo reached 65.0 % with 0.5,
88.9 % with 2.0 and 78.3 % with the gradient everywhere (a window of 100). Built on
SpikingJelly's ``BaseNode`` (explicit states ``v`` and ``i_syn``), so SpikingJelly's
``reset_net`` and multi-step mode apply.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from edgekit.spiking.layers import neuron

WINDOW = 2.0  # the surrogate's window below the threshold (LIFTorch's learning_window: 0.5)


class _FloorSpikeCount(torch.autograd.Function):
    """``clamp(floor(v / v_th), 0, max_spikes)`` with LIFTorch's piecewise-linear gradient."""

    @staticmethod
    def forward(ctx: Any, v: torch.Tensor, v_th: float, max_spikes: int) -> torch.Tensor:
        ctx.save_for_backward(v)
        ctx.v_th, ctx.max_spikes = v_th, max_spikes
        return torch.clamp(torch.floor(v / v_th), 0, max_spikes)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (v,) = ctx.saved_tensors
        live = v >= ctx.v_th - WINDOW
        return grad * live / ctx.v_th, None, None


class StepPWL(nn.Module):
    """The spike function (LIFTorch's ``StepPWL``, spikes capped at ``max_spikes``) as the neuron's
    ``surrogate_function``."""

    def __init__(self, max_spikes: int) -> None:
        super().__init__()
        self.max_spikes = max_spikes

    def forward(self, v: torch.Tensor, v_threshold: float) -> torch.Tensor:
        return _FloorSpikeCount.apply(v, v_threshold, self.max_spikes)

    def extra_repr(self) -> str:
        return f"max_spikes={self.max_spikes}, window={WINDOW}"


class XyloLIFNode(neuron.BaseNode):
    """Multi-step LIF with a synaptic current, bit-shift decays, a per-neuron bias on the
    membrane and up to ``max_spikes`` spikes per step (see the module's docstring); its output is
    the spike count of each step. ``size``: the neurons (the last input dimension)."""

    def __init__(self, size: int, max_spikes: int, dash_mem: int = 1, dash_syn: int = 1,
                 bias: bool = True, v_threshold: float = 1.0, step_mode: str = "m") -> None:
        super().__init__(v_threshold=v_threshold, v_reset=None,
                         surrogate_function=StepPWL(max_spikes), detach_reset=True,
                         step_mode=step_mode)
        self.register_memory("i_syn", 0.0)
        self.size, self.max_spikes = size, max_spikes
        self.dash_mem, self.dash_syn = dash_mem, dash_syn
        self.bias = nn.Parameter(torch.zeros(size)) if bias else None

    def extra_repr(self) -> str:
        return (f"size={self.size}, max_spikes={self.max_spikes}, dash_mem={self.dash_mem}, "
                f"dash_syn={self.dash_syn}, bias={self.bias is not None}, "
                f"v_threshold={self.v_threshold}, step_mode={self.step_mode}")

    def materialize_states(self, inputs: tuple[torch.Tensor, ...], states: tuple[object, ...],
                           step_mode: str) -> tuple[object, ...]:
        v, i_syn = super().materialize_states(inputs, states, step_mode)
        if not isinstance(i_syn, torch.Tensor) or i_syn.shape != v.shape:
            i_syn = torch.zeros_like(v)
        return v, i_syn

    def single_step_functional_forward(
            self, inputs: tuple[torch.Tensor, ...], states: tuple[object, ...],
            **kwargs: object) -> tuple[tuple[torch.Tensor, ...], tuple[object, ...]]:
        v, i_syn = states
        i_syn = (i_syn + inputs[0]) * (1.0 - 2.0 ** -self.dash_syn)
        v = v * (1.0 - 2.0 ** -self.dash_mem) + i_syn
        if self.bias is not None:
            v = v + self.bias
        spikes = self.surrogate_function(v, self.v_threshold)
        v = v - (spikes.detach() if self.detach_reset else spikes) * self.v_threshold
        return (spikes,), (v, i_syn)
