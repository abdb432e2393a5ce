"""Grouped vector quantisation with EMA codebooks and noise-augmented training (ASTRA, §5).

ASTRA (arXiv 2505.19342) sends, per block, only code indices for each token instead of its
embedding: the D channels are split into G groups and each group is quantised against its own
codebook of K entries, so a token costs G * ceil(log2 K) bits instead of 32 * D.

The codebooks are not trained by gradients: they follow an exponential moving average of the
vectors assigned to each code (van den Oord et al. 2017, appendix; Razavi et al. 2019), with
Laplace smoothing of the code counts, and codes that fall out of use are re-seeded from the batch.
The encoder side receives the commitment loss ``||x - sg(q)||^2`` and the straight-through
gradient. NAVQ (noise-augmented VQ) adds Gaussian noise shaped like the quantisation residual to
the quantised embeddings during fine-tuning, so later layers learn to tolerate it.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from edgekit.errors import UsageError


class GroupedVQ(nn.Module):
    """``dim`` channels in ``groups`` groups, each with a ``codes``-entry codebook (buffers)."""

    def __init__(self, dim: int, groups: int, codes: int = 1024, decay: float = 0.99,
                 eps: float = 1e-5, dead_below: float = 0.03) -> None:
        super().__init__()
        if groups < 1 or dim % groups:
            raise UsageError(f"VQ groups={groups} must be a positive divisor of dim={dim}",
                             hint=f"divisors of {dim}: "
                                  f"{', '.join(str(g) for g in range(1, dim + 1) if dim % g == 0)}")
        if codes < 2:
            raise UsageError(f"VQ codes={codes} must be at least 2")
        if not 0.0 < decay < 1.0:
            raise UsageError(f"VQ decay={decay} must lie strictly between 0 and 1")
        self.dim, self.groups, self.codes = dim, groups, codes
        self.group_dim = dim // groups
        self.decay, self.eps, self.dead_below = decay, eps, dead_below
        self.register_buffer("codebook", torch.randn(groups, codes, self.group_dim))  # [G,K,d]
        self.register_buffer("ema_count", torch.ones(groups, codes))  # [G, K]
        self.register_buffer("ema_sum", self.codebook.clone())  # [G, K, d]
        # Seeded from the first training batch, so codes start where the data is.
        self.register_buffer("seeded", torch.zeros((), dtype=torch.bool))

    @property
    def bits_per_token(self) -> int:
        return self.groups * math.ceil(math.log2(self.codes))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[..., D] -> LongTensor [..., G]: the nearest code of each group (argmin of L2)."""
        lead = x.shape[:-1]
        xg = x.reshape(-1, self.groups, self.group_dim).transpose(0, 1)  # [G, N, d]
        # ||x - c||^2 = ||x||^2 - 2 x.c + ||c||^2; ||x||^2 does not change the argmin.
        dist = torch.baddbmm((self.codebook ** 2).sum(-1).unsqueeze(1), xg,
                             self.codebook.transpose(1, 2), alpha=-2)  # [G, N, K]
        return dist.argmin(-1).transpose(0, 1).reshape(*lead, self.groups)  # [..., G]

    def decode(self, idx: torch.Tensor) -> torch.Tensor:
        """LongTensor [..., G] -> [..., D]: the codes' vectors, groups concatenated."""
        offsets = torch.arange(self.groups, device=idx.device) * self.codes  # [G]
        flat = self.codebook.reshape(self.groups * self.codes, self.group_dim)  # [G*K, d]
        return flat[idx + offsets].reshape(*idx.shape[:-1], self.dim)  # [..., D]

    def forward(self, x: torch.Tensor, noise_scale: float = 0.0
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantise ``x`` [..., D]; returns (quantised [..., D], commitment loss).

        In training: the codebook takes one EMA step towards the batch, the output carries the
        straight-through gradient to ``x``, and with ``noise_scale`` = lambda > 0 NAVQ adds
        lambda * N(mu_g, sigma_g^2) per group, with mu_g and sigma_g the mean and standard
        deviation of the residual x - q over this batch (not tracked across batches).
        """
        if self.training and not bool(self.seeded):
            self._seed(x.detach())
        idx = self.encode(x.detach())
        q = self.decode(idx)
        commitment = (x - q).pow(2).mean()  # q is a buffer lookup: sg(q) already
        if not self.training:
            return q, commitment
        self._ema_update(x.detach(), idx)
        out = x + (q - x).detach()  # straight-through estimator
        if noise_scale > 0:
            out = out + noise_scale * self.residual_noise(x.detach(), q)
        return out, commitment

    def residual_noise(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Gaussian noise with the per-group mean and std of the residual x - q (NAVQ)."""
        res = (x - q).reshape(-1, self.groups, self.group_dim)  # [N, G, d]
        mean = res.mean(dim=(0, 2), keepdim=True)  # [1, G, 1]
        std = res.std(dim=(0, 2), keepdim=True, correction=0)  # [1, G, 1]
        return (mean + std * torch.randn_like(res)).reshape(x.shape)

    @torch.no_grad()
    def _seed(self, x: torch.Tensor) -> None:
        xg = x.reshape(-1, self.groups, self.group_dim)  # [N, G, d]
        pick = torch.randint(len(xg), (self.codes,), device=x.device)
        self.codebook.copy_(xg[pick].transpose(0, 1))  # [G, K, d]
        self.ema_sum.copy_(self.codebook)
        self.ema_count.fill_(1.0)
        self.seeded.fill_(True)

    @torch.no_grad()
    def _ema_update(self, x: torch.Tensor, idx: torch.Tensor) -> None:
        xg = x.reshape(-1, self.groups, self.group_dim)  # [N, G, d]
        flat = (idx.reshape(-1, self.groups)
                + torch.arange(self.groups, device=x.device) * self.codes).reshape(-1)  # [N*G]
        count = x.new_zeros(self.groups * self.codes).index_add_(
            0, flat, x.new_ones(flat.shape))  # [G*K]: vectors assigned to each code
        total = x.new_zeros(self.groups * self.codes, self.group_dim).index_add_(
            0, flat, xg.reshape(-1, self.group_dim))  # [G*K, d]: their sum
        self.ema_count.mul_(self.decay).add_(count.view(self.groups, self.codes),
                                             alpha=1 - self.decay)
        self.ema_sum.mul_(self.decay).add_(total.view_as(self.ema_sum), alpha=1 - self.decay)
        n = self.ema_count.sum(-1, keepdim=True)  # [G, 1]
        smoothed = (self.ema_count + self.eps) / (n + self.codes * self.eps) * n  # Laplace
        self.codebook.copy_(self.ema_sum / smoothed.unsqueeze(-1))
        self._reseed_dead(xg.transpose(0, 1))

    def _reseed_dead(self, xg: torch.Tensor) -> None:
        """Codes whose EMA count fell below ``dead_below`` restart at random batch vectors."""
        dead = self.ema_count < self.dead_below  # [G, K]
        if not bool(dead.any()):
            return
        pick = torch.randint(xg.shape[1], dead.shape, device=xg.device)  # [G, K]
        fresh = torch.gather(xg, 1, pick.unsqueeze(-1).expand(-1, -1, self.group_dim))
        self.codebook.copy_(torch.where(dead.unsqueeze(-1), fresh, self.codebook))
        self.ema_sum.copy_(torch.where(dead.unsqueeze(-1), fresh, self.ema_sum))
        self.ema_count.copy_(torch.where(dead, torch.ones_like(self.ema_count), self.ema_count))

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, groups={self.groups}, codes={self.codes}, "
                f"bits_per_token={self.bits_per_token}, decay={self.decay}")
