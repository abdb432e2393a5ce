"""Spiking nets (methods.md §1): SpikingResformer with reference/SSA/USSA attention, its ReLU
twin, and a spiking CNN of NIR primitives. Importing this package registers them."""
from edgekit.models.spiking import cnn, resformer  # noqa: F401
from edgekit.models.spiking.attention import (ATTENTION_KINDS, SSA, USSA, ReferenceAttention,
                                              attention_blocks, communication_values,
                                              make_attention)
from edgekit.models.spiking.cnn import SpikingCNN
from edgekit.models.spiking.layers import MultiStepNet, is_spiking, lif
from edgekit.models.spiking.resformer import (PAPER_CONFIG_NAMES, SpikingResformer,
                                              build_paper_model, paper_config)

__all__ = ["ATTENTION_KINDS", "PAPER_CONFIG_NAMES", "SSA", "USSA", "MultiStepNet",
           "ReferenceAttention", "SpikingCNN", "SpikingResformer", "attention_blocks",
           "build_paper_model", "communication_values", "is_spiking", "lif", "make_attention",
           "paper_config"]
