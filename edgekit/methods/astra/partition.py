"""How ASTRA splits the T patch tokens over N ranks: contiguous shards, one per rank.

The ranks' computation over these shards is ``vit.run_partitioned`` (in one process) and the
runtime's modes (``edgekit.methods.astra.runtime``, over torch.distributed).
"""
from __future__ import annotations

from edgekit.errors import UsageError


def token_shards(num_tokens: int, world_size: int) -> list[slice]:
    """Contiguous shards of ``num_tokens`` over ``world_size`` ranks, sizes differing by <= 1
    (the first ``num_tokens % world_size`` ranks get one more)."""
    if world_size < 1:
        raise UsageError(f"world size {world_size} must be at least 1")
    if world_size > num_tokens:
        raise UsageError(f"world size {world_size} exceeds the {num_tokens} tokens to shard",
                         hint=f"use at most {num_tokens} ranks or more tokens")
    base, extra = divmod(num_tokens, world_size)
    shards, start = [], 0
    for rank in range(world_size):
        stop = start + base + (rank < extra)
        shards.append(slice(start, stop))
        start = stop
    return shards
