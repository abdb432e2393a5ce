"""Three interchangeable spiking attention blocks: the O(N^2 D) reference, SSA and USSA.

Paper: "Efficient Transformer Attention for SNNs via Hadamard Simplification" (ICML 2026); code
``jtt-acma/Efficient-Transformer-Attention-for-SNNs-via-Hadamard-Simplification``
(``models/spikingresformer.py``, ``models/SSA_*``, ``models/USSA_*``), whose equations each
block follows. Every block maps the residual stream ``X`` of shape
``[T, B, C, H, W]`` (real-valued, N = H*W tokens of D = C channels) to
``X + BN(Conv1x1_proj(...))``; ``S = LIF_in(X)`` is the spike input of every branch.

- ``ReferenceAttention``: ``attn = LIF((BN(W1 S))^T @ S)`` per head (an N x N map),
  ``out = LIF(BN(W2 S) @ attn)``; W1, W2 are 3x3 convs C->C as in the authors' DSSA code.
- ``SSA``: ``A = LIF(BN(Conv3x3 W1 S))``, ``V = LIF(BN(Conv3x3 W2 S))``, ``Out = proj(A ⊙ V)``.
  No heads, no scale, no Q K^T; the Hadamard product of two spike tensors is an AND.
- ``USSA``: ``Q = LIF(mean_HW(BN(Conv1x1 W1 S)))`` is a per-channel global gate ``[T, B, C, 1, 1]``
  broadcast over the N tokens: ``Out = proj(Q ⊙ V)``.

Communication model (paper Def. 4.2, the authors' ``compute_communication_complexity``): one
token per neuromorphic core; the reference moves T*N*(N-1)*D values between cores, SSA T*N*D
(A to the cores holding V), USSA T*D (one broadcast of Q). ``comm_source`` names the neuron whose
spikes are the values moved, and ``comm_fanout`` how many other cores receive each, so a
simulation can also count the spikes actually sent.
"""
from __future__ import annotations

from abc import ABCMeta, abstractmethod

import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.spiking.layers import activation, bn, conv

ATTENTION_KINDS = ("reference", "ssa", "ussa")


def communication_values(kind: str, T: int, N: int, D: int) -> int:
    """Values moved between cores per sample (the paper's Def. 4.2): T·N(N−1)·D, T·N·D or T·D."""
    if kind == "reference":
        return T * N * (N - 1) * D
    if kind == "ssa":
        return T * N * D
    if kind == "ussa":
        return T * D
    raise UsageError(f"unknown attention '{kind}'", hint=f"valid: {', '.join(ATTENTION_KINDS)}")


