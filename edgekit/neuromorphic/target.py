"""``edgekit simulate --target CHIP``: does the net fit the chip, what quantisation to the chip's
widths does to its spikes and accuracy, and what an inference costs there (an estimate).

For Loihi 2 the fixed point is the bit-accurate one of ``edgekit export --to loihi2`` (Lava's
integer rules, ``loihi2_sim``); for Xylo it is Xylo's integer rules (xylosim's, ``xylo_sim``);
for Speck it is edgekit's model in the chip's widths (``fixed_point``). Energy per event is
published for Loihi (Davies et al. 2018, ``profiles/loihi.toml``), not for Loihi 2, Speck or
Xylo: Loihi 2's figure is Loihi's table, labelled so; Speck and Xylo get their event counts
without a price.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from edgekit.neuromorphic.chip_fit import Check, check_fit
from edgekit.neuromorphic.chip_limits import ChipLimits, load_chip
from edgekit.neuromorphic.fixed_point import Widths, compare
from edgekit.neuromorphic.net_layers import walk
from edgekit.neuromorphic.xylo_sim import STATE_BITS, WEIGHT_BITS, compare_on_xylo
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


def _loihi2_fixed_point(source: ModelSource, x: np.ndarray,
                        y: np.ndarray | None, origin: str) -> dict[str, Any]:
    """The net quantised to Loihi 2's formats (calibrated on the training split, as the export
    is) and run by the bit-accurate simulation, against the float net."""
    from edgekit.exporters.nir import DEFAULT_DT
    from edgekit.neuromorphic.loihi2_check import check
    from edgekit.neuromorphic.loihi2_export import check_data
    from edgekit.neuromorphic.loihi2_quantize import quantize
    from edgekit.neuromorphic.lowering import lower_graph, nir_graph_of

    chip = quantize(lower_graph(nir_graph_of(source, DEFAULT_DT), DEFAULT_DT),
                    check_data(source, None, None).calibration)
    report, _ = check(source.model, chip, x, y, origin)
    samples = report.samples
    return {"spike_agreement": report.agreement, "same_predictions": report.same_predictions,
            "samples": samples,
            "float_correct": (None if report.accuracy_float is None
                              else round(report.accuracy_float * samples)),
            "fixed_correct": (None if report.accuracy_fixed is None
                              else round(report.accuracy_fixed * samples)),
            "weight_bits": 8, "state_bits": 24,
            "model": "Loihi 2 bit-accurate: Lava's PyLifModelBitAcc rules "
                     "(edgekit.neuromorphic.loihi2_sim, docs/neuromorphic.md)"}


def _lava_processes(source: ModelSource) -> Check:
    """Loihi 2 runs what its lowering expresses in Lava's processes (Dense + CUBA LIF with reset
    to zero, through NIR); an operation outside them has no Loihi 2 form edgekit can build."""
    from edgekit.exporters.nir import nir_blockers

    blockers = sorted({b.operation for b in nir_blockers(source)})
    return Check("Lava's processes", "; ".join(blockers) or "conv, linear, pooling, LIF/IF",
                 "Dense and CUBA LIF (reset to zero), through NIR", not blockers,
                 "use LIF or IF neurons that reset to zero, average pooling and a linear "
                 "readout (the operations NIR and Lava's LIF express)",
                 "Lava 0.10, src/lava/proc/lif/process.py and models.py (PyLifModelBitAcc)")


def simulate_on_target(source: ModelSource, target: str,
                       settings: SimulateSettings) -> dict[str, Any]:
    chip = load_chip(target)
    model = source.model.eval()
    x_np, y_np, data_name = simulation_inputs(source, settings)
    x = torch.from_numpy(x_np)
    y = torch.from_numpy(y_np) if y_np is not None else None
    layers = walk(model, x[:1])
    fit = check_fit(layers, chip)
    if chip.family == "loihi2":
        fit.checks.append(_lava_processes(source))
    report: dict[str, Any] = {"model": source.name, "source": source.record(),
                              "inputs": data_name, "samples": len(x), "T": model.T,
                              "target": fit.to_json(), "fixed_point": None, "energy": None}
    if fit.fits and chip.family == "loihi2":
        report["fixed_point"] = _loihi2_fixed_point(source, x_np, y_np, data_name)
    elif fit.fits and chip.family == "xylo":
        on_xylo = compare_on_xylo(model, layers, x, y, settings.batch_size)
        report["fixed_point"] = on_xylo.to_json() | {
            "weight_bits": WEIGHT_BITS, "state_bits": STATE_BITS,
            "model": "Xylo's integer rules (xylosim 0.1.3's, edgekit.neuromorphic.xylo_sim; "
                     "checked against xylosim by tests/test_xylo_sim.py, docs/chips.md)"}
    elif fit.fits:
        widths = chip_widths(chip)
        agreement = compare(model, layers, x, y, widths, settings.batch_size)
        report["fixed_point"] = agreement.to_json() | {
            "weight_bits": widths.weight_bits, "state_bits": widths.state_bits,
            "model": "edgekit's fixed-point model in the chip's widths (docs/chips.md)"}
    if fit.fits:
        batches = [x[i:i + settings.batch_size] for i in range(0, len(x), settings.batch_size)]
        report["energy"] = _energy(model, batches, chip)
    return report
