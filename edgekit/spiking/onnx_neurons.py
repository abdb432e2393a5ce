"""Hard-reset LIF and IF neurons written for export: the same arithmetic as SpikingJelly's in
fewer graph nodes.

A T-step net unrolls every neuron T times into the exported graph. SpikingJelly's CPU kernel
(``spikingjelly._ops.lif.cpu``) traces, per step, into a Slice, a Squeeze, the charge
``h = v + (x - (v - v_reset)) / tau``, the fire ``s = (h >= v_th)`` cast to float, the reset
``v = s * v_reset + (1 - s) * h`` and an Unsqueeze before the final stack: about 12 nodes, most
of an exported digits net (602 nodes in the Spikingformer, 528 of them its 11 neurons at T = 4).
On ONNX Runtime at edge sizes each node costs a few microseconds whatever its width, so those
nodes, not the convolutions, are where the time goes (benchmarks/README.md, spik4lite.py).

``exportable_neurons`` swaps, for the duration of an export, each neuron's multi-step forward
for one that keeps the time axis while it splits the input (no Squeeze / Unsqueeze), drops the
reset's arithmetic (``where(h >= v_th, v_reset, h)``: the same value, since s is 0 or 1) and the
``v - v_reset`` of a zero reset, and casts the spikes once for all steps. Each step's value is
bitwise what SpikingJelly computes (same operations on the same operands in the same order), so
the exported graph agrees with the PyTorch model exactly, not within a tolerance; the tests
check this. Training and PyTorch inference never see it: it applies in eval mode, inside the
export only.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from edgekit.spiking.layers import neuron


def _lean_multi_step(node: Any, x_seq: torch.Tensor) -> torch.Tensor:
    """SpikingJelly's eval-mode multi-step hard-reset LIF/IF forward, node-lean; also sets the
    neuron's state (``v``, and ``v_seq`` when ``store_v_seq``) as SpikingJelly does."""
    is_lif = isinstance(node, neuron.LIFNode)
    reset, threshold = node.v_reset, node.v_threshold
    v = node.v
    fresh = isinstance(v, float) and v == reset == 0.0  # v - v_reset and v + ... are exact no-ops
    if isinstance(v, float) and not fresh:
        v = torch.full_like(x_seq[0], v)
    fired, voltages = [], []
    for t, x in enumerate(x_seq.split(1)):  # (1, ...) slices: no Squeeze / Unsqueeze per step
        if fresh and t == 0:  # from v = 0 every charge is x, or x / tau
            h = x / node.tau if is_lif and node.decay_input else x
        elif is_lif and node.decay_input:
            h = v + (x - (v if reset == 0.0 else v - reset)) / node.tau
        elif is_lif:
            h = v - (v if reset == 0.0 else v - reset) / node.tau + x
        else:
            h = v + x
        spike = h >= threshold
        v = torch.where(spike, reset, h)
        fired.append(spike)
        voltages.append(v)
    spikes = torch.cat(fired).to(x_seq.dtype)
    node.v = v.squeeze(0)
    if node.store_v_seq:
        node.v_seq = torch.cat(voltages)
    return spikes


def _leanable(module: nn.Module) -> bool:
    return (type(module) in (neuron.LIFNode, neuron.IFNode) and module.v_reset is not None
            and module.step_mode == "m" and not module.training)


@contextmanager
def exportable_neurons(model: nn.Module) -> Iterator[int]:
    """Within the block, every eval-mode multi-step hard-reset LIF/IF neuron of ``model`` runs
    the node-lean forward; yields how many were swapped. Restored on exit, whatever happens."""
    loaded = "spikingjelly.activation_based.neuron" in sys.modules  # else no neuron can be here
    swapped = [m for m in model.modules() if _leanable(m)] if loaded else []
    for node in swapped:
        node.multi_step_forward = lambda x_seq, *a, _n=node, **k: _lean_multi_step(_n, x_seq)
    try:
        yield len(swapped)
    finally:
        for node in swapped:
            del node.multi_step_forward
