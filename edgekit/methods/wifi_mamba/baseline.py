"""PETR-style transformer baseline of Person-in-WiFi 3D (Yan et al., CVPR 2024).

Each packet's CSI (amplitude and phase, 2 x 270 features) is a token; a transformer encoder with
sinusoidal positions encodes the sequence and a DETR/PETR decoder (Shi et al., CVPR 2022) with
learned pose queries regresses 14x3 keypoints and a person logit per query, trained with the same
Hungarian set loss as WiFi-Mamba. Paper size: 256-dim, 8 heads, 6 encoder / 3 decoder layers,
100 queries; the CPU size keeps the structure at a smaller width and depth. Self-attention makes
its cost quadratic in the number of packets.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgekit.methods.wifi_mamba.blocks import (
    DecoderLayer,
    EncoderLayer,
    InputNorm,
    PoseHead,
    sinusoidal_positions,
)


@dataclass(frozen=True)
class PETRConfig:
    in_features: int = 540  # amplitude and phase of 270 antenna-subcarrier pairs
    dim: int = 128
    heads: int = 4
    enc_layers: int = 4
    dec_layers: int = 2
    queries: int = 10
    ffn: int = 512


class PETRBaseline(nn.Module):
    def __init__(self, **config) -> None:
        super().__init__()
        cfg = self.cfg = PETRConfig(**config)
        self.input_norm = InputNorm(cfg.in_features // 2)
        self.embed = nn.Sequential(nn.Linear(cfg.in_features, cfg.dim), nn.LayerNorm(cfg.dim))
        self.encoder = nn.ModuleList(EncoderLayer(cfg.dim, cfg.heads, cfg.ffn)
                                     for _ in range(cfg.enc_layers))
        self.enc_norm = nn.LayerNorm(cfg.dim)
        self.queries = nn.Parameter(torch.randn(cfg.queries, cfg.dim) * 0.02)
        self.decoder = nn.ModuleList(DecoderLayer(cfg.dim, cfg.heads, cfg.ffn)
                                     for _ in range(cfg.dec_layers))
        self.head = PoseHead(cfg.dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, 2, 270, T) -> poses (B, Q, 14, 3), logits (B, Q)."""
        tokens = self.input_norm(x).flatten(1, 2).transpose(1, 2)  # (B, T, 540)
        h = self.embed(tokens)
        h = h + sinusoidal_positions(h.shape[1], h.shape[2], h)  # (B, T, D)
        for layer in self.encoder:
            h = layer(h)
        mem = self.enc_norm(h)
        q = self.queries.repeat(x.shape[0], 1, 1)  # not a view: module hooks see a fresh tensor
        for layer in self.decoder:
            q = layer(q, mem)
        return self.head(q)


CONFIGS = {
    "cpu": {},  # 1,415,595 parameters
    "paper": {"dim": 256, "heads": 8, "enc_layers": 6, "dec_layers": 3, "queries": 100,
              "ffn": 2048},  # 12,869,163
}
