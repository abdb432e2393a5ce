"""The models the runtime runs: the digits-sized ASTRA ViT and the paper's ViT-S / ViT-B.

Every rank builds the model from the same seed, so all ranks hold identical weights without
loading a file; latency does not depend on trained weights (the issue asks for untrained ones).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from edgekit.errors import UnknownNameError, UsageError
from edgekit.methods.astra import AstraViT, paper_config
from edgekit.methods.astra.entries import DIGITS_CONFIG

MODEL_CONFIGS = ("digits", "vit-s", "vit-b")


def model_config(name: str, tokens: int | None = None, groups: int | None = None
                 ) -> dict[str, Any]:
    """The AstraViT config for ``name``; ``tokens`` (a square number) resizes the image so the
    model sees that many patch tokens; ``groups`` overrides the VQ groups G."""
    if name not in MODEL_CONFIGS:
        raise UnknownNameError("ASTRA runtime model", name, MODEL_CONFIGS)
    config = dict(DIGITS_CONFIG) if name == "digits" else paper_config(name)
    if tokens is not None:
        if tokens < 1 or math.isqrt(tokens) ** 2 != tokens:
            raise UsageError(f"--tokens must be a positive square number, got {tokens}",
                             hint="ViT patch grids are square: use 16, 256, 1024, ...")
        side = math.isqrt(tokens)
        config["image_size"] = side * config["patch_size"]
    if groups is not None:
        config["groups"] = groups
    return config


def build_model(name: str, seed: int = 0, tokens: int | None = None,
                groups: int | None = None) -> AstraViT:
    """An AstraViT in eval mode with seeded random weights (the same on every rank)."""
    torch.manual_seed(seed)
    model = AstraViT(**model_config(name, tokens, groups))
    return model.eval()


def example_images(model: AstraViT, batch: int, seed: int = 0) -> torch.Tensor:
    """Seeded random images of the model's input shape [B, C, H, W]."""
    cfg = model.config
    generator = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, cfg.in_chans, cfg.image_size, cfg.image_size, generator=generator)
