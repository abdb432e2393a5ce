"""GPT-2-style causal decoder with ASTRA blocks: only the prefill is sequence-parallel.

In a decoder, rank r's tokens attend causally among themselves and to every token of the ranks
before it; later ranks' tokens are masked, so rank r only needs (the codes of) ranks 0..r-1.
Decoding one token at a time has nothing to split and runs on one device (arXiv 2505.19342).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgekit.errors import UnknownNameError, UsageError
from edgekit.methods.astra.partition import token_shards
from edgekit.methods.astra.vit import AstraBlock


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 50257
    context: int = 1024  # maximum sequence length (learned positions)
    dim: int = 768
    depth: int = 12
    heads: int = 12
    groups: int = 32  # VQ groups per token; 0 = no VQ
    codes: int = 1024


class AstraGPT(nn.Module):
    """Token + position embeddings, causal AstraBlocks, final norm, LM head tied to wte."""

    def __init__(self, **config: int) -> None:
        super().__init__()
        cfg = GPTConfig(**config)
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.wpe = nn.Embedding(cfg.context, cfg.dim)
        self.blocks = nn.ModuleList(
            AstraBlock(cfg.dim, cfg.heads, 4.0, cfg.groups, cfg.codes, causal=True)
            for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> [B, T, D]."""
        if ids.dim() != 2 or ids.shape[1] > self.config.context:
            raise UsageError(f"AstraGPT expects token ids [B, T<={self.config.context}], "
                             f"got {list(ids.shape)}")
        return self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Single-device prefill: logits [B, T, vocab]."""
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))

    def prefill_partitioned(self, ids: torch.Tensor, world_size: int, mode: str) -> torch.Tensor:
        """Prefill at ``world_size`` ranks; ``mode`` "sp" sends exact block inputs, "astra" their
        VQ codes. Rank r attends over its own tokens and those of ranks before it."""
        if mode not in ("sp", "astra"):
            raise UnknownNameError("prefill mode", mode, ("sp", "astra"))
        if mode == "astra" and any(b.vq is None for b in self.blocks):
            raise UsageError("mode 'astra' needs a model with VQ codebooks (groups > 0)")
        x = self.embed(ids)  # [B, T, D]
        shards = token_shards(x.shape[1], world_size)
        for block in self.blocks:
            sent = block.vq(x)[0] if mode == "astra" else x
            x = torch.cat([block.forward_partitioned(x[:, s], sent[:, :s.start])
                           for s in shards], 1)  # [B, T, D]
        return self.lm_head(self.norm(x))
