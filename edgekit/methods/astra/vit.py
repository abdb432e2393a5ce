"""ViT encoder with ASTRA blocks (arXiv 2505.19342): sequence-parallel attention over VQ tokens.

An ``AstraBlock`` is a pre-norm Transformer block that can run on a shard of the tokens:
queries come from the rank's local tokens, keys and values from its local tokens plus the
(decoded) non-local ones, and the MLP touches local tokens only. Each block owns the
``GroupedVQ`` codebook that compresses its input for the exchange. ``AstraViT.forward`` is the
ASTRA inference at ``config.partitions`` ranks in one graph (``run_partitioned``), so exporting
and profiling the registered model measures the ASTRA computation.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.errors import UnknownNameError, UsageError
from edgekit.methods.astra.partition import token_shards
from edgekit.methods.astra.vq import GroupedVQ

KeysValues = tuple[torch.Tensor, torch.Tensor]
RemoteKV = KeysValues | Callable[[], KeysValues]  # a callable: keys/values still on the way
MODES = ("single", "sp", "astra")  # of ``run_partitioned``


class Attention(nn.Module):
    """Multi-head self-attention whose keys/values may include tokens held elsewhere."""

    def __init__(self, dim: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        if heads < 1 or dim % heads:
            raise UsageError(f"heads={heads} must be a positive divisor of dim={dim}")
        self.dim, self.heads, self.causal = dim, heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, remote: torch.Tensor | None = None,
                remote_kv: RemoteKV | None = None) -> torch.Tensor:
        """x [B, n, D] (queries), remote [B, m, D] extra keys/values -> [B, n, D].

        ``remote_kv`` gives the remote tokens' keys and values ([B, m, D] each) directly, in
        place of ``remote``; as a callable it is called only after x's own projections, so an
        exchange still in flight overlaps them. Causal attention takes the remote tokens to be
        the ones *before* x (prefill on later ranks).
        """
        B, n, D = x.shape
        q, k, v = self.qkv(x).split(D, -1)  # 3 x [B, n, D]
        mask = None
        if callable(remote_kv):
            remote_kv = remote_kv()
        if remote_kv is None and remote is not None and remote.shape[1]:
            remote_kv = self.keys_values(remote)
        if remote_kv is not None:
            k, v = torch.cat([k, remote_kv[0]], 1), torch.cat([v, remote_kv[1]], 1)  # [B, n+m, D]
        m = k.shape[1] - n
        if self.causal:
            ones = torch.ones(n, n, dtype=torch.bool, device=x.device)
            mask = torch.cat([ones.tril(), ones.new_ones(n, m)], 1)  # [n, n+m]: local, remote
        q, k, v = (t.reshape(B, -1, self.heads, D // self.heads).transpose(1, 2)
                   for t in (q, k, v))  # [B, h, tokens, D/h]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, h, n, D/h]
        return self.proj(out.transpose(1, 2).reshape(B, n, D))

    def keys_values(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values only ([..., D] each): the remote rows' queries are never needed."""
        D = self.dim
        return F.linear(tokens, self.qkv.weight[D:], self.qkv.bias[D:]).split(D, -1)


class AstraBlock(nn.Module):
    """Pre-norm Transformer block plus the VQ codebook (``None`` when groups=0) of its input."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0, groups: int = 0,
                 codes: int = 1024, decay: float = 0.99, causal: bool = False) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.vq = GroupedVQ(dim, groups, codes, decay) if groups else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Single device: full attention over x [B, T, D]."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def forward_partitioned(self, local: torch.Tensor, remote: torch.Tensor | None = None,
                            remote_kv: RemoteKV | None = None) -> torch.Tensor:
        """One rank: local [B, n, D] exact tokens, remote [B, m, D] the non-local block inputs
        (decoded, maybe quantised), or their keys and values ``remote_kv`` (as in
        ``Attention.forward``) -> new local [B, n, D]."""
        normed = None if remote is None else self.norm1(remote)
        x = local + self.attn(self.norm1(local), normed, remote_kv)
        return x + self.mlp(self.norm2(x))

    def code_keys_values(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of every code, [K, D] each, for a one-group codebook.

        With G = 1 a decoded remote token *is* a code vector, so its keys and values are rows of
        this table: a lookup replaces the remote tokens' LayerNorm and K/V projection, exactly.
        (With G > 1 the LayerNorm mixes the groups, so no such table exists.)
        """
        if self.vq is None or self.vq.groups != 1:
            raise UsageError("code keys/values need a one-group VQ codebook (groups=1)")
        return self.attn.keys_values(self.norm1(self.vq.codebook[0]))


