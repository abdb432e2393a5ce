"""Block parallelism (DeTransformer, Wei et al., DATE 2024): the paper's BP baselines.

Our reading of the ASTRA paper's "BP+AllGather" and "BP+SP" (its baselines come from
DeTransformer's block parallelism, which restructures the model):

* The depth is cut into ``Nb`` BP blocks. In each, all layers but the last are *decoupled*:
  each rank runs its own narrow layer (width D/N, H/N heads, the same MLP ratio) on its own
  1/N slice of the feature channels, all tokens, with no communication at all.
* The last layer of each BP block is an original full-width layer (the model's own block at that
  depth). Before it, the ranks all-gather their feature slices (fp32, [B, 1+T, D/N] each).
  - ``bp-allgather``: every rank then runs the full layer redundantly on all tokens and keeps
    its own feature slice for the next BP block.
  - ``bp-sp``: the full layer runs sequence parallel (each rank computes its 1/N of the tokens
    with keys/values over all of them), then an all-to-all turns the token split back into the
    feature split for the next decoupled layers.

The decoupled layers are a different (narrower) model than the original; it would need training
to be accurate, so these modes are compared for latency only. Their weights are seeded like the
model's. ``BlockParallelViT.reference`` is the same computation in one process, the oracle.
"""
from __future__ import annotations

import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.methods.astra import AstraBlock, AstraViT, token_shards
from edgekit.methods.astra.runtime.collectives import Comm
from edgekit.methods.astra.runtime.modes import Mode

DEFAULT_BP_BLOCKS = 4  # Nb: the ViT depth of 12 gives 3 layers per BP block (2 decoupled + 1)


class BlockParallelViT(nn.Module):
    """The DeTransformer restructuring of an AstraViT for ``world_size`` ranks and ``bp_blocks``.

    ``narrow[k][r]`` holds rank r's decoupled layers of BP block k; ``full[k]`` is the model's own
    block at the end of BP block k.
    """

    def __init__(self, model: AstraViT, world_size: int, bp_blocks: int = DEFAULT_BP_BLOCKS,
                 seed: int = 0) -> None:
        super().__init__()
        cfg = model.config
        if bp_blocks < 1 or cfg.depth % bp_blocks:
            raise UsageError(f"--bp-blocks {bp_blocks} must divide the depth {cfg.depth}")
        if cfg.dim % world_size or cfg.heads % world_size:
            raise UsageError(f"block parallel needs dim ({cfg.dim}) and heads ({cfg.heads}) "
                             f"divisible by the world size {world_size}")
        self.model, self.world_size, self.bp_blocks = model, world_size, bp_blocks
        per_block = cfg.depth // bp_blocks
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed + 1)
        self.narrow = nn.ModuleList(
            nn.ModuleList(nn.Sequential(*(AstraBlock(cfg.dim // world_size,
                                                     cfg.heads // world_size, cfg.mlp_ratio)
                                          for _ in range(per_block - 1)))
                          for _ in range(world_size))
            for _ in range(bp_blocks))
        torch.random.set_rng_state(generator_state)
        self.full = [model.blocks[(k + 1) * per_block - 1] for k in range(bp_blocks)]
        self.eval()

    def feature_slice(self, rank: int) -> slice:
        width = self.model.config.dim // self.world_size
        return slice(rank * width, (rank + 1) * width)

    def reference(self, tokens: torch.Tensor) -> torch.Tensor:
        """All ranks' work in one process: patch tokens [B, T, D] -> logits [B, classes]."""
        x = torch.cat([self.model.cls_token.expand(len(tokens), -1, -1), tokens], 1)
        for k in range(self.bp_blocks):
            x = torch.cat([self.narrow[k][r](x[..., self.feature_slice(r)])
                           for r in range(self.world_size)], -1)  # [B, 1+T, D]
            x = self.full[k](x)
        return self.model.head(x[:, 0])


class _BlockParallel(Mode):
    def __init__(self, model: AstraViT, comm: Comm, bp_blocks: int = DEFAULT_BP_BLOCKS,
                 seed: int = 0) -> None:
        super().__init__(model, comm)
        self.bp = BlockParallelViT(model, self.world_size, bp_blocks, seed)

    def gather_features(self, h: torch.Tensor) -> torch.Tensor:
        """Feature slices [B, 1+T, D/N] from every rank -> full activations [B, 1+T, D]."""
        parts = self.comm.all_gather(h[None], [1] * self.world_size)  # N x [1, B, 1+T, D/N]
        return torch.cat([p[0] for p in parts], -1)


class BlockParallelAllGather(_BlockParallel):
    """BP+AllGather: all-gather the feature slices, run the full layer redundantly everywhere."""

    name = "bp-allgather"

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mine = self.bp.feature_slice(self.rank)
        h = self.with_cls(tokens)[..., mine]  # [B, 1+T, D/N]
        for k in range(self.bp.bp_blocks):
            x = self.bp.full[k](self.gather_features(self.bp.narrow[k][self.rank](h)))
            h = x[..., mine]
        return self.model.head(x[:, 0])


class BlockParallelSP(_BlockParallel):
    """BP+SP: all-gather the feature slices, run the full layer sequence parallel, then an
    all-to-all from the token split back to the feature split."""

    name = "bp-sp"

    def forward(self, tokens: torch.Tensor) -> torch.Tensor | None:
        mine = self.bp.feature_slice(self.rank)
        h = self.with_cls(tokens)[..., mine]  # [B, 1+T, D/N]
        shards = token_shards(h.shape[1], self.world_size)  # the class token is on rank 0
        rows = shards[self.rank]
        for k in range(self.bp.bp_blocks):
            x = self.gather_features(self.bp.narrow[k][self.rank](h))  # [B, 1+T, D]
            out = self.bp.full[k].forward_partitioned(
                x[:, rows], torch.cat([x[:, :rows.start], x[:, rows.stop:]], 1))  # [B, n, D]
            if k < self.bp.bp_blocks - 1:
                h = self._to_features(out, shards)
        return self.model.head(out[:, 0]) if self.rank == 0 else None

    def _to_features(self, out: torch.Tensor, shards: list[slice]) -> torch.Tensor:
        """Token split [B, n_r, D] -> feature split [B, 1+T, D/N] (all-to-all, padded to the
        largest shard; only real rows are counted as sent)."""
        longest = max(s.stop - s.start for s in shards)
        pad = out.new_zeros(len(out), longest - out.shape[1], out.shape[2])
        padded = torch.cat([out, pad], 1)  # [B, longest, D]
        chunks = [padded[..., self.bp.feature_slice(p)].contiguous()
                  for p in range(self.world_size)]
        sent = [out.shape[0] * out.shape[1] * c.shape[2] * c.element_size() for c in chunks]
        received = self.comm.all_to_all(chunks, sent)
        return torch.cat([r[:, :s.stop - s.start]
                          for r, s in zip(received, shards, strict=False)], 1)