class _Attention(nn.Module, metaclass=ABCMeta):
    """``X + BN(proj(mix(*branches(LIF_in(X)))))``: ``branches`` holds the per-token convolutions,
    ``mix`` the token mixing each attention form defines (what the benchmark times on its own)."""

    kind: str
    comm_source: str  # the neuron whose output spikes travel between cores
    communication_formula: str  # values moved per sample (edgekit.spiking.communication)
    act_in: nn.Module
    bn1: nn.Module
    proj: nn.Module
    bn_proj: nn.Module

    @abstractmethod
    def branches(self, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The per-token convolutions of the input spikes."""

    @abstractmethod
    def mix(self, *branches: torch.Tensor) -> torch.Tensor:
        """The token mixing of this attention form."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, B, C, H, W]
        s = self.act_in(x)  # spikes
        return x + self.bn_proj(self.proj(self.mix(*self.branches(s))))

    @property
    def D(self) -> int:
        """Channels of the values moved between cores (A, Q, or S, whose width W1's output
        matches): read from the layers, so it follows a net whose channels were removed."""
        return self.bn1.num_features

    def comm_fanout(self, N: int) -> int:
        """How many other cores receive each value of ``comm_source`` (1: a point-to-point send
        or a single broadcast)."""
        return 1

    def communication(self, T: int, N: int) -> int:
        """Values moved between cores per sample: the hook edgekit's simulator calls."""
        return communication_values(self.kind, T, N, self.D)


class ReferenceAttention(_Attention):
    """The O(N^2 D) spiking self-attention the simplifications are measured against."""

    kind, comm_source, communication_formula = "reference", "act_in", "T·N·(N−1)·D"

    def __init__(self, dim: int, heads: int = 1, act: str = "lif") -> None:
        super().__init__()
        if dim % heads:
            raise UsageError(f"attention width {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.act_in = activation(act)
        self.w1, self.bn1 = conv(dim, dim, 3), bn(dim)
        self.w2, self.bn2 = conv(dim, dim, 3), bn(dim)
        self.act_attn = activation(act)
        self.act_out = activation(act)
        self.proj, self.bn_proj = conv(dim, dim, 1), bn(dim)

    def comm_fanout(self, N: int) -> int:
        return N - 1  # every token's S reaches the N - 1 cores of the other tokens

    def branches(self, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.bn1(self.w1(s)), self.bn2(self.w2(s)), s

    def mix(self, q: torch.Tensor, v: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        T, B, C, H, W = s.shape
        shape = (T, B, self.heads, C // self.heads, H * W)  # [T, B, heads, d, N]
        attn = self.act_attn(q.reshape(shape).transpose(-1, -2) @ s.reshape(shape))  # [.., N, N]
        return self.act_out((v.reshape(shape) @ attn).reshape(T, B, C, H, W))  # [T, B, C, H, W]


class SSA(_Attention):
    """Simplified Spiking Attention: the Hadamard product of two local spike maps, O(N D)."""

    kind, comm_source, communication_formula = "ssa", "act_a", "T·N·D"

    def __init__(self, dim: int, heads: int = 1, act: str = "lif") -> None:
        super().__init__()  # heads: accepted for a common signature; SSA has none
        self.act_in = activation(act)
        self.w1, self.bn1 = conv(dim, dim, 3), bn(dim)
        self.w2, self.bn2 = conv(dim, dim, 3), bn(dim)
        self.act_a = activation(act)
        self.act_v = activation(act)
        self.proj, self.bn_proj = conv(dim, dim, 1), bn(dim)

    def branches(self, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.bn1(self.w1(s)), self.bn2(self.w2(s))

    def mix(self, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.act_a(a) * self.act_v(v)  # A ⊙ V: an AND of two spike maps [T, B, C, H, W]


class USSA(_Attention):
    """Ultra-Simplified Spiking Attention: a global per-channel spike gate on the local V."""

    kind, comm_source, communication_formula = "ussa", "act_q", "T·D"

    def __init__(self, dim: int, heads: int = 1, act: str = "lif") -> None:
        super().__init__()
        self.act_in = activation(act)
        self.w1, self.bn1 = conv(dim, dim, 1), bn(dim)
        self.w2, self.bn2 = conv(dim, dim, 3), bn(dim)
        self.act_q = activation(act)
        self.act_v = activation(act)
        self.proj, self.bn_proj = conv(dim, dim, 1), bn(dim)

    def branches(self, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.bn1(self.w1(s)), self.bn2(self.w2(s))

    def mix(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q = self.act_q(q.mean(dim=(3, 4), keepdim=True))  # [T, B, C, 1, 1]: a global gate
        return q * self.act_v(v)  # Q broadcast over the N tokens, ⊙ V


ATTENTIONS: dict[str, type[_Attention]] = {"reference": ReferenceAttention, "ssa": SSA,
                                           "ussa": USSA}


def make_attention(kind: str, dim: int, heads: int = 1, act: str = "lif") -> _Attention:
    if kind not in ATTENTIONS:
        raise UsageError(f"unknown attention '{kind}'", hint=f"valid: {', '.join(ATTENTION_KINDS)}")
    return ATTENTIONS[kind](dim, heads, act)


def attention_blocks(model: nn.Module) -> list[tuple[str, _Attention]]:
    """Every attention block of a model, with its qualified name."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, _Attention)]
