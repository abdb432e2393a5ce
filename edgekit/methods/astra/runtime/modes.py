"""The inference modes the runtime compares, one class per mode, one shared interface.

A mode is built once per rank from the model and the rank's ``Comm``; ``forward(tokens)`` takes
the patch tokens [B, T, D] (``model.embed`` output, computed on every rank) and returns the
logits on rank 0 (other ranks may return them too, or None). Everything a mode sends goes through
``Comm``, so the bytes and the emulated wire time are counted the same way for every mode.
Here the base class and the single-device baseline; the other modes subclass ``Mode`` in their
own modules, and all_modes.py names them all and builds one (``make_mode``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch

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
