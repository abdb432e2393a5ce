"""Spik4lite (methods.md §2): gated spiking channels, physical removal with compensation."""
from edgekit.methods.spik4lite.gates import GatedLayer, energy_penalty, gated_layers
from edgekit.methods.spik4lite.prune import PruneReport, prune
from edgekit.methods.spik4lite.wrap import spike_fed_layers, unwrap, wrap

__all__ = ["GatedLayer", "PruneReport", "energy_penalty", "gated_layers", "prune",
           "spike_fed_layers", "unwrap", "wrap"]