@dataclass(frozen=True)
class AstraConfig:
    image_size: int = 8  # square input side, pixels
    patch_size: int = 2  # square patch side; tokens = (image_size / patch_size)^2
    in_chans: int = 1
    num_classes: int = 10
    dim: int = 64  # D, token width
    depth: int = 4  # number of AstraBlocks
    heads: int = 4
    mlp_ratio: float = 4.0
    groups: int = 16  # G, VQ groups per token; 0 = no VQ (plain ViT)
    codes: int = 1024  # K, entries per group codebook (10 bits each)
    decay: float = 0.99  # EMA decay of the codebooks
    partitions: int = 2  # N, ranks that forward() simulates; 1 = unpartitioned
    noise_scale: float = 1.0  # NAVQ lambda during ASTRA fine-tuning (0 = plain VQ)
    beta: float = 2e-4  # commitment loss weight during fine-tuning
    finetune_epochs: int = 12  # ASTRA fine-tuning epochs after plain pre-training

    @property
    def num_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class AstraViT(nn.Module):
    """ViT (class token, learned positions) whose forward is ASTRA at ``config.partitions``."""

    def __init__(self, **config: float | int) -> None:
        super().__init__()
        cfg = AstraConfig(**config)
        if cfg.patch_size < 1 or cfg.image_size % cfg.patch_size:
            raise UsageError(f"patch_size={cfg.patch_size} must divide image_size={cfg.image_size}")
        token_shards(cfg.num_tokens, cfg.partitions)  # fail early on a bad rank count
        self.config = cfg
        D = cfg.dim
        self.patch_embed = nn.Conv2d(cfg.in_chans, D, cfg.patch_size, cfg.patch_size)
        self.pos_embed = nn.Parameter(torch.randn(1, cfg.num_tokens, D) * 0.02)
        self.cls_token = nn.Parameter(torch.randn(1, 1, D) * 0.02)  # holds its position too
        self.blocks = nn.ModuleList(
            AstraBlock(D, cfg.heads, cfg.mlp_ratio, cfg.groups, cfg.codes, cfg.decay)
            for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(D)
        self.classifier = nn.Linear(D, cfg.num_classes)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, C, H, W] -> patch tokens + positions [B, T, D] (no class token)."""
        cfg = self.config
        expected = (cfg.in_chans, cfg.image_size, cfg.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            shape = ", ".join(map(str, expected))
            raise UsageError(f"AstraViT expects images of shape [B, {shape}], "
                             f"got {list(images.shape)}")
        x = self.patch_embed(images)  # [B, D, H/p, W/p]
        return x.flatten(2).transpose(1, 2) + self.pos_embed  # [B, T, D]

    def head(self, cls_out: torch.Tensor) -> torch.Tensor:
        """Final norm and classifier: [B, D] -> logits [B, classes]."""
        return self.classifier(self.norm(cls_out))

    @property
    def partitioned(self) -> bool:
        return self.config.partitions > 1 and self.config.groups > 0

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """ASTRA inference at ``config.partitions`` ranks; plain ViT if unpartitioned or no VQ."""
        if not self.partitioned:
            return run_partitioned(self, images, 1, "single").logits
        noise = self.config.noise_scale if self.training else 0.0
        return run_partitioned(self, images, self.config.partitions, "astra", noise).logits



@dataclass(frozen=True)
class PartitionedOutput:
    logits: torch.Tensor  # [B, classes]
    commitment: torch.Tensor  # mean commitment loss over the blocks (0 unless mode="astra")


def run_partitioned(model: AstraViT, images: torch.Tensor, world_size: int, mode: str,
                    noise_scale: float = 0.0) -> PartitionedOutput:
    """ASTRA/SP/single inference (or training, in train mode) with logits and commitment loss:
    the multi-device computation in one process, the oracle for the torch.distributed runtime.

    N ranks each hold the full weights and a contiguous shard of the T patch tokens
    (``token_shards``), plus their own copy of the class token. Per block, every rank sends the
    block *input* of its patch tokens (the residual stream before ``norm1``) to the others:

    - ``"sp"``: full precision, so every rank attends over exactly the tokens the single device
      sees; the result equals ``"single"`` (the class-token copies stay identical).
    - ``"astra"``: as code indices of that block's own ``GroupedVQ``; the receivers decode them,
      so a rank attends over its full-precision local tokens (with its class-token copy) plus
      the *quantised* non-local patch tokens. Class-token copies are never sent. Only the keys
      and values of non-local tokens are affected; queries, residuals and the MLP stay local
      and exact.

    After the last block the N class-token outputs are averaged before the head (distributed
    class token: each copy carries an independent quantisation error, the mean shrinks it).
    ``noise_scale`` is the NAVQ lambda; it only acts in training mode.
    """
    if mode not in MODES:
        raise UnknownNameError("partition mode", mode, MODES)
    tokens = model.embed(images)  # [B, T, D]
    zero = tokens.new_zeros(())
    if mode == "single":
        x = torch.cat([model.cls_token.expand(len(tokens), -1, -1), tokens], 1)  # [B, 1+T, D]
        for block in model.blocks:
            x = block(x)
        return PartitionedOutput(model.head(x[:, 0]), zero)
    if mode == "astra" and any(b.vq is None for b in model.blocks):
        raise UsageError("mode 'astra' needs a model with VQ codebooks (groups > 0)")
    shards = token_shards(model.config.num_tokens, world_size)  # static, for tracing
    cls = [model.cls_token.expand(len(tokens), -1, -1)] * world_size  # N x [B, 1, D]
    commitment = zero
    for block in model.blocks:
        sent = tokens
        if mode == "astra":
            sent, loss = block.vq(tokens, noise_scale)  # [B, T, D]: what the receivers decode
            commitment = commitment + loss / len(model.blocks)
        outs = [block.forward_partitioned(torch.cat([cls[r], tokens[:, s]], 1),
                                          torch.cat([sent[:, :s.start], sent[:, s.stop:]], 1))
                for r, s in enumerate(shards)]  # N x [B, 1+n_r, D]
        cls = [o[:, :1] for o in outs]
        tokens = torch.cat([o[:, 1:] for o in outs], 1)  # [B, T, D]
    pooled = torch.stack(cls).mean(0)[:, 0]  # [B, D]: distributed class token
    return PartitionedOutput(model.head(pooled), commitment)


def partitioned_forward(model: AstraViT, images: torch.Tensor, world_size: int,
                        mode: str) -> torch.Tensor:
    """Logits [B, classes] of ``mode`` in {"single", "sp", "astra"} at ``world_size`` ranks."""
    return run_partitioned(model, images, world_size, mode).logits
