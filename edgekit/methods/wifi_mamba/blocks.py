"""Attention blocks and the pose head shared by WiFi-Mamba's decoder and the PETR-style baseline.

Attention is written with plain matmuls (Vaswani et al., 2017) so both torch exporters handle it
and no fused fast path changes numerics between eager PyTorch and the exported graph.
"""
from __future__ import annotations

import math

import torch
from torch import nn

N_KPT = 14


class InputNorm(nn.Module):
    """Per-feature standardisation with statistics of the training set, kept as buffers.

    The static channel (line of sight, walls) dominates raw CSI and is the same in every frame of
    a room; standardising each antenna-subcarrier feature leaves the part that people change
    (as Person-in-WiFi 3D's mesh variant subtracts the room's average CSI).
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(2, features))
        self.register_buffer("std", torch.ones(2, features))

    def set_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean.copy_(mean)
        self.std.copy_(std.clamp_min(1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.unsqueeze(-1)) / self.std.unsqueeze(-1)  # (B, 2, F, T)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        bsz, lq, dim = x.shape
        lk = mem.shape[1]
        q = self.q(x).view(bsz, lq, self.heads, self.head_dim).transpose(1, 2)  # (B, h, Lq, hd)
        k = self.k(mem).view(bsz, lk, self.heads, self.head_dim).transpose(1, 2)  # (B, h, Lk, hd)
        v = self.v(mem).view(bsz, lk, self.heads, self.head_dim).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.head_dim), dim=-1)
        return self.o((att @ v).transpose(1, 2).reshape(bsz, lq, dim))  # (B, Lq, d)


class MLP(nn.Sequential):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))


class EncoderLayer(nn.Module):
    """Pre-norm self-attention + MLP."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn, self.mlp = Attention(dim, heads), MLP(dim, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.n1(x)
        x = x + self.attn(h, h)
        return x + self.mlp(self.n2(x))


class DecoderLayer(nn.Module):
    """Pre-norm query self-attention, cross-attention to the memory tokens, MLP."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.n1, self.n2, self.n3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_attn, self.cross = Attention(dim, heads), Attention(dim, heads)
        self.mlp = MLP(dim, ffn)

    def forward(self, q: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        h = self.n1(q)
        q = q + self.self_attn(h, h)
        q = q + self.cross(self.n2(q), mem)
        return q + self.mlp(self.n3(q))


class PoseHead(nn.Module):
    """Query features -> 14x3 keypoints (metres) and a person logit per query."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pose = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, N_KPT * 3))
        self.score = nn.Linear(dim, 1)

    def set_mean_pose(self, mean: torch.Tensor) -> None:
        """Start regression from a mean skeleton (14, 3), e.g. the training set's."""
        with torch.no_grad():
            self.pose[-1].bias.copy_(mean.reshape(-1))

    def forward(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.norm(q)
        poses = self.pose(q).unflatten(-1, (N_KPT, 3))  # (B, Q, 14, 3)
        return poses, self.score(q).squeeze(-1)  # (B, Q)


def sinusoidal_positions(length: int, dim: int, like: torch.Tensor) -> torch.Tensor:
    """(length, dim) fixed sinusoidal position codes (Vaswani et al., 2017), for any length."""
    pos = torch.arange(length, dtype=like.dtype, device=like.device).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=like.dtype, device=like.device)
                     * (-math.log(10000.0) / dim))
    return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)
