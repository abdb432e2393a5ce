"""The inference modes the runtime compares, one class per mode, one shared interface.

A mode is built once per rank from the model and the rank's ``Comm``; ``forward(tokens)`` takes
the patch tokens [B, T, D] (``model.embed`` output, computed on every rank) and returns the
logits on rank 0 (other ranks may return them too, or None). Everything a mode sends goes through
``Comm``, so the bytes and the emulated wire time are counted the same way for every mode.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from edgekit.errors import UnknownNameError, UsageError
from edgekit.methods.astra import AstraViT
from edgekit.methods.astra.runtime.collectives import Comm


class Mode(ABC):
    """One way of running the model on ``comm.world_size`` ranks."""

    name: str
    multi_rank = True  # False: runs on one device only

    def __init__(self, model: AstraViT, comm: Comm) -> None:
        self.model, self.comm = model, comm
        self.rank, self.world_size = comm.rank, comm.world_size

    @abstractmethod
    def forward(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """Patch tokens [B, T, D] -> logits [B, classes] on rank 0."""

    def with_cls(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.model.cls_token.expand(len(tokens), -1, -1), tokens], 1)


class Single(Mode):
    """The unpartitioned model on one device: the baseline every speed-up is measured against."""

    name = "single"
    multi_rank = False

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.with_cls(tokens)  # [B, 1+T, D]
        for block in self.model.blocks:
            x = block(x)
        return self.model.head(x[:, 0])


def mode_classes() -> dict[str, type[Mode]]:
    from edgekit.methods.astra.runtime.block_parallel import BlockParallelAllGather, BlockParallelSP
    from edgekit.methods.astra.runtime.sequence import Astra, SequenceParallel
    from edgekit.methods.astra.runtime.tensor_parallel import TensorParallel

    classes = (Single, SequenceParallel, TensorParallel, BlockParallelAllGather, BlockParallelSP,
               Astra)
    return {cls.name: cls for cls in classes}


MODE_NAMES = ("single", "sp", "tp", "bp-allgather", "bp-sp", "astra")


def make_mode(name: str, model: AstraViT, comm: Comm, bp_blocks: int = 4,
              seed: int = 0) -> Mode:
    """The mode called ``name`` for this rank; single needs world size 1, the others > 1.
    ``bp_blocks`` and ``seed`` shape the block-parallel modes' decoupled layers."""
    classes = mode_classes()
    if name not in classes:
        raise UnknownNameError("mode", name, classes)
    cls = classes[name]
    if cls.multi_rank != (comm.world_size > 1):
        need = "more than one rank" if cls.multi_rank else "exactly one rank"
        raise UsageError(f"mode '{name}' needs {need}, got world size {comm.world_size}")
    if name.startswith("bp-"):
        return cls(model, comm, bp_blocks=bp_blocks, seed=seed)
    return cls(model, comm)
