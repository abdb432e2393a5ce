"""Does a spiking net fit a neuromorphic chip? Each rule of the chip's family, checked against
the net's layers (``net_layers.walk``), with what to change when it does not hold.

The rules are the vendors' own where their libraries encode them, written down here because the
libraries do not import without samna, SynSense's closed driver: sinabs's DYNAP-CNN layer model
and core mapping (``sinabs.backend.dynapcnn`` imports samna), Rockpool's Xylo design-rule check
(``rockpool.devices.xylo`` imports samna unguarded), and Intel's published Loihi 2 totals. Where
sinabs is installed, each Speck layer's memory and limits are sinabs's own
``ValidateMapping``'s (``sinabs_rules``), which imports without samna.
``tests/test_chip_fit.py`` checks the memory formulas on layers computed by hand and every rule
on a net that breaks it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from edgekit.neuromorphic.chip_limits import ChipLimits
from edgekit.neuromorphic.net_layers import NetLayer
from edgekit.neuromorphic.sinabs_rules import (
    SinabsLayer,
    SinabsRefusal,
    sinabs_memory,
    sinabs_version,
)


@dataclass(frozen=True)
class Check:
    rule: str
    need: str  # what the net needs
    limit: str  # what the chip offers
    ok: bool
    change: str = ""  # what to change when not ok
    source: str = ""  # where the limit comes from


@dataclass
class FitReport:
    chip: ChipLimits
    checks: list[Check]
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"chip": self.chip.name, "display_name": self.chip.display_name,
                "fits": self.fits, "usage": self.usage,
                "checks": [asdict(c) for c in self.checks]}


@dataclass
class WeightGroup:
    """A weight layer and what follows it up to the next one: what one core (DYNAP-CNN) or one
    population (Xylo, Loihi 2) hosts."""

    weights: NetLayer
    neuron: NetLayer | None = None
    pools: list[NetLayer] = field(default_factory=list)
    spatial_in: tuple[int, ...] = ()  # the (C, H, W) before a flatten, for a linear layer
    extra: list[NetLayer] = field(default_factory=list)  # layers no chip rule knows

    @property
    def outputs(self) -> int:
        return math.prod(self.weights.out_shape)


def group_layers(layers: list[NetLayer]) -> tuple[list[WeightGroup], list[NetLayer]]:
    """Weight layers with their neuron and pools; returns (groups, layers before the first)."""
    groups: list[WeightGroup] = []
    leading: list[NetLayer] = []
    spatial: tuple[int, ...] = ()
    for lay in layers:
        if lay.kind in ("conv", "linear"):
            groups.append(WeightGroup(lay, spatial_in=spatial or lay.in_shape))
            spatial = ()
        elif lay.kind == "flatten":
            spatial = lay.in_shape
        elif not groups:
            leading.append(lay)
        elif lay.kind == "neuron" and groups[-1].neuron is None and not groups[-1].pools:
            groups[-1].neuron = lay
        elif lay.kind == "pool" and groups[-1].neuron is not None:
            groups[-1].pools.append(lay)
        else:
            groups[-1].extra.append(lay)
    return groups, leading


def _neuron_checks(groups: list[WeightGroup], allowed: list[str], source: str,
                   change: str, multi_spike: bool = False) -> list[Check]:
    """The neuron models, and spikes per step: several only where the chip fires several
    (``multi_spike``: Xylo, XYLO_RESET_SOURCE), one elsewhere."""
    models = sorted({g.neuron.detail["model"] for g in groups if g.neuron is not None})
    bad = [m for m in models if m not in allowed]
    several = sorted({g.neuron.detail.get("max_spikes") or 1 for g in groups
                      if g.neuron is not None} - {1})
    return [Check("neuron model", ", ".join(models) or "none", ", ".join(allowed), not bad,
                  "" if not bad else change, source),
            Check("spikes per step", ", ".join(f"up to {n}" for n in several) or "one",
                  "up to 31" if multi_spike else "one", multi_spike or not several,
                  "train with one-spike neurons (edgekit.spiking.layers)", source)]


def _structure_checks(groups: list[WeightGroup], leading: list[NetLayer]) -> list[Check]:
    strays = leading + [lay for g in groups for lay in g.extra]
    checks = [Check("layers", ", ".join(f"{lay.name}" for lay in strays) or "all known",
                    "weights, neurons, pooling, flatten", not strays,
                    "remove or replace the layers named (a chip runs weights, neurons and "
                    "pooling only)")]
    readout = groups[-1].neuron is not None if groups else False
    checks.append(Check("spiking readout", "yes" if readout else "a non-spiking last layer",
                        "outputs are spikes", readout,
                        "end the net with spiking neurons after its last weight layer and read "
                        "the class from spike counts (spiking-cnn:speck, spiking-cnn:xylo do)"))
    return checks


# --- SynSense DYNAP-CNN (Speck) ---------------------------------------------------------------

def _pow2_ceil_log(n: int) -> int:
    return 2 ** math.ceil(math.log2(n)) if n > 1 else 1


def dynapcnn_memory(group: WeightGroup) -> dict[str, int]:
    """sinabs ``DynapcnnLayer.memory_summary``: kernel, neuron and bias memory of one core."""
    w = group.weights
    if w.kind == "conv":
        c_in, (kh, kw), c_out = w.in_shape[0], w.detail["kernel"], w.out_shape[0]
        out_h, out_w = w.out_shape[1:]
    else:  # a linear layer is a conv whose kernel covers its whole (C, H, W) input
        spatial = group.spatial_in if len(group.spatial_in) == 3 else (w.in_shape[0], 1, 1)
        c_in, kh, kw = spatial
        c_out, out_h, out_w = w.out_shape[0], 1, 1
    return {"kernel": c_in * _pow2_ceil_log(kh * kw) * _pow2_ceil_log(c_out),
            "neuron": c_out * _pow2_ceil_log(out_h) * _pow2_ceil_log(out_w),
            "bias": c_out if w.detail.get("bias") else 0}


def _sinabs_layer(group: WeightGroup) -> SinabsLayer | None:
    w = group.weights
    if w.kind == "conv":
        padding = w.detail["padding"]
        if isinstance(padding, str):  # "same"/"valid": sinabs's rules take numbers
            return None
        return SinabsLayer(w.in_shape[0], w.out_shape[0], w.detail["kernel"],
                           w.detail["stride"], tuple(padding), tuple(w.in_shape[1:]))
    spatial = group.spatial_in if len(group.spatial_in) == 3 else (w.in_shape[0], 1, 1)
    return SinabsLayer(spatial[0], w.out_shape[0], spatial[1:], (1, 1), (0, 0), spatial[1:])


def layer_memories(groups: list[WeightGroup]) -> tuple[list[dict[str, int]], list[str], str]:
    """Every layer's memory by sinabs's ``ValidateMapping`` where sinabs imports (with the
    layers it refuses, in its words), else by ``dynapcnn_memory``; and which was used."""
    version = sinabs_version()
    needs, refusals = [], []
    for g in groups:
        need = dynapcnn_memory(g)
        layer = _sinabs_layer(g) if version else None
        if layer is not None:
            try:
                need |= sinabs_memory(layer)
            except SinabsRefusal as refusal:
                refusals.append(f"{g.weights.name}: {refusal}")
        needs.append(need)
    used = (f"sinabs {version}, sinabs.validate_memory_speck.ValidateMapping (called)"
            if version else "edgekit's restatement of sinabs's formulas (sinabs not installed)")
    return needs, refusals, used


def _assign_cores(needs: list[dict[str, int]], chip: ChipLimits) -> list[int] | None:
    """A core for every layer where it fits, each core used once (sinabs's mapping.py finds it
    by max flow; scipy's assignment solver finds the same matching); None when there is none."""
    cores = list(zip(chip["kernel_memory"], chip["neuron_memory"], chip["bias_memory"],
                     strict=True))
    if not needs or len(needs) > len(cores):
        return None if needs else []
    cost = np.array([[0.0 if (n["kernel"] <= k and n["neuron"] <= m and n["bias"] <= b) else 1.0
                      for k, m, b in cores] for n in needs])
    rows, cols = linear_sum_assignment(cost)
    if cost[rows, cols].sum() > 0:
        return None
    return [int(c) for _, c in sorted(zip(rows, cols, strict=True))]


def _dynapcnn(groups: list[WeightGroup], first: NetLayer | None, chip: ChipLimits) -> FitReport:
    checks = _neuron_checks(groups, chip["neurons"], chip.source("neurons"),
                            "use integrate-and-fire neurons without leak (edgekit.spiking.layers."
                            "iaf; the built-in spiking-cnn:speck) and train with them")
    pools = sorted({p.detail["pool"] for g in groups for p in g.pools})
    bad_pools = [p for p in pools if p not in chip["pooling"]]
    checks.append(Check("pooling", ", ".join(pools) or "none", ", ".join(chip["pooling"]),
                        not bad_pools, "use sum pooling (edgekit.spiking.layers.SumPool2d): an "
                        "average pool is a sum pool with the next layer's weights divided by the "
                        "window's area; max pooling has no equivalent", chip.source("pooling")))
    square = [g.weights.name for g in groups
              if (g.weights.kind == "conv" and len(set(g.weights.detail["kernel"])) > 1)
              or (g.weights.kind == "linear" and len(g.spatial_in) == 3
                  and g.spatial_in[1] != g.spatial_in[2])]
    checks.append(Check("square kernels", ", ".join(square) or "all square", "square only",
                        not square, "use square kernels (a linear layer's input must be square: "
                        "it becomes a conv over its whole input)", chip.source("pooling")))
    side = max(first.in_shape[1:], default=1) if first is not None else 1
    checks.append(Check("input size", f"{side} px", f"{chip['input_side']} px",
                        side <= chip["input_side"], "downsample the input",
                        chip.source("input_side")))
    checks += _structure_checks(groups, [])
    needs, refusals, used = layer_memories(groups)
    if used.startswith("sinabs"):
        checks.append(Check("sinabs layer rules", "; ".join(refusals) or "all layers valid",
                            "kernel at most 16x16, 1024 output channels, stride 1, 2, 4 or 8",
                            not refusals, "change the layers sinabs names as it says", used))
    cores = _assign_cores(needs, chip)
    count = len(chip["kernel_memory"])
    detail = "; ".join(f"{i}: kernel {n['kernel']}, neuron {n['neuron']}, bias {n['bias']}"
                       for i, n in enumerate(needs))
    checks.append(Check("cores and memory", f"{len(needs)} layers ({detail})",
                        f"{count} cores, kernel memory {max(chip['kernel_memory'])}, neuron "
                        f"memory {max(chip['neuron_memory'])} at most", cores is not None,
                        "fewer layers, fewer channels or a smaller feature map in the layers "
                        "too big for any free core",
                        f"{chip.source('kernel_memory')}; memory per layer: {used}"))
    return FitReport(chip, checks, {"layers": len(needs), "cores": cores, "memory": needs})


# --- SynSense Xylo -----------------------------------------------------------------------------

XYLO_RESET_SOURCE = ("xylosim 0.1.3, src/v2/cpp/XyloIAFNeuron.cpp, XyloIAFNeuron::evolve: "
                     "v_mem -= v_th per spike")


def _xylo(groups: list[WeightGroup], chip: ChipLimits) -> FitReport:
    checks = _neuron_checks(groups, chip["neurons"], chip.source("neurons"),
                            "use LIF or IAF neurons", multi_spike=True)
    convs = [g.weights.name for g in groups if g.weights.kind == "conv"]
    checks.append(Check("dense layers", ", ".join(convs) or "dense only", "dense weights only",
                        not convs, "replace convolutions with dense layers (unrolled, each "
                        "output pixel becomes a hidden neuron), or pick a convolution chip",
                        chip.source("hidden_neurons")))
    pools = [p.name for g in groups for p in g.pools]
    checks.append(Check("pooling", ", ".join(pools) or "none", "none on the core", not pools,
                        "pool on the host before the input, or fold it into the weights",
                        chip.source("hidden_neurons")))
    leaky = [g.neuron.module for g in groups
             if g.neuron is not None and g.neuron.detail["model"] == "lif"]
    taus = sorted({float(getattr(n, "tau", 0.0)) for n in leaky if hasattr(n, "tau")})
    dashes = sorted({(n.dash_mem, n.dash_syn) for n in leaky if hasattr(n, "dash_mem")})
    shifts = (all(t >= 1 and math.log2(t).is_integer() for t in taus)
              and all(0 <= d <= 15 for pair in dashes for d in pair))  # 4-bit shifts
    seen = [f"tau {t:g}" for t in taus] + [f"dash_mem {m} and dash_syn {s}" for m, s in dashes]
    checks.append(Check("decays", ", ".join(seen) or "none",
                        "bit-shift decays: tau a power of two", shifts,
                        "use time constants that are powers of two (in steps)",
                        chip.source("neurons")))
    resets = sorted({f"{float(g.neuron.module.v_reset):g}" for g in groups
                     if g.neuron is not None and g.neuron.detail["reset"] != "subtract"})
    zeroed = bool(resets)
    checks.append(Check("reset", f"reset to {', '.join(resets)}" if zeroed else "subtractive",
                        "subtracts the threshold (no reset to a value)",
                        not zeroed, "use neurons that subtract the threshold on a spike "
                        "(v_reset=None; spiking-cnn:xylo does) and train with them",
                        XYLO_RESET_SOURCE))
    checks += _structure_checks(groups, [])
    inputs = math.prod(groups[0].weights.in_shape) if groups else 0
    outputs = groups[-1].outputs if groups else 0
    hidden = sum(g.outputs for g in groups[:-1])
    checks.append(Check("inputs", str(inputs), str(chip["inputs"]), inputs <= chip["inputs"],
                        f"at most {chip['inputs']} input channels: pool or select the input on "
                        "the host", chip.source("inputs")))
    checks.append(Check("outputs", str(outputs), str(chip["outputs"]),
                        outputs <= chip["outputs"],
                        f"at most {chip['outputs']} output neurons: fewer classes, or a chip "
                        "with more outputs", chip.source("outputs")))
    checks.append(Check("hidden neurons", str(hidden), str(chip["hidden_neurons"]),
                        hidden <= chip["hidden_neurons"],
                        "fewer or narrower hidden layers", chip.source("hidden_neurons")))
    checks.append(Check("neuron layers", str(len(groups)), "at least 2 (hidden and output)",
                        len(groups) >= 2, "add a hidden layer", chip.source("hidden_neurons")))
    return FitReport(chip, checks, {"inputs": inputs, "hidden": hidden, "outputs": outputs})


# --- Intel Loihi 2 -----------------------------------------------------------------------------

def _synapses(group: WeightGroup) -> int:
    w = group.weights
    per_output = math.prod(w.in_shape) if w.kind == "linear" else (
        w.in_shape[0] * math.prod(w.detail["kernel"]))
    return group.outputs * per_output


def _loihi2(groups: list[WeightGroup], chip: ChipLimits) -> FitReport:
    checks = _neuron_checks(groups, chip["neuron_models"], chip.source("neuron_models"),
                            "use CUBA LIF or IAF neurons")
    neurons = sum(g.outputs for g in groups)
    synapses = sum(_synapses(g) for g in groups)
    cores = sum(math.ceil(g.outputs / chip["neurons_per_core"]) for g in groups)
    checks.append(Check("neurons", str(neurons), str(chip["neurons"]),
                        neurons <= chip["neurons"], "a smaller net, or several chips",
                        chip.source("neurons")))
    checks.append(Check("synapses", str(synapses), str(chip["synapses"]),
                        synapses <= chip["synapses"], "a smaller net, or several chips",
                        chip.source("synapses")))
    checks.append(Check("cores", f"{cores} ({chip['neurons_per_core']} neurons per core)",
                        str(chip["cores"]), cores <= chip["cores"],
                        "fewer neurons per layer, or several chips", chip.source("cores")))
    return FitReport(chip, checks, {"neurons": neurons, "synapses": synapses, "cores": cores})


def check_fit(layers: list[NetLayer], chip: ChipLimits) -> FitReport:
    groups, leading = group_layers(layers)
    if chip.family == "dynapcnn":
        report = _dynapcnn(groups, layers[0] if layers else None, chip)
    elif chip.family == "xylo":
        report = _xylo(groups, chip)
    else:
        report = _loihi2(groups, chip)
    if leading:
        report.checks.insert(0, Check("layers", ", ".join(lay.name for lay in leading),
                                      "a weight layer first", False,
                                      "start the net with a weight layer (move other steps "
                                      "to the host's encoding)"))
    return report
