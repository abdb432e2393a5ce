"""Energy of one inference under the neuromorphic cost models; every figure names its table.

- ``horowitz-45nm`` (the convention of Spikformer and Spike-driven Transformer):
  ``E = E_MAC · MACs + E_AC · SOPs`` with E_MAC = 4.6 pJ and E_AC = 0.9 pJ (Horowitz,
  ISSCC 2014, 45 nm fp32; the figures of SpikingJelly's ``SimpleEnergyCostConfig.fp32``). MACs are
  the real-valued layers' (the input convolution, the classifier), SOPs the spike-driven ones.
- ``spikingjelly-simple``: SpikingJelly's ``estimate_simple_energy`` model on the same run: the same
  45 nm costs on *every* accumulate (neuron updates and residual adds included) plus 24.96 pJ per
  byte of weight and neuron-state traffic.
- ``loihi`` (a neuromorphic device profile, Davies et al. 2018 Table 2): synaptic ops, neuron
  updates (active = spiking, inactive = the rest), and the spikes attention blocks send between
  cores, one hop each at the mean of the E-W and N-S hop energies. Loihi has no MAC: the MACs of
  the real-valued layers are listed but not priced.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from edgekit.profiles.device_profile import DeviceProfile
from edgekit.spiking.counting import Counts, spike_total

_PJ = 1e-12


@dataclass(frozen=True)
class EnergyFigure:
    model: str
    energy_j: float  # per inference (one sample)
    components_j: dict[str, float]
    cost_table: str  # where the per-event costs come from
    formula: str
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def horowitz_45nm(counts: Counts) -> EnergyFigure:
    from spikingjelly.activation_based.op_counter import SimpleEnergyCostConfig

    cost = SimpleEnergyCostConfig.fp32()
    n = counts.samples
    mac_j = cost.e_mac_pj * _PJ * counts.totals["mac"] / n
    sop_j = cost.e_ac_pj * _PJ * counts.totals["synop"] / n
    return EnergyFigure(
        "horowitz-45nm", mac_j + sop_j, {"mac": mac_j, "sop": sop_j},
        f"Horowitz, ISSCC 2014, 45 nm fp32: E_MAC {cost.e_mac_pj:g} pJ, E_AC {cost.e_ac_pj:g} pJ "
        "(SpikingJelly SimpleEnergyCostConfig.fp32)",
        "E_MAC x MACs (real-valued layers) + E_AC x SOPs (the convention of Spikformer and "
        "Spike-driven Transformer)")


def spikingjelly_simple(counts: Counts) -> EnergyFigure:
    report = counts.simple_energy
    n = counts.samples
    cost = report.config.cost_config
    return EnergyFigure(
        "spikingjelly-simple", report.energy_total_pj * _PJ / n,
        {k.removesuffix("_pj"): v * _PJ / n for k, v in report.breakdown_pj.items()
         if k != "memory_pj"},
        f"SpikingJelly {report.model_info.model_id}: Horowitz ISSCC 2014 45 nm, E_MAC "
        f"{cost.e_mac_pj:g} pJ, E_AC {cost.e_ac_pj:g} pJ, memory {cost.e_memory_pj_per_byte:g} "
        "pJ/byte",
        "E_MAC x MACs + E_AC x ACs (every accumulate) + memory traffic (estimate_simple_energy)")


def neuromorphic(counts: Counts, chip: DeviceProfile) -> EnergyFigure:
    """Price the run's events with a neuromorphic profile's ``[energy]`` table."""
    cost = chip.energy_per_event_j
    n = counts.samples
    spikes, updates = spike_total(counts)
    components = {"synaptic_ops": cost["synaptic_op"] * counts.totals["synop"] / n}
    missing = []
    if "neuron_update_active" in cost and "neuron_update_inactive" in cost:
        components["neuron_updates"] = (cost["neuron_update_active"] * spikes
                                        + cost["neuron_update_inactive"] * (updates - spikes)) / n
    else:
        missing.append("neuron updates")
    hops = [cost[k] for k in ("tile_hop_ew", "tile_hop_ns") if k in cost]
    moved = sum(a.spikes_moved for a in counts.attention.values())
    if hops:
        components["attention_communication"] = sum(hops) / len(hops) * moved / n
    elif moved:
        missing.append("attention communication")
    prices = [f"{cost['synaptic_op'] / _PJ:g} pJ per SOP"]
    if "neuron_updates" in components:
        active, inactive = cost["neuron_update_active"], cost["neuron_update_inactive"]
        prices.append(f"{active / _PJ:g}/{inactive / _PJ:g} pJ per active/inactive neuron update")
    if hops:
        prices.append(f"{sum(hops) / len(hops) / _PJ:g} pJ per hop")
    note = (f"{counts.totals['mac'] / n:.4g} MACs per inference of real-valued layers have no "
            f"cost in this table and are not priced; attention spikes are charged one hop each")
    if missing:
        note += f"; no cost given for {', '.join(missing)}"
    return EnergyFigure(
        chip.name, sum(components.values()), components,
        f"device profile {chip.name} ({_citation(chip)}): {', '.join(prices)}",
        "E_syn x SOPs + E_active x spikes + E_inactive x (neuron updates - spikes) "
        "+ E_hop x attention spikes sent", note)


def _citation(chip: DeviceProfile) -> str:
    """What the profile's energy sources have in common (their paper and table)."""
    sources = [chip.sources[f"energy.{k}_pj"] for k in chip.energy_per_event_j
               if f"energy.{k}_pj" in chip.sources]
    if not sources:
        return "no source"
    common = sources[0]
    for text in sources[1:]:
        while not text.startswith(common):
            common = common[:-1]
    return common.rpartition(":")[0].strip() or common.strip() or "see the profile's sources"
