"""A small spiking CNN built only from NIR primitives, so it exports to NIR (``exporters/nir.py``).

conv (with bias) -> LIF -> 2x2 average pool, twice, then flatten -> linear -> LIF -> linear. No
BatchNorm, residual or product: each layer maps to one NIR node (Conv2d, LIF, AvgPool2d,
Flatten, Affine), so a NIR simulator runs exactly this net. The output layer is a plain linear
readout whose values are averaged over the T steps (rate decoding).

Two variants fit neuromorphic chips (``edgekit simulate --target``, docs/neuromorphic.md):

- ``spiking-cnn:speck``: what SynSense's DYNAP-CNN cores run (sinabs's ``DynapcnnLayer``: conv ->
  integrate-and-fire -> sum pool): IAF neurons with subtractive reset, 2x2 sum pooling, a spiking
  readout, and inputs as events (each pixel's intensity 0..16 of the original digits sent as
  0..4 events per step);
- ``spiking-cnn:xylo``: a dense net within Xylo's 16 inputs and a few hundred hidden neurons (the
  rules of Rockpool's Xylo mapper): the image summed over 2x2 blocks on the host (16 input
  channels, as Xylo's audio front end hands the core 16 channels, at most 15 events per channel
  and step), then linear -> neuron -> linear -> neuron with Xylo's own neuron
  (``edgekit/spiking/xylo_neuron.py``: synaptic current, bit-shift decays, a bias on the membrane,
  up to 31 spikes per step for a hidden neuron and one for a readout neuron), so that Xylo's
  integer rules (``edgekit/neuromorphic/xylo_sim.py``) run the trained net as it was trained.

A spiking readout's output is the spike count over T, scaled by ``READOUT_SCALE`` so that
cross-entropy sees logits of a useful range (the argmax, hence the prediction, is the count's).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.data import DIGITS
from edgekit.errors import UsageError
from edgekit.neuromorphic.xylo_sim import MAX_HIDDEN_SPIKES, MAX_INPUT_EVENTS, MAX_OUTPUT_SPIKES
from edgekit.registry import ExportSettings, ModelEntry, TrainSettings, register_model
from edgekit.spiking.layers import V_RESET, MultiStepNet, SumPool2d, iaf, layer, lif

NEURONS = ("lif", "iaf", "xylo")  # "xylo": Xylo's multi-spike neuron, dense nets only
POOLS = ("avg", "sum")
READOUTS = ("linear", "spiking")
RESETS = ("zero", "subtract")  # a LIF's reset; IAF and Xylo's neurons always subtract
ENCODINGS = ("direct", "events")
EVENTS_PER_STEP = 4  # the events' encoding: a pixel of intensity 1.0 sends 4 events per step
READOUT_SCALE = 8.0


def _choice(name: str, value: str, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise UsageError(f"spiking-cnn: {name} must be one of {', '.join(valid)}, got {value!r}")
    return value


class SpikingCNN(MultiStepNet):
    # Over 8 parameters: the registry builds the net from a config dict (builder(**config)) that
    # checkpoints store
    def __init__(self, T: int = 4, in_channels: int = 1, num_classes: int = 10,
                 input_size: int = 8, channels: Sequence[int] = (16, 32), hidden: int = 64,
                 neuron: str = "lif", pool: str = "avg", readout: str = "linear",
                 encoding: str = "direct", input_pool: int = 1, reset: str = "zero") -> None:
        super().__init__(T, (in_channels, input_size, input_size))
        self.neuron = _choice("neuron", neuron, NEURONS)
        self.readout = _choice("readout", readout, READOUTS)
        if self.neuron == "xylo" and (channels or self.readout != "spiking"):
            raise UsageError("spiking-cnn: Xylo's neuron is for dense nets with a spiking "
                             "readout (channels=(), readout='spiking')")
        v_reset = None if _choice("reset", reset, RESETS) == "subtract" else V_RESET
        spiking = {"lif": partial(lif, v_reset), "iaf": iaf}.get(self.neuron)
        self.encoding = _choice("encoding", encoding, ENCODINGS)
        if input_pool < 1 or input_size % input_pool:
            raise UsageError(f"spiking-cnn: input_pool must divide input_size {input_size}, "
                             f"got {input_pool}")
        self.input_pool = input_pool
        blocks: list[nn.Module] = []
        cin, side = in_channels, input_size // input_pool
        for cout in channels:
            pooling = (layer.AvgPool2d(2, 2, step_mode="m")
                       if _choice("pool", pool, POOLS) == "avg" else SumPool2d(2))
            blocks += [layer.Conv2d(cin, cout, 3, padding=1, bias=True, step_mode="m"), spiking(),
                       pooling]
            cin, side = cout, side // 2
        blocks.append(layer.Flatten(step_mode="m"))  # [T, B, C*H*W]
        if self.neuron == "xylo":
            blocks += _xylo_dense(cin * side * side, hidden, num_classes)
        else:
            blocks += [layer.Linear(cin * side * side, hidden, step_mode="m"), spiking(),
                       layer.Linear(hidden, num_classes, step_mode="m")]
            if self.readout == "spiking":
                blocks.append(spiking())
        self.body = nn.Sequential(*blocks)
        for m in self.body.modules():  # He init doubled: without BatchNorm the default init
            if isinstance(m, (nn.Conv2d, nn.Linear)):  # leaves every neuron below threshold
                nn.init.normal_(m.weight, std=2.0 * math.sqrt(2.0 / m.weight[0].numel()))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        if self.neuron == "xylo":  # its inputs are event counts up to 15, not values in [0, 1]
            first = next(m for m in self.body.modules() if isinstance(m, nn.Linear))
            with torch.no_grad():
                first.weight.div_(MAX_INPUT_EVENTS)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Direct encoding, or events: the (host-side) sum over ``input_pool`` blocks, then each
        value in [0, 1] as ``round(value * EVENTS_PER_STEP)`` events at every step."""
        x_seq = super().encode(x)
        if self.input_pool > 1:
            T, B = x_seq.shape[:2]
            x_seq = (F.avg_pool2d(x_seq.flatten(0, 1), self.input_pool) * self.input_pool ** 2
                     ).unflatten(0, (T, B))
        if self.encoding == "events":
            x_seq = torch.round(x_seq * EVENTS_PER_STEP)
            if self.neuron == "xylo":  # Xylo takes at most 15 events per channel and step
                x_seq = x_seq.clamp(max=MAX_INPUT_EVENTS)
        return x_seq

    def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
        out = self.body(x_seq)  # [T, B, C, H, W] -> [T, B, classes]
        return out * READOUT_SCALE if self.readout == "spiking" else out


