"""Mamba-style selective state-space scan in plain PyTorch, two coupled streams at once.

Selective SSM (S6; Gu & Dao, "Mamba", arXiv:2312.00752, Algorithm 2): per channel e and state n,

    h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t x_t,      y_t = C_t · h_t + D x_t,

with Δ_t = softplus(W_Δ x_t + b), B_t = W_B x_t, C_t = W_C x_t input-dependent ("selective") and
A = -exp(A_log) diagonal. The recurrence is an explicit loop over time: it costs O(L) and exports
to ONNX (the loop is unrolled at a fixed length), where mamba-ssm's fused CUDA kernel neither runs
on a CPU nor exports. ``mamba_ssm`` is not needed; on a GPU a user may swap in its
``selective_scan_fn`` for the single-stream case, but the coupling below is outside that kernel.

Cross-stream state coupling [ours, methods.md §6]: the input of each stream at step t receives a
learned projection of the other stream's output at t-1, x̃ᵃ_t = xᵃ_t + Kᵃ yᵖ_{t-1} (and the
converse). K starts at zero, so training starts from two independent streams.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class SelectiveSSM(nn.Module):
    """One stream's projections (in, causal depthwise conv, x -> Δ,B,C, out) and A, D."""

    def __init__(self, d_model: int, d_state: int = 16, expand: int = 2, d_conv: int = 4,
                 dt_rank: int | None = None) -> None:
        super().__init__()
        e = expand * d_model
        self.d_inner, self.d_state = e, d_state
        self.dt_rank = dt_rank or math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * e, bias=False)
        self.conv = nn.Conv1d(e, e, d_conv, groups=e, padding=d_conv - 1)
        self.x_proj = nn.Linear(e, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, e)
        dt = torch.exp(torch.rand(e) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        with torch.no_grad():  # Mamba's init: Δ in [1e-3, 0.1] through the inverse softplus
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1).float()).repeat(e, 1))
        self.D = nn.Parameter(torch.ones(e))
        self.out_proj = nn.Linear(e, d_model, bias=False)

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(B, L, d) -> u, z, Δ (B, L, E); B, C (B, L, N): everything the scan needs but h."""
        seq = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (B, L, E) each
        u = F.silu(self.conv(u.transpose(1, 2))[..., :seq].transpose(1, 2))  # causal conv
        dt, b, c = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(self.dt_proj(dt))  # (B, L, E)
        return u, z, dt, b, c

    def A(self) -> torch.Tensor:
        return -torch.exp(self.A_log)  # (E, N)


def dual_selective_scan(a: tuple[torch.Tensor, ...], p: tuple[torch.Tensor, ...],
                        ssm_a: SelectiveSSM, ssm_p: SelectiveSSM,
                        k_a: nn.Linear, k_p: nn.Linear,
                        h_a: torch.Tensor, h_p: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Scan both streams over time with coupling; returns y_a, y_p (B, L, E) and final states.

    ``a``/``p`` are the ``prepare`` outputs (u, z, Δ, B, C); ``h_*`` the initial states (B, E, N).
    """
    u_a, _, dt_a, b_a, c_a = a
    u_p, _, dt_p, b_p, c_p = p
    decay_a = torch.exp(dt_a.unsqueeze(-1) * ssm_a.A())  # (B, L, E, N)
    decay_p = torch.exp(dt_p.unsqueeze(-1) * ssm_p.A())
    y_a_prev = torch.zeros_like(u_a[:, 0])  # (B, E)
    y_p_prev = torch.zeros_like(u_p[:, 0])
    ys_a, ys_p = [], []
    for t in range(u_a.shape[1]):
        x_a = u_a[:, t] + k_a(y_p_prev)  # (B, E): coupling from the other stream's output
        x_p = u_p[:, t] + k_p(y_a_prev)
        h_a = decay_a[:, t] * h_a + (dt_a[:, t] * x_a).unsqueeze(-1) * b_a[:, t].unsqueeze(1)
        h_p = decay_p[:, t] * h_p + (dt_p[:, t] * x_p).unsqueeze(-1) * b_p[:, t].unsqueeze(1)
        y_a_prev = (h_a * c_a[:, t].unsqueeze(1)).sum(-1) + ssm_a.D * x_a  # (B, E)
        y_p_prev = (h_p * c_p[:, t].unsqueeze(1)).sum(-1) + ssm_p.D * x_p
        ys_a.append(y_a_prev)
        ys_p.append(y_p_prev)
    return torch.stack(ys_a, 1), torch.stack(ys_p, 1), h_a, h_p


def reference_scan(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, b: torch.Tensor,
                   c: torch.Tensor, D: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Single-stream scan by the closed form h_t = Σ_s (Π_{r=s+1..t} exp(Δ_r A)) Δ_s B_s x_s + ...;
    O(L²), for tests only: checks the loop against an independent formula."""
    seq = u.shape[1]
    log_decay = dt.unsqueeze(-1) * A  # (B, L, E, N)
    cum = torch.cumsum(log_decay, dim=1)
    ys = []
    for t in range(seq):
        # state at t: decayed h0 plus every earlier input decayed to t
        carry = torch.exp(cum[:, t]) * h
        inputs = (dt[:, :t + 1] * u[:, :t + 1]).unsqueeze(-1) * b[:, :t + 1].unsqueeze(2)
        weights = torch.exp(cum[:, t:t + 1] - cum[:, :t + 1])
        h_t = carry + (weights * inputs).sum(1)
        ys.append((h_t * c[:, t].unsqueeze(1)).sum(-1) + D * u[:, t])
    return torch.stack(ys, 1)
