"""Tensor parallelism in the Megatron-LM style (Shoeybi et al. 2019, section 3).

Every rank holds all tokens and 1/N of each block's weights: the qkv projection split by heads
(column parallel), the output projection by its input columns (row parallel), the MLP's first
layer by hidden units and its second by the matching columns. Each block needs two all-reduces
of the full activations [B, 1+T, D] (after attention and after the MLP); the row-parallel biases
are added once, after the sum. The result equals the single device's up to float rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from edgekit.errors import UsageError
from edgekit.methods.astra import AstraBlock, AstraViT
from edgekit.methods.astra.runtime.collectives import Comm
from edgekit.methods.astra.runtime.modes import Mode


@dataclass(frozen=True)
class _Shard:
    """One rank's slice of one block's weights."""

    qkv_w: torch.Tensor  # [3 * D/N, D]
    qkv_b: torch.Tensor  # [3 * D/N]
    proj_w: torch.Tensor  # [D, D/N]
    fc1_w: torch.Tensor  # [M/N, D]
    fc1_b: torch.Tensor  # [M/N]
    fc2_w: torch.Tensor  # [D, M/N]


def shard_block(block: AstraBlock, rank: int, world_size: int) -> _Shard:
    """Rank ``rank``'s weights: heads rank*H/N .. (rank+1)*H/N, the same share of the MLP."""
    D = block.attn.dim
    width = D // world_size
    heads = slice(rank * width, (rank + 1) * width)
    qkv_w = block.attn.qkv.weight.reshape(3, D, D)[:, heads].reshape(3 * width, D)
    qkv_b = block.attn.qkv.bias.reshape(3, D)[:, heads].reshape(3 * width)
    fc1, fc2 = block.mlp[0], block.mlp[2]
    hidden = fc1.out_features // world_size
    units = slice(rank * hidden, (rank + 1) * hidden)
    return _Shard(qkv_w.contiguous(), qkv_b.contiguous(),
                  block.attn.proj.weight[:, heads].contiguous(),
                  fc1.weight[units].contiguous(), fc1.bias[units].contiguous(),
                  fc2.weight[:, units].contiguous())


class TensorParallel(Mode):
    """Heads and MLP hidden units split across ranks; two all-reduces per block."""

    name = "tp"

    def __init__(self, model: AstraViT, comm: Comm) -> None:
        super().__init__(model, comm)
        cfg = model.config
        hidden = int(cfg.dim * cfg.mlp_ratio)
        if cfg.heads % self.world_size or hidden % self.world_size:
            raise UsageError(f"tensor parallel needs heads ({cfg.heads}) and MLP width ({hidden})"
                             f" divisible by the world size {self.world_size}")
        self.heads = cfg.heads // self.world_size
        self.shards = [shard_block(b, self.rank, self.world_size) for b in model.blocks]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.with_cls(tokens)  # [B, 1+T, D]
        for block, w in zip(self.model.blocks, self.shards, strict=False):
            x = x + self.comm.all_reduce(self._attention(block.norm1(x), w)) + block.attn.proj.bias
            h = F.gelu(F.linear(block.norm2(x), w.fc1_w, w.fc1_b))  # [B, 1+T, M/N]
            x = x + self.comm.all_reduce(F.linear(h, w.fc2_w)) + block.mlp[2].bias
        return self.model.head(x[:, 0])

    def _attention(self, x: torch.Tensor, w: _Shard) -> torch.Tensor:
        """This rank's heads: x [B, n, D] -> its partial output projection [B, n, D]."""
        B, n, _ = x.shape
        q, k, v = F.linear(x, w.qkv_w, w.qkv_b).chunk(3, -1)  # 3 x [B, n, D/N]
        q, k, v = (t.reshape(B, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)  # [B, h/N, n, D/H]
        return F.linear(out.transpose(1, 2).reshape(B, n, -1), w.proj_w)  # [B, n, D]
