"""``edgekit simulate --target CHIP``: does the net fit the chip, what quantisation to the chip's
widths does to its spikes and accuracy, and what an inference costs there (an estimate).

Energy per event is published for Loihi (Davies et al. 2018, ``profiles/loihi.toml``), not for
Loihi 2, Speck or Xylo: Loihi 2's figure is Loihi's table, labelled so; Speck and Xylo get their
event counts without a price.
"""
from __future__ import annotations

from typing import Any

import torch

from edgekit.neuromorphic.chip_fit import check_fit
from edgekit.neuromorphic.chip_limits import ChipLimits, load_chip
from edgekit.neuromorphic.fixed_point import Widths, compare
from edgekit.neuromorphic.net_layers import walk
from edgekit.profiles import load_profile
from edgekit.spiking.counting import count
from edgekit.spiking.energy import neuromorphic
from edgekit.spiking.simulate import SimulateSettings, simulation_inputs
from edgekit.targets import ModelSource

PRICED_BY = {"loihi2": "loihi"}  # a chip family -> the neuromorphic profile that prices it


def chip_widths(chip: ChipLimits) -> Widths:
    state = chip.limits.get("state_bits", chip.limits.get("threshold_bits"))
    return Widths(chip["weight_bits"], state)


def _energy(model: torch.nn.Module, batches: list[torch.Tensor],
            chip: ChipLimits) -> dict[str, Any]:
    counts, _ = count(model, batches)
    n = counts.samples
    figure: dict[str, Any] = {"synaptic_ops": counts.totals["synop"] / n,
                              "estimate": True}
    table = PRICED_BY.get(chip.family)
    if table is None:
        figure |= {"energy_j": None,
                   "note": f"no per-operation energy is published for {chip.display_name}; "
                           "the synaptic operations are counted, not priced"}
        return figure
    priced = neuromorphic(counts, load_profile(table)).to_dict()
    figure |= {"energy_j": priced["energy_j"],
               "note": f"estimate: {chip.display_name}'s events priced with the per-event "
                       f"figures of {load_profile(table).display_name} (Intel publishes none for "
                       f"Loihi 2); {priced.get('note') or ''}".rstrip("; ")}
    return figure


def simulate_on_target(source: ModelSource, target: str,
                       settings: SimulateSettings) -> dict[str, Any]:
    chip = load_chip(target)
    model = source.model.eval()
    x_np, y_np, data_name = simulation_inputs(source, settings)
    x = torch.from_numpy(x_np)
    y = torch.from_numpy(y_np) if y_np is not None else None
    layers = walk(model, x[:1])
    fit = check_fit(layers, chip)
    report: dict[str, Any] = {"model": source.name, "source": source.record(),
                              "inputs": data_name, "samples": len(x), "T": model.T,
                              "target": fit.to_json(), "fixed_point": None, "energy": None}
    if fit.fits:
        widths = chip_widths(chip)
        agreement = compare(model, layers, x, y, widths, settings.batch_size)
        report["fixed_point"] = agreement.to_json() | {
            "weight_bits": widths.weight_bits, "state_bits": widths.state_bits,
            "model": "edgekit's fixed-point model in the chip's widths (docs/neuromorphic.md)"}
        batches = [x[i:i + settings.batch_size] for i in range(0, len(x), settings.batch_size)]
        report["energy"] = _energy(model, batches, chip)
    return report
