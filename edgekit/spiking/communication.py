"""What a block that moves spikes between neuromorphic cores tells the simulator about itself.

A spiking method's block (SSA's attention blocks, say) provides these members; generic code finds
such blocks by this protocol, so it never imports a method and a new method needs no change here.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import nn


@runtime_checkable
class CoreCommunication(Protocol):
    """One token per neuromorphic core; the block says which spikes travel and how many values."""

    kind: str  # the block's form, named in reports
    D: int  # values per token
    comm_source: str  # the submodule whose output spikes travel between cores
    communication_formula: str  # values moved per sample, e.g. "T·N·D"

    def comm_fanout(self, N: int) -> int:
        """How many other cores receive each spike of ``comm_source``."""

    def communication(self, T: int, N: int) -> int:
        """Values moved between cores per sample at T steps and N tokens."""


def communication_blocks(model: nn.Module) -> list[tuple[str, CoreCommunication]]:
    """Every block of ``model`` that reports its inter-core communication, with its name."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, CoreCommunication)]
