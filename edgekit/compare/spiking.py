"""A spiking row's synaptic operations and 45 nm energy, counted as ``edgekit simulate`` counts
them, so a compare of pruned spiking checkpoints shows what the removal saves in SOPs beside the
latency it saves.

The counts are SpikingJelly's op counters (``edgekit.spiking.counting``) over the first
``SAMPLES`` test samples, the same samples ``edgekit simulate`` runs by default; the energy is
the convention of Spikformer and Spike-driven Transformer, ``E_MAC · MACs (real-valued layers)
+ E_AC · SOPs`` with Horowitz's 45 nm costs (``edgekit.spiking.energy.horowitz_45nm``). A
spiking net's non-spiking twin (the same family, ReLU for LIF) is counted the same way: no SOPs,
every operation a MAC at 4.6 pJ, so the two rows' 45 nm energies compare; other rows get none
of these fields.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from edgekit.spiking.simulate import SimulateSettings

SAMPLES = SimulateSettings().samples  # as `edgekit simulate` by default


def spiking_fields(model: nn.Module, x_test: Any, samples: int = SAMPLES) -> dict[str, Any]:
    """SOPs, MACs, firing rate and 45 nm energy per inference of ``model`` on test inputs."""
    from edgekit.spiking.counting import count, spike_total
    from edgekit.spiking.energy import horowitz_45nm

    x = x_test[:samples]
    batches = [torch.from_numpy(x[i:i + 50]) for i in range(0, len(x), 50)]
    counts, _ = count(model, batches)
    n = counts.samples
    spikes, updates = spike_total(counts)
    energy = horowitz_45nm(counts)
    return {"sops_per_sample": counts.totals["synop"] / n, "macs_per_sample":
            counts.totals["mac"] / n, "firing_rate": spikes / updates if updates else None,
            "energy_45nm_j": energy.energy_j, "spiking_samples": n,
            "energy_45nm_formula": energy.formula}