def _xylo_dense(inputs: int, hidden: int, classes: int) -> list[nn.Module]:
    """linear -> Xylo neuron (31 spikes a step) -> linear -> Xylo neuron (one): the weights
    carry no bias, as Xylo's synapses carry none; the bias is the hidden neurons' own, on the
    membrane. The readout has none: Xylo runs it one step ahead of its input (xylo_sim.run_xylo),
    where a bias would act one step early."""
    from edgekit.spiking.xylo_neuron import XyloLIFNode

    return [layer.Linear(inputs, hidden, bias=False, step_mode="m"),
            XyloLIFNode(hidden, MAX_HIDDEN_SPIKES),
            layer.Linear(hidden, classes, bias=False, step_mode="m"),
            XyloLIFNode(classes, MAX_OUTPUT_SPIKES, bias=False)]


register_model(ModelEntry(
    name="spiking-cnn",
    family="spiking",
    builder=SpikingCNN,
    config={"T": 4, "in_channels": 1, "num_classes": 10, "input_size": 8, "channels": (16, 32),
            "hidden": 64, "neuron": "lif", "pool": "avg", "readout": "linear",
            "encoding": "direct", "input_pool": 1},
    variants={
        "speck": {"T": 8, "neuron": "iaf", "pool": "sum", "readout": "spiking",
                  "encoding": "events"},
        "xylo": {"T": 8, "channels": (), "hidden": 128, "input_pool": 2, "readout": "spiking",
                 "encoding": "events", "neuron": "xylo", "reset": "subtract"},
    },
    task=DIGITS.task,
    description="spiking CNN of NIR primitives (conv, LIF, avg-pool, flatten, linear), T=4; "
                "variants for Speck (IAF, sum pool) and Xylo (dense, 16 inputs)",
    export=ExportSettings(),
    train=TrainSettings(epochs=40, batch_size=64, lr=3e-3, weight_decay=1e-4),
    spiking=True,
))
