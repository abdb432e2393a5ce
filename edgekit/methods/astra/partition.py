"""The multi-device ASTRA computation in one process: the oracle for the torch.distributed runtime.

N ranks each hold the full weights and a contiguous shard of the T patch tokens
(``token_shards``), plus their own copy of the class token. Per block, every rank sends the block
*input* of its patch tokens (the residual stream before ``norm1``) to the others:

- ``"sp"``: full precision, so every rank attends over exactly the tokens the single device sees;
  the result equals ``"single"`` (the class-token copies stay identical).
- ``"astra"``: as code indices of that block's own ``GroupedVQ``; the receivers decode them, so a
  rank attends over its full-precision local tokens (with its class-token copy) plus the
  *quantised* non-local patch tokens. Class-token copies are never sent. Only the keys and values
  of non-local tokens are affected; queries, residuals and the MLP stay local and exact.

After the last block the N class-token outputs are averaged before the head (distributed class
token: each copy carries an independent quantisation error, the mean shrinks it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from edgekit.errors import UnknownNameError, UsageError

if TYPE_CHECKING:
    from edgekit.methods.astra.vit import AstraViT

MODES = ("single", "sp", "astra")


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


@dataclass(frozen=True)
class PartitionedOutput:
    logits: torch.Tensor  # [B, classes]
    commitment: torch.Tensor  # mean commitment loss over the blocks (0 unless mode="astra")


def run_partitioned(model: AstraViT, images: torch.Tensor, world_size: int, mode: str,
                    noise_scale: float = 0.0) -> PartitionedOutput:
    """ASTRA/SP/single inference (or training, in train mode) with logits and commitment loss.

    ``noise_scale`` is the NAVQ lambda; it only acts in training mode.
    """
    if mode not in MODES:
        raise UnknownNameError("partition mode", mode, MODES)
    tokens = model.embed(images)  # [B, T, D]
    zero = tokens.new_zeros(())
    if mode == "single":
        x = torch.cat([model.cls_token.expand(len(tokens), -1, -1), tokens], 1)  # [B, 1+T, D]
        for block in model.blocks:
            x = block(x)
        return PartitionedOutput(model.head(x[:, 0]), zero)
    if mode == "astra" and any(b.vq is None for b in model.blocks):
        raise UsageError("mode 'astra' needs a model with VQ codebooks (groups > 0)")
    shards = token_shards(model.config.num_tokens, world_size)  # static, for tracing
    cls = [model.cls_token.expand(len(tokens), -1, -1)] * world_size  # N x [B, 1, D]
    commitment = zero
    for block in model.blocks:
        sent = tokens
        if mode == "astra":
            sent, loss = block.vq(tokens, noise_scale)  # [B, T, D]: what the receivers decode
            commitment = commitment + loss / len(model.blocks)
        outs = [block.forward_partitioned(torch.cat([cls[r], tokens[:, s]], 1),
                                          torch.cat([sent[:, :s.start], sent[:, s.stop:]], 1))
                for r, s in enumerate(shards)]  # N x [B, 1+n_r, D]
        cls = [o[:, :1] for o in outs]
        tokens = torch.cat([o[:, 1:] for o in outs], 1)  # [B, T, D]
    pooled = torch.stack(cls).mean(0)[:, 0]  # [B, D]: distributed class token
    return PartitionedOutput(model.head(pooled), commitment)


def partitioned_forward(model: AstraViT, images: torch.Tensor, world_size: int,
                        mode: str) -> torch.Tensor:
    """Logits [B, classes] of ``mode`` in {"single", "sp", "astra"} at ``world_size`` ranks."""
    return run_partitioned(model, images, world_size, mode).logits
