"""A spiking net in a chip's integer widths: weights, thresholds and membrane state quantised,
run step by step in integers, compared spike for spike with the float net.

This is edgekit's model of what quantisation does to the net on the chip, not a vendor's
simulator: per weight layer one scale, sinabs's ``discretize_conv_spike_`` rule for DYNAP-CNN
(weights and biases in the weight width, thresholds in the state width; ``tests/test_chip_fit.py``
compares it with sinabs's own function where sinabs is installed), thresholds and state share
that scale and saturate at the state width, a LIF's decay is an arithmetic shift (Loihi 2's
decays are 12-bit fractions; a time constant of 2 is exact). Inputs that are event counts stay
integers; graded inputs are sent as 8-bit values (Loihi 2's graded spikes). An average pool of
spikes is summed and its 1/area folded into the next layer's weights.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from edgekit.errors import UsageError
from edgekit.neuromorphic.net_layers import NetLayer
from edgekit.spiking.layers import MultiStepNet, functional, neuron

GRADED_LEVELS = 255  # 8-bit graded input spikes


@dataclass(frozen=True)
class Widths:
    weight_bits: int
    state_bits: int

    @property
    def weight_max(self) -> int:
        return 2 ** (self.weight_bits - 1) - 1

    @property
    def state_max(self) -> int:
        return 2 ** (self.state_bits - 1) - 1


@dataclass
class Agreement:
    spike_agreement: float  # equal spike entries / all, over every neuron layer
    same_predictions: int
    samples: int
    float_correct: int | None
    fixed_correct: int | None
    scales: list[float]

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def discretization_scale(values: torch.Tensor, bits: int) -> float:
    """The largest factor that fits ``values`` into signed ``bits`` (sinabs 3.1.3,
    ``sinabs/backend/dynapcnn/discretize.py``, ``determine_discretization_scale``: the negative
    side's one extra level counts); infinite for all zeros."""
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    vmin, vmax = float(values.min()), float(values.max())
    if vmin == 0 and vmax == 0:
        return math.inf
    if abs(vmin) <= abs(vmax) * abs(low / high):
        return abs(high / vmax)
    return abs(low / vmin)


def _weights(layer: NetLayer, fold: float, widths: Widths,
             threshold: float | None) -> tuple[torch.Tensor, torch.Tensor | None, float]:
    """sinabs's ``_discretize_conv_spk_``: one scale for weights and biases (both in the weight
    width) and thresholds (the state width). The lower threshold sinabs takes from the IAF's
    ``min_v_mem`` is -2x the threshold here (edgekit's neurons have no floor): the state keeps
    room on both sides of zero."""
    module = layer.module
    w = module.weight.detach().double() * fold
    scales = [discretization_scale(w, widths.weight_bits)]
    bias = None if module.bias is None else module.bias.detach().double()
    if bias is not None:
        scales.append(discretization_scale(bias, widths.weight_bits))
    if threshold is not None:
        scales.append(discretization_scale(torch.tensor([-2.0 * threshold, threshold]),
                                           widths.state_bits))
    scale = min(scales)
    scale = 1.0 if math.isinf(scale) else scale
    return (torch.round(w * scale), None if bias is None else torch.round(bias * scale), scale)


def _next_neuron(layers: list[NetLayer], i: int) -> NetLayer | None:
    for lay in layers[i + 1:]:
        if lay.kind == "neuron":
            return lay
        if lay.kind in ("conv", "linear"):
            return None
    return None


def _neuron_step(node: Any, current: torch.Tensor, v: torch.Tensor, threshold: float,
                 widths: Widths) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(node, neuron.LIFNode):
        shift = float(node.tau)
        if node.decay_input:
            h = v + torch.div(current - v, shift, rounding_mode="floor")
        else:
            h = v - torch.div(v, shift, rounding_mode="floor") + current
    else:
        h = v + current
    h = h.clamp(-widths.state_max - 1, widths.state_max)
    spike = h >= threshold
    if node.v_reset is None:
        v = torch.where(spike, h - threshold, h)
    else:
        v = torch.where(spike, torch.zeros_like(h), h)
    return spike.double(), v


@torch.no_grad()
def run_fixed_point(layers: list[NetLayer], x_seq: torch.Tensor,
                    widths: Widths) -> tuple[list[torch.Tensor], torch.Tensor, list[float]]:
    """The net of ``layers`` on the encoded input ``x_seq`` ([T, B, ...]) in integers: the spikes
    of every neuron layer ([T, B, ...] each), the output ([T, B, classes], dequantised when the
    last layer is not spiking) and every weight layer's scale."""
    x = x_seq.double()
    fold = 1.0
    if not torch.equal(x, torch.round(x)):  # graded input: 8-bit values
        x = torch.round(x.clamp(0, 1) * GRADED_LEVELS)
        fold = 1.0 / GRADED_LEVELS
    T, B = x.shape[:2]
    spikes: list[torch.Tensor] = []
    scales: list[float] = []
    scale = 1.0
    for i, lay in enumerate(layers):
        flat = x.flatten(0, 1)
        if lay.kind in ("conv", "linear"):
            nxt = _next_neuron(layers, i)
            threshold = None if nxt is None else nxt.detail["threshold"]
            w, b, scale = _weights(lay, fold, widths, threshold)
            scales.append(scale)
            fold = 1.0
            if lay.kind == "conv":
                m = lay.module
                out = F.conv2d(flat, w, b, m.stride, m.padding, m.dilation, m.groups)
            else:
                out = F.linear(flat, w, b)
        elif lay.kind == "neuron":
            threshold_q = round(lay.detail["threshold"] * scale)
            v = torch.zeros_like(x[0])
            fired = []
            for t in range(T):
                s, v = _neuron_step(lay.module, x[t], v, threshold_q, widths)
                fired.append(s)
            x = torch.stack(fired)
            spikes.append(x)
            scale = 1.0
            continue
        elif lay.kind == "pool":
            kh, kw = lay.detail["kernel"]
            if lay.detail["pool"] == "max":
                out = F.max_pool2d(flat, (kh, kw))
            else:
                out = F.avg_pool2d(flat, (kh, kw)) * (kh * kw)
                if lay.detail["pool"] == "avg":
                    fold = 1.0 / (kh * kw)
        elif lay.kind == "flatten":
            out = flat.flatten(1)
        else:
            raise UsageError(f"{lay.name}: no fixed-point model for this layer")
        x = out.unflatten(0, (T, B))
    output = x if layers and layers[-1].kind == "neuron" else x / scale
    return spikes, output, scales


@torch.no_grad()
def float_spikes(model: MultiStepNet, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every neuron layer's spikes ([T, B, ...]) and the output ([T, B, classes]) of the float
    net on ``x``."""
    recorded: list[torch.Tensor] = []
    handles = [m.register_forward_hook(lambda mod, a, out: recorded.append(out.detach().double()))
               for m in model.modules() if isinstance(m, neuron.BaseNode)]
    functional.reset_net(model)
    try:
        out = model.eval().forward_seq(model.encode(x)).double()
    finally:
        for h in handles:
            h.remove()
        functional.reset_net(model)
    return recorded, out


def compare(model: MultiStepNet, layers: list[NetLayer], x: torch.Tensor,
            y: torch.Tensor | None, widths: Widths, batch: int = 64) -> Agreement:
    """Spike agreement and predictions of the fixed-point net against the float one."""
    equal = total = same = float_ok = fixed_ok = 0
    scales: list[float] = []
    for start in range(0, len(x), batch):
        xb = x[start:start + batch]
        ref_spikes, ref_out = float_spikes(model, xb)
        fx_spikes, fx_out, scales = run_fixed_point(layers, model.encode(xb), widths)
        for a, b in zip(ref_spikes, fx_spikes, strict=True):
            equal += int((a == b).sum())
            total += a.numel()
        ref_pred, fx_pred = ref_out.sum(0).argmax(1), fx_out.sum(0).argmax(1)
        same += int((ref_pred == fx_pred).sum())
        if y is not None:
            yb = y[start:start + batch]
            float_ok += int((ref_pred == yb).sum())
            fixed_ok += int((fx_pred == yb).sum())
    return Agreement(equal / total if total else math.nan, same, len(x),
                     float_ok if y is not None else None, fixed_ok if y is not None else None,
                     scales)
