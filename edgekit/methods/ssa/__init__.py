"""SSA and USSA spiking attention (docs/methods/ssa.md): SpikingResformer with reference/SSA/USSA
attention and its ReLU twin. Importing this package registers them."""
from edgekit.methods.ssa import resformer  # noqa: F401
from edgekit.methods.ssa.attention import (
                                           ATTENTION_KINDS,
                                           SSA,
                                           USSA,
                                           ReferenceAttention,
                                           attention_blocks,
                                           communication_values,
                                           make_attention,
)
from edgekit.methods.ssa.resformer import (
                                           PAPER_CONFIG_NAMES,
                                           SpikingResformer,
                                           build_paper_model,
                                           paper_config,
)

__all__ = ["ATTENTION_KINDS", "PAPER_CONFIG_NAMES", "SSA", "USSA", "ReferenceAttention",
           "SpikingResformer", "attention_blocks", "build_paper_model", "communication_values",
           "make_attention", "paper_config"]
