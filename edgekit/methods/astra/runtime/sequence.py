"""Sequence parallelism: each rank holds T/N patch tokens and a copy of the class token.

Per block every rank sends its local patch tokens' block input to the others and runs
``AstraBlock.forward_partitioned``: queries and the MLP on local tokens only, keys/values over
local + remote. The exchange is started before the block and waited for only after the local
tokens' Q/K/V projections, so those hide part of its wire time (and the peers' jitter). The
class-token copies are never sent; after the last block their outputs are averaged (an
all-reduce of [B, D]) before the head: the distributed class token of ASTRA. In full precision
(``sp``) all copies are identical and the result equals the single device's; in ``astra`` the
remote tokens arrive as bit-packed VQ code indices, and with one VQ group their keys and values
are looked up per code (``AstraBlock.code_keys_values``).
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch

from edgekit.errors import UsageError
from edgekit.methods.astra import AstraViT, token_shards
from edgekit.methods.astra.runtime.bitpack import index_bits, pack, packed_bytes, unpack
from edgekit.methods.astra.runtime.collectives import Comm
from edgekit.methods.astra.runtime.encode import CodeSearch
from edgekit.methods.astra.runtime.modes import Mode


class _Sharded(Mode):
    def __init__(self, model: AstraViT, comm: Comm) -> None:
        super().__init__(model, comm)
        self.shards: list[slice] = []

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.shards = token_shards(tokens.shape[1], self.world_size)
        mine = self.shards[self.rank]
        local = self.with_cls(tokens[:, mine])  # [B, 1+n, D]
        for block in self.model.blocks:
            local = block.forward_partitioned(local, **self.exchange(block, local[:, 1:]))
        cls = self.comm.all_reduce(local[:, 0].contiguous()) / self.world_size  # [B, D]
        return self.model.head(cls)

    @abstractmethod
    def exchange(self, block: torch.nn.Module, local: torch.Tensor) -> dict[str, Any]:
        """This rank's patch tokens [B, n, D] -> ``forward_partitioned`` keyword arguments:
        ``remote_kv``, a callable that waits for the other ranks' tokens and returns their keys
        and values ([B, T-n, D] each)."""

    def others(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([p for r, p in enumerate(parts) if r != self.rank], 1)


class SequenceParallel(_Sharded):
    """Full-precision sequence parallelism: all-gather the fp32 token embeddings per block."""

    name = "sp"

    def exchange(self, block: torch.nn.Module, local: torch.Tensor) -> dict[str, Any]:
        counts = [s.stop - s.start for s in self.shards]
        pending = self.comm.start_all_gather(local.transpose(0, 1).contiguous(),
                                             counts)  # [n_r, B, D] per rank

        def remote_kv() -> tuple[torch.Tensor, torch.Tensor]:
            remote = self.others([p.transpose(0, 1) for p in pending.wait()])  # [B, T-n, D]
            return block.attn.keys_values(block.norm1(remote))

        return {"remote_kv": remote_kv}


class Astra(_Sharded):
    """ASTRA: all-gather only the bit-packed code indices of each block's GroupedVQ."""

    name = "astra"

    def __init__(self, model: AstraViT, comm: Comm) -> None:
        super().__init__(model, comm)
        if any(block.vq is None for block in model.blocks):
            raise UsageError("mode 'astra' needs a model with VQ codebooks",
                             hint="use a config with groups > 0 (--groups)")
        vq = model.blocks[0].vq
        self.groups, self.bits = vq.groups, index_bits(vq.codes)
        self.search = {id(b): CodeSearch(b.vq) for b in model.blocks}
        self.code_kv = ({id(b): b.code_keys_values() for b in model.blocks}
                        if self.groups == 1 else {})

    def exchange(self, block: torch.nn.Module, local: torch.Tensor) -> dict[str, Any]:
        batch = len(local)
        idx = self.search[id(block)].encode(local)  # [B, n, G]
        sizes = [batch * (s.stop - s.start) * self.groups for s in self.shards]  # indices
        counts = [packed_bytes(n, self.bits) for n in sizes]
        pending = self.comm.start_all_gather(pack(idx, self.bits), counts)  # uint8 [bytes_r]

        def remote_kv() -> tuple[torch.Tensor, torch.Tensor]:
            # [B, T-n, G] codes
            remote = self.others([unpack(p, n, self.bits).reshape(batch, -1, self.groups)
                                  for p, n in zip(pending.wait(), sizes, strict=False)])
            if id(block) in self.code_kv:
                keys, values = self.code_kv[id(block)]  # [K, D] each
                return keys[remote[..., 0]], values[remote[..., 0]]
            return block.attn.keys_values(block.norm1(block.vq.decode(remote)))  # [B, T-n, D]

        return {"remote_kv": remote_kv}
