"""Third-party models at the sizes users deploy, built from Hugging Face ``transformers`` configs
with random weights (nothing is downloaded): MobileNetV2 and ViT-S/16 at 224 px, DistilBERT-base
at 128 tokens. Each callable returns ``(module, example inputs)``, the form
``edgekit export package.module:callable`` takes, so the suite runs them through the same path
as a user's own model. The ``tiny_*`` twins keep the architectures at a size tests can afford.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from edgekit.optional import Extra, require

TRANSFORMERS = Extra("dev", "pip install transformers (edgekit's 'dev' extra)")
IMAGE_SIZE = 224
TOKENS = 128
SEED = 0
Built = tuple[nn.Module, dict[str, torch.Tensor]]


def _transformers() -> Any:
    return require("transformers", TRANSFORMERS, "the edge suite's Hugging Face models")


def _torch_init(model: nn.Module) -> nn.Module:
    """torch's own initialisation for every layer: HF's std-0.02 init fades a deep conv net's
    activations until every logit is the same, which makes top-1 agreement meaningless."""
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return model.eval()


def _image(size: int) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.rand(1, 3, size, size)}


def _mobilenet_v2(size: int, width: float) -> Built:
    hf = _transformers()
    torch.manual_seed(SEED)
    config = hf.MobileNetV2Config(image_size=size, depth_multiplier=width, num_labels=1000)
    return _torch_init(hf.MobileNetV2ForImageClassification(config)), _image(size)


def _vit(size: int, dim: int, depth: int, heads: int) -> Built:
    hf = _transformers()
    torch.manual_seed(SEED)
    config = hf.ViTConfig(image_size=size, patch_size=16, hidden_size=dim,
                          num_hidden_layers=depth, num_attention_heads=heads,
                          intermediate_size=4 * dim, num_labels=1000)
    return _torch_init(hf.ViTForImageClassification(config)), _image(size)


def _distilbert(dim: int, layers: int, heads: int, vocab: int, tokens: int) -> Built:
    hf = _transformers()
    torch.manual_seed(SEED)
    config = hf.DistilBertConfig(vocab_size=vocab, dim=dim, n_layers=layers, n_heads=heads,
                                 hidden_dim=4 * dim, num_labels=2)
    model = hf.DistilBertForSequenceClassification(config).eval()
    ids = torch.randint(0, vocab, (1, tokens))
    ids[0, 0] = vocab - 1  # the example's largest id sets the range of generated ids
    return model, {"input_ids": ids, "attention_mask": torch.ones(1, tokens, dtype=torch.int64)}


def mobilenet_v2() -> Built:
    """MobileNetV2 1.0 at 224 px, 1000 classes (3.5 M parameters, 0.3 GMACs)."""
    return _mobilenet_v2(IMAGE_SIZE, 1.0)


def vit_small() -> Built:
    """ViT-S/16 at 224 px (384 wide, 12 layers, 6 heads; 22 M parameters, 197 tokens)."""
    return _vit(IMAGE_SIZE, 384, 12, 6)


def distilbert_base() -> Built:
    """DistilBERT-base (768 wide, 6 layers, 30522-token vocabulary) at 128 tokens, two int64
    inputs, a 2-label classifier head."""
    return _distilbert(768, 6, 12, 30522, TOKENS)


def tiny_mobilenet_v2() -> Built:
    return _mobilenet_v2(32, 0.35)


def tiny_vit() -> Built:
    return _vit(32, 32, 1, 2)


def tiny_distilbert() -> Built:
    return _distilbert(32, 1, 2, 100, 16)
