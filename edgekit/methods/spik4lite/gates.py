"""Spik4lite's gated spiking layers (Spik4lite, ICML 2026 [code]: ``yongzhishe/Spik4lite``,
``Spik4lite.py``).

A ``GatedLayer`` wraps a convolution or linear layer whose input ``x`` is spikes,
``[T, B, C, H, W]`` (conv) or ``[T, B, ..., C]`` (linear), and multiplies ``x`` by a per-sample,
per-channel keep mask before the layer runs:

- firing rate ``fr[b, c] = mean_{T, H, W} x`` (every axis but the sample and the channel);
- ``running_fr``: an EMA of the batch mean of ``fr`` (momentum 0.9), updated in training only; the
  first batch sets it (the authors' code starts from zeros the same way);
- ``logits = Linear(C -> 2C)(fr).view(B, C, 2)``, column 0 "drop", column 1 "keep", bias
  initialised to (0.5, 2.0) per channel so every channel starts kept (p_keep = 0.82);
- training: hard Gumbel-softmax with a straight-through estimator at temperature ``tau``
  (annealed 1.0 -> 0.5 by the schedule); eval: the argmax, so the same input gives the same mask;
- channel cost ``cost[c] = k_h·k_w·C_out·H_out·W_out · fr[c]`` (the synaptic operations channel c
  feeds; ``running_fr`` in training, the batch rate in eval, as the authors' code). For a grouped
  convolution an input channel feeds only ``C_out / groups`` outputs, so that is the factor used
  [ours: the same formula where groups = 1];
- energy penalty of the layer ``Σ_b Σ_c p_keep[b, c]·cost[c] / (B·Σ_c cost[c])`` with
  ``p_keep = softmax(logits)[..., 1]``; ``energy_penalty`` averages it over the layers and the
  trainer adds ``λ`` times it to the task loss.

The wrapped layer keeps its own name one level down (``...w1.layer``) while gated; ``unwrap``
puts it back under its old name, so a pruned, fine-tuned net has the state-dict keys of the net
it came from.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

DROP_BIAS, KEEP_BIAS = 0.5, 2.0  # [code] gating_layer.bias = tensor([0.5, 2.0]).repeat(C)
MOMENTUM = 0.9  # [code] running_fr EMA
TAU_START, TAU_END = 1.0, 0.5  # [code] Gumbel temperature annealed 1.0 -> 0.5


def channel_dim(layer: nn.Module) -> int:
    """Where the channels of ``layer``'s multi-step input are: 2 for a conv ``[T, B, C, H, W]``,
    the last axis for a linear layer."""
    return 2 if isinstance(layer, nn.Conv2d) else -1


class GatedLayer(nn.Module):
    """``layer(x * mask)`` with the learned per-sample, per-channel keep mask of Spik4lite."""

    def __init__(self, layer: nn.Conv2d | nn.Linear) -> None:
        super().__init__()
        channels = layer.in_channels if isinstance(layer, nn.Conv2d) else layer.in_features
        self.layer = layer
        self.gate = nn.Linear(channels, 2 * channels)
        with torch.no_grad():
            self.gate.bias.copy_(torch.tensor([DROP_BIAS, KEEP_BIAS]).repeat(channels))
        self.register_buffer("running_fr", torch.zeros(channels))
        self.register_buffer("seen", torch.zeros((), dtype=torch.bool))
        self.tau = TAU_START
        self.penalty: torch.Tensor | None = None  # this layer's energy penalty, last forward
        self._keep_sum: torch.Tensor | None = None  # Σ over accumulated batches of mean keep
        self._keep_batches = 0
        self.accumulating = False

    @property
    def channels(self) -> int:
        return self.running_fr.numel()

    def fan_out(self, out: torch.Tensor) -> int:
        """Outputs one input channel feeds per step and sample: ``k_h·k_w·C_out/groups·H_out·W_out``
        for a conv, ``C_out`` times the token count for a linear layer."""
        if isinstance(self.layer, nn.Conv2d):
            kh, kw = self.layer.kernel_size
            return kh * kw * (out.shape[2] // self.layer.groups) * out.shape[3] * out.shape[4]
        return math.prod(out.shape[2:])

    def firing_rate(self, x: torch.Tensor) -> torch.Tensor:
        """``fr[b, c]``: the mean of ``x`` over every axis but the sample (1) and the channel."""
        dim = channel_dim(self.layer) % x.dim()
        axes = tuple(a for a in range(x.dim()) if a not in (1, dim))
        return x.mean(dim=axes)  # [B, C]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fr = self.firing_rate(x)  # [B, C]
        batch_fr = fr.mean(0).detach()
        if self.training:
            with torch.no_grad():
                if not bool(self.seen):
                    self.running_fr.copy_(batch_fr)
                    self.seen.fill_(True)
                else:
                    self.running_fr.mul_(MOMENTUM).add_((1 - MOMENTUM) * batch_fr)
        logits = self.gate(fr).view(fr.shape[0], -1, 2)  # [B, C, (drop, keep)]
        if self.training:
            hard = F.gumbel_softmax(logits, tau=self.tau, hard=True, dim=-1)  # straight-through
        else:
            hard = F.one_hot(logits.argmax(-1), 2).to(x.dtype)
        mask = hard[..., 1]  # [B, C]
        if self.training and self.accumulating:
            keep = mask.detach().mean(0)
            self._keep_sum = keep if self._keep_sum is None else self._keep_sum + keep
            self._keep_batches += 1
        shape = [1] * x.dim()
        shape[1], shape[channel_dim(self.layer)] = mask.shape
        out = self.layer(x * mask.view(shape))
        rate = self.running_fr if self.training else batch_fr
        cost = self.fan_out(out) * rate  # [C]
        p_keep = logits.softmax(-1)[..., 1]  # [B, C]
        total = cost.sum()
        self.penalty = ((p_keep * cost).sum() / (fr.shape[0] * total) if total > 0
                        else p_keep.sum() * 0.0)
        return out

    def start_accumulating(self) -> None:
        """Average the hard keep decisions of the training batches from now on."""
        self.accumulating, self._keep_sum, self._keep_batches = True, None, 0

    def keep_probability(self) -> torch.Tensor | None:
        """The mean keep decision per channel since ``start_accumulating`` (None: no batch)."""
        if self._keep_sum is None:
            return None
        return self._keep_sum / self._keep_batches

    def stop_accumulating(self) -> None:
        self.accumulating, self._keep_sum, self._keep_batches = False, None, 0


def gated_layers(model: nn.Module) -> list[tuple[str, GatedLayer]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, GatedLayer)]


def energy_penalty(model: nn.Module) -> torch.Tensor:
    """The mean over gated layers of each layer's penalty from the last forward pass."""
    penalties = [m.penalty for _, m in gated_layers(model) if m.penalty is not None]
    if not penalties:
        return torch.zeros(())
    return torch.stack(penalties).mean()


@torch.no_grad()
def soft_keep(model: nn.Module) -> torch.Tensor:
    """Every gated channel's soft keep probability at its running rate, concatenated: where the
    gates stand (0.82 at the bias initialisation; under 0.5 for a channel they would remove)."""
    probs = [m.gate(m.running_fr).view(-1, 2).softmax(-1)[:, 1] for _, m in gated_layers(model)]
    return torch.cat(probs) if probs else torch.zeros(0)


def set_temperature(model: nn.Module, tau: float) -> None:
    for _, m in gated_layers(model):
        m.tau = tau


def temperature(step: int, steps: int) -> float:
    """Linear anneal from 1.0 to 0.5 over ``steps`` gated training steps."""
    frac = min(1.0, step / max(1, steps - 1))
    return TAU_START + (TAU_END - TAU_START) * frac
