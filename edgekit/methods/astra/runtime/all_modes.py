"""Every inference mode the runtime compares, by name: the one list the CLI's choices, the bench
and the workers read, and the factory that builds a mode for one rank.

It sits above the modes (modes.py holds their base class and the single-device baseline), so no
mode module imports it.
"""
from __future__ import annotations

from edgekit.errors import UnknownNameError, UsageError
from edgekit.methods.astra import AstraViT
from edgekit.methods.astra.runtime.block_parallel import BlockParallelAllGather, BlockParallelSP
from edgekit.methods.astra.runtime.collectives import Comm
from edgekit.methods.astra.runtime.modes import Mode, Single
from edgekit.methods.astra.runtime.sequence import Astra, SequenceParallel
from edgekit.methods.astra.runtime.tensor_parallel import TensorParallel

MODE_CLASSES: dict[str, type[Mode]] = {cls.name: cls for cls in (
    Single, SequenceParallel, TensorParallel, BlockParallelAllGather, BlockParallelSP, Astra)}
MODE_NAMES = tuple(MODE_CLASSES)
MULTI_MODES = tuple(name for name, cls in MODE_CLASSES.items() if cls.multi_rank)


def make_mode(name: str, model: AstraViT, comm: Comm, bp_blocks: int = 4,
              seed: int = 0) -> Mode:
    """The mode called ``name`` for this rank; single needs world size 1, the others > 1.
    ``bp_blocks`` and ``seed`` shape the block-parallel modes' decoupled layers."""
    if name not in MODE_CLASSES:
        raise UnknownNameError("mode", name, MODE_CLASSES)
    cls = MODE_CLASSES[name]
    if cls.multi_rank != (comm.world_size > 1):
        need = "more than one rank" if cls.multi_rank else "exactly one rank"
        raise UsageError(f"mode '{name}' needs {need}, got world size {comm.world_size}")
    if name.startswith("bp-"):
        return cls(model, comm, bp_blocks=bp_blocks, seed=seed)
    return cls(model, comm)
