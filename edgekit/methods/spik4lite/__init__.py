"""Spik4lite (ICML 2026; docs/methods/spik4lite.md): gated spiking channels, physical removal
with compensation."""
from edgekit.methods.spik4lite import spikingformer  # noqa: F401  (registers the model)
from edgekit.methods.spik4lite.distill import Distillation, distillation_loss, load_teacher
from edgekit.methods.spik4lite.gates import GatedLayer, energy_penalty, gated_layers
from edgekit.methods.spik4lite.prune import PruneReport, prune
from edgekit.methods.spik4lite.spikingformer import Spikingformer, build_cifar_model
from edgekit.methods.spik4lite.wrap import spike_fed_layers, unwrap, wrap

__all__ = ["Distillation", "GatedLayer", "PruneReport", "Spikingformer", "build_cifar_model",
           "distillation_loss", "energy_penalty", "gated_layers", "load_teacher", "prune",
           "spike_fed_layers", "unwrap", "wrap"]
