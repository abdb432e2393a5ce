"""Nearest-code search for the runtime: the same indices as ``GroupedVQ.encode``, faster on CPU.

``GroupedVQ.encode`` runs one batched matmul over all groups with an inner dimension of
D/G (12 for ViT-S at G=32) and materialises every distance ([G, n, K] = 64 MB per block for
512 tokens), which makes it memory-bound: on one core it costs more than the block's attention.
Here each group is one ``addmm`` (||c||^2 - 2 x.c in one pass) over chunks of tokens small
enough for the distances to stay in cache, followed by the argmin. Same arithmetic, same
argmin; the test checks that the indices agree.
"""
from __future__ import annotations

import torch

from edgekit.models.astra import GroupedVQ

CHUNK_TOKENS = 64  # [64, K=1024] fp32 distances = 256 KiB per group: well inside a 1 MiB L2


class CodeSearch:
    """Precomputed per-group codebook transposes and norms of one block's VQ."""

    def __init__(self, vq: GroupedVQ) -> None:
        self.groups, self.group_dim = vq.groups, vq.group_dim
        self.codebook_t = vq.codebook.transpose(1, 2).contiguous()  # [G, d, K]
        self.norms = (vq.codebook ** 2).sum(-1)  # [G, K]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[..., D] -> LongTensor [..., G], as ``GroupedVQ.encode``."""
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.groups * self.group_dim)  # [N, D]
        chunks = []
        for start in range(0, len(flat), CHUNK_TOKENS):
            rows = flat[start:start + CHUNK_TOKENS]
            chunks.append(torch.stack([
                torch.addmm(self.norms[g], rows[:, g * self.group_dim:(g + 1) * self.group_dim],
                            self.codebook_t[g], alpha=-2).argmin(-1)
                for g in range(self.groups)], -1))  # [n, G]
        return torch.cat(chunks).reshape(*lead, self.groups)
