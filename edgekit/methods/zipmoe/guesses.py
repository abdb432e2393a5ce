"""How often the lookahead predictor's guesses prove right, per layer and rank [ours].

The engine prefetches a rank of the guess for a layer only while that rank has been right often
enough there. The lookahead's precision differs far more between layers than between ranks: on
the trained benchmark model (585 decode steps, ``benchmarks/README.md``) the third guess was
right 30 % of the time for layer 1, whose input the layer before changes most, and 78 % for
layer 2; judged over all layers at once (48 %), neither was prefetched.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

# A (layer, rank) is prefetched until it has been tried this many times, then only while its
# share of right guesses reaches the gate.
RANK_WARMUP = 16


class GuessRecord:
    def __init__(self, layers: Iterable[int], top_k: int) -> None:
        self.top_k = top_k
        self.tries = {layer: [0] * top_k for layer in layers}
        self.right = {layer: [0] * top_k for layer in self.tries}

    def record(self, layer: int, guess: Sequence[int], routed: Iterable[int]) -> None:
        """One token's guess for ``layer``, most likely first, against what it routed to."""
        routed = set(routed)
        tries, right = self.tries[layer], self.right[layer]
        for rank, expert in enumerate(guess[:self.top_k]):
            tries[rank] += 1
            right[rank] += expert in routed

    def pays(self, layer: int, rank: int, gate: float) -> bool:
        """Whether guesses of this rank for this layer are right often enough to prefetch (a
        rank beyond ``top_k`` is judged as the last one)."""
        rank = min(rank, self.top_k - 1)
        tries = self.tries[layer][rank]
        return tries < RANK_WARMUP or self.right[layer][rank] >= gate * tries

    def by_rank(self) -> list[float | None]:
        """Share of right guesses per rank, over all layers."""
        return [_share(sum(self.right[x][r] for x in self.right),
                       sum(self.tries[x][r] for x in self.tries)) for r in range(self.top_k)]

    def by_layer(self) -> dict[str, list[float | None]]:
        return {str(layer): [_share(r, t) for r, t in zip(self.right[layer], tries, strict=True)]
                for layer, tries in self.tries.items()}


def _share(right: int, tries: int) -> float | None:
    return right / tries if tries else None
