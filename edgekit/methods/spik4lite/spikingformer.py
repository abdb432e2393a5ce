"""A Spikingformer-style net: the baseline Spik4lite's authors prune (Zhou et al., "Spikingformer:
Spike-driven Residual Learning for Transformer-based SNN", 2023; the layout of
``yongzhishe/Spik4lite``, ``Spikingformer/cifar10/model.py`` [code], written anew here).

- Spiking tokenizer: ``BN(Conv3x3(image))``, then four ``BN(Conv3x3(LIF(.)))`` blocks of widths
  D/8, D/4, D/2, D, D (the last two behind a 3x3/2 max-pool each, so H/4 x W/4 tokens).
- Blocks, ``x + attn(x)`` then ``x + mlp(x)``, every branch beginning with its own LIF
  (pre-activation: the residual stream stays real-valued, every conv sees spikes):
  attention ``q, k, v = LIF(BN(Conv1x1(LIF(x))))``, per head ``(q k^T) v · 0.125`` (no softmax),
  ``LIF_{v_th=0.5}``, then ``BN(Conv1x1 + bias)`` back to D; MLP ``BN(Conv1x1(LIF(.)))`` to
  ratio·D and back.
- Head: the tokens' mean, a linear classifier at every step, averaged over T (rate decoding).

Configs: ``DIGITS_CONFIG`` (8x8 digits: D = 64, 4 heads, one block, 2x2 tokens) trains on a CPU in
a minute; ``CIFAR_CONFIG`` is the paper's Spikingformer-4-384 (32x32, D = 384, 12 heads, 4 blocks,
T = 4), built and counted, not trained here.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from edgekit.data import DIGITS
from edgekit.errors import UsageError
from edgekit.registry import ExportSettings, ModelEntry, TrainSettings, register_model
from edgekit.spiking.layers import MultiStepNet, bn, conv, layer, lif, neuron, surrogate

PAPER = ("Spik4lite (ICML 2026), baseline Spikingformer (Zhou et al., 2023): "
         "Spikingformer-4-384 on CIFAR-10")
ATTN_SCALE = 0.125  # [code] x = (attn @ v) * 0.125
ATTN_THRESHOLD = 0.5  # [code] attn_lif v_threshold


def _attn_lif() -> nn.Module:
    return neuron.LIFNode(tau=2.0, decay_input=True, v_threshold=ATTN_THRESHOLD, v_reset=0.0,
                          surrogate_function=surrogate.ATan(), detach_reset=True, step_mode="m")


class SpikingSelfAttention(nn.Module):
    """Spikformer's spiking self-attention without softmax; ``heads`` tells Spik4lite that the
    q/k/v widths split into equal heads."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise UsageError(f"attention width {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.act_in = lif()
        self.q, self.bn_q, self.act_q = conv(dim, dim, 1), bn(dim), lif()
        self.k, self.bn_k, self.act_k = conv(dim, dim, 1), bn(dim), lif()
        self.v, self.bn_v, self.act_v = conv(dim, dim, 1), bn(dim), lif()
        self.act_attn = _attn_lif()
        self.proj, self.bn_proj = conv(dim, dim, 1, bias=True), bn(dim)

    def _heads(self, s: torch.Tensor) -> torch.Tensor:
        T, B, C, H, W = s.shape
        return s.reshape(T, B, self.heads, C // self.heads, H * W).transpose(-1, -2)  # [T,B,h,N,d]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, B, C, H, W]
        s = self.act_in(x)
        q = self._heads(self.act_q(self.bn_q(self.q(s))))
        k = self._heads(self.act_k(self.bn_k(self.k(s))))
        v = self.act_v(self.bn_v(self.v(s)))
        T, B, C, H, W = v.shape
        out = (q @ k.transpose(-1, -2)) @ self._heads(v) * ATTN_SCALE  # [T, B, h, N, d]
        out = out.transpose(-1, -2).reshape(T, B, C, H, W)
        return self.bn_proj(self.proj(self.act_attn(out)))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Sequential(lif(), conv(dim, hidden, 1), bn(hidden))
        self.fc2 = nn.Sequential(lif(), conv(hidden, dim, 1), bn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.attn = SpikingSelfAttention(dim, heads)
        self.mlp = MLP(dim, dim * mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)


class Tokenizer(nn.Module):
    """Conv stem to D channels at H/4 x W/4 [code: SpikingTokenizer]."""

    def __init__(self, in_channels: int, dim: int) -> None:
        super().__init__()
        widths = (dim // 8, dim // 4, dim // 2, dim, dim)
        self.stem = nn.Sequential(conv(in_channels, widths[0], 3), bn(widths[0]))
        blocks = []
        for i in range(1, 5):
            pool = [layer.MaxPool2d(3, 2, padding=1, step_mode="m")] if i >= 3 else []
            blocks.append(nn.Sequential(lif(), *pool, conv(widths[i - 1], widths[i], 3),
                                        bn(widths[i])))
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x))


class Spikingformer(MultiStepNet):
    def __init__(self, T: int = 4, in_channels: int = 1, num_classes: int = 10,
                 input_size: int = 8, dim: int = 64, heads: int = 4, depth: int = 1,
                 mlp_ratio: int = 4) -> None:
        super().__init__(T, (in_channels, input_size, input_size))
        if dim % 8:
            raise UsageError(f"Spikingformer width {dim} must be a multiple of 8 (tokenizer)")
        self.tokenizer = Tokenizer(in_channels, dim)
        self.blocks = nn.Sequential(*(Block(dim, heads, mlp_ratio) for _ in range(depth)))
        self.head = layer.Linear(dim, num_classes, step_mode="m")

    def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.tokenizer(x_seq))  # [T, B, D, H/4, W/4]
        return self.head(x.mean((3, 4)))  # [T, B, classes]


DIGITS_CONFIG: dict[str, Any] = {"T": 4, "in_channels": 1, "num_classes": 10, "input_size": 8,
                                 "dim": 64, "heads": 4, "depth": 1, "mlp_ratio": 4}
CIFAR_CONFIG: dict[str, Any] = {"T": 4, "in_channels": 3, "num_classes": 10, "input_size": 32,
                                "dim": 384, "heads": 12, "depth": 4, "mlp_ratio": 4}


def build_cifar_model(**overrides: Any) -> Spikingformer:
    """The paper's Spikingformer-4-384 for CIFAR-10 (built and counted, not trained here)."""
    return Spikingformer(**{**CIFAR_CONFIG, **overrides})


register_model(ModelEntry(
    name="spikingformer",
    family="spiking",
    builder=Spikingformer,
    config=DIGITS_CONFIG,
    task=DIGITS.task,
    description="Spikingformer-style spiking transformer (Spik4lite's baseline), T=4, digits-sized;"
                " paper size: edgekit.methods.spik4lite.build_cifar_model()",
    paper=PAPER,
    export=ExportSettings(atol=1e-4, rtol=1e-3, dynamo=True),
    train=TrainSettings(epochs=30, batch_size=64, lr=3e-3, weight_decay=1e-4),
    spiking=True,
))


def cifar_model_and_inputs() -> tuple[Spikingformer, dict[str, torch.Tensor]]:
    """Spikingformer-4-384 at CIFAR size (32x32, T = 4) with random weights and one example
    image: the edge suite's member (``edgekit.suites``)."""
    torch.manual_seed(0)
    return build_cifar_model().eval(), {"x": torch.rand(1, 3, 32, 32)}
