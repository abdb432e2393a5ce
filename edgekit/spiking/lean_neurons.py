"""Hard-reset LIF and IF neurons for inference: SpikingJelly's arithmetic in fewer operations.

A T-step net runs every neuron T times. SpikingJelly's CPU kernel (``spikingjelly._ops.lif.cpu``)
does, per step, a slice of the input, the charge ``h = v + (x - (v - v_reset)) / tau``, the fire
``s = (h >= v_th)`` cast to float, the reset ``v = s * v_reset + (1 - s) * h`` and three stacks at
the end (spikes, voltages and the charges its backward needs). Exported, that is about 12 ONNX
nodes per neuron and step, most of a digits net's graph (the Spikingformer: 528 of 602 nodes for
its 11 neurons at T = 4); run eagerly, it is most of PyTorch's time at batch 1, where an eager
op costs microseconds of dispatch whatever its width. On ONNX Runtime a node costs less (0.4-1 µs
on 1-8k floats, benchmarks/README.md, lean_neurons.py), so there the gain is smaller.

``lean_neurons`` swaps, within a block, each eval-mode neuron's multi-step forward for one that
splits the input keeping its time axis (no Squeeze / Unsqueeze per step), resets with
``where(h >= v_th, v_reset, h)`` (the same value: s is 0 or 1), skips the ``v - v_reset`` of a
zero reset and the first step's charge from rest, and casts the spikes once. Every value is
bitwise what SpikingJelly computes (the same operations on the same operands in the same order;
the tests compare bits). ``MultiStepNet`` runs its eval forward inside it and ``export_graph``
its exports; training never sees it.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import MethodType
from typing import Any

import torch
from torch import nn

_NEURON_MODULE = "spikingjelly.activation_based.neuron"


def _lean_multi_step(node: Any, x_seq: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """SpikingJelly's eval-mode multi-step hard-reset LIF/IF step, lean; sets the neuron's state
    (``v``, and ``v_seq`` when ``store_v_seq``) as SpikingJelly does."""
    if node.training:  # switched to training inside the block: SpikingJelly's own, with gradients
        return type(node).multi_step_forward(node, x_seq, *args, **kwargs)
    lif = hasattr(node, "tau")  # LIFNode; IFNode has no tau
    reset, threshold, v = node.v_reset, node.v_threshold, node.v
    fresh = isinstance(v, float) and v == reset == 0.0  # then v - v_reset, v + ... are exact no-ops
    if isinstance(v, float) and not fresh:
        v = torch.full_like(x_seq[0], v)
    fired, voltages = [], []
    for t, x in enumerate(x_seq.split(1)):  # (1, ...) slices: no Squeeze / Unsqueeze per step
        if fresh and t == 0:  # from v = 0 every charge is x, or x / tau
            h = x / node.tau if lif and node.decay_input else x
        elif lif and node.decay_input:
            h = v + (x - (v if reset == 0.0 else v - reset)) / node.tau
        elif lif:
            h = v - (v if reset == 0.0 else v - reset) / node.tau + x
        else:
            h = v + x
        spike = h >= threshold
        v = torch.where(spike, reset, h)
        fired.append(spike)
        voltages.append(v)
    node.v = v.squeeze(0)
    if node.store_v_seq:
        node.v_seq = torch.cat(voltages)
    return torch.cat(fired).to(x_seq.dtype)


def _swappable(model: nn.Module) -> list[nn.Module]:
    """The eval-mode multi-step hard-reset LIF and IF neurons of ``model`` (exact types: a
    subclass may change the dynamics) not already swapped by an enclosing block."""
    sj = sys.modules.get(_NEURON_MODULE)
    if sj is None:  # SpikingJelly never imported: no neuron can be in the model
        return []
    kinds = (sj.LIFNode, sj.IFNode)
    return [m for m in model.modules()
            if type(m) in kinds and m.v_reset is not None and m.step_mode == "m"
            and not m.training and "multi_step_forward" not in vars(m)]


@contextmanager
def lean_neurons(model: nn.Module) -> Iterator[int]:
    """Within the block every eval-mode multi-step hard-reset LIF/IF neuron of ``model`` runs
    the lean forward; yields how many were swapped. Restored on exit, whatever happens."""
    swapped = _swappable(model)
    for node in swapped:
        vars(node)["multi_step_forward"] = MethodType(_lean_multi_step, node)
    try:
        yield len(swapped)
    finally:
        for node in swapped:
            vars(node).pop("multi_step_forward", None)
