"""Expert cache pools, admission by rank and eviction policies (ZipMoE, arXiv 2601.21198).

Each MoE layer has two pools [code: the authors' ``csrc/memory/cache.*``]:

    full pool    decoded bf16 experts: a hit costs nothing
    SM pool      an expert's sign-mantissa bytes only (half the size): a hit still reads and
                 decodes the compressed exponents, but skips the larger raw read

Admission by rank: after adding the current tokens, an expert's rank is the number of experts of
its layer with a strictly larger cumulative token count. rank < T_full -> full pool; rank <
T_full + T_sm -> SM pool; else used once and dropped, each with the authors' fallbacks to a pool
that still has a free slot. T_full and T_sm are the pools' slot counts.

Eviction (policy ``zipmoe``): the unlocked slot with the smallest token count, the count starting
at 1 on admission and growing by the tokens of every hit (token-weighted LFU). ``lru``, ``lfu``
(hits counted once each) and ``fifo`` are there for comparison. Slots whose expert the current
layer uses are locked. An expert promoted to the full pool gives up its SM slot [ours: the pools
are exclusive, so the budget holds more distinct experts].
"""
from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.errors import UnknownNameError

POLICIES = ("zipmoe", "lru", "lfu", "fifo")
FULL, SM, EVICT = "full", "sm", "evict"


class Policy:
    """Eviction order of one pool. Ties go to the key admitted first."""

    def __init__(self, name: str) -> None:
        if name not in POLICIES:
            raise UnknownNameError("cache policy", name, POLICIES)
        self.name = name
        self._score: dict[Hashable, float] = {}
        self._admitted: dict[Hashable, int] = {}
        self._clock = itertools.count()

    def on_admit(self, key: Hashable, tokens: int) -> None:
        tick = next(self._clock)
        self._admitted[key] = tick
        self._score[key] = tick if self.name in ("lru", "fifo") else 1

    def on_hit(self, key: Hashable, tokens: int) -> None:
        if self.name == "zipmoe":
            self._score[key] += tokens
        elif self.name == "lfu":
            self._score[key] += 1
        elif self.name == "lru":
            self._score[key] = next(self._clock)

    def on_remove(self, key: Hashable) -> None:
        self._score.pop(key, None)
        self._admitted.pop(key, None)

    def victim(self, candidates: list[Hashable]) -> Hashable | None:
        if not candidates:
            return None
        return min(candidates, key=lambda k: (self._score[k], self._admitted[k]))


@dataclass
class Pool:
    """A fixed number of equal slots holding values by key."""

    name: str
    slots: int
    slot_bytes: int
    policy: Policy
    items: dict[Hashable, Any] = field(default_factory=dict)
    locked: set[Hashable] = field(default_factory=set)
    evictions: int = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self.items

    def has_free(self) -> bool:
        return len(self.items) < self.slots

    def can_admit(self) -> bool:
        return self.has_free() or any(k not in self.locked for k in self.items)

    def peek(self, key: Hashable) -> Any:
        """The value held for ``key`` (None if absent) without counting a hit."""
        return self.items.get(key)

    def hit(self, key: Hashable, tokens: int) -> Any:
        self.policy.on_hit(key, tokens)
        return self.items[key]

    def admit(self, key: Hashable, value: Any, tokens: int) -> bool:
        """Place ``value``; evict the policy's victim when full. False when nothing can go."""
        if key in self.items:
            self.items[key] = value
            return True
        if self.slots <= 0:
            return False
        if not self.has_free():
            victim = self.policy.victim([k for k in self.items if k not in self.locked])
            if victim is None:
                return False
            self.remove(victim)
            self.evictions += 1
        self.items[key] = value
        self.policy.on_admit(key, tokens)
        return True

    def remove(self, key: Hashable) -> None:
        if key in self.items:
            del self.items[key]
            self.policy.on_remove(key)
            self.locked.discard(key)

    @property
    def used_bytes(self) -> int:
        return len(self.items) * self.slot_bytes


class ZipMoECache:
    """Per-layer full and SM pools with rank-based admission."""

    def __init__(self, layers: list[int], num_experts: int, full_slots: int, sm_slots: int,
                 full_bytes: int, sm_bytes: int, policy: str = "zipmoe",
                 margin: float = 0.0) -> None:
        self.num_experts = num_experts
        self.full = {layer: Pool("full", full_slots, full_bytes, Policy(policy))
                     for layer in layers}
        self.sm = {layer: Pool("sm", sm_slots, sm_bytes, Policy(policy)) for layer in layers}
        self.counts = {layer: np.zeros(num_experts, dtype=np.int64) for layer in layers}
        self.t_full = full_slots + margin * num_experts
        self.t_sm = self.t_full + sm_slots + margin * num_experts

    def record(self, layer: int, tokens: dict[int, int]) -> None:
        """Add this step's token counts (before admission decisions, as the authors do)."""
        for expert, n in tokens.items():
            self.counts[layer][expert] += n

    def rank(self, layer: int, expert: int) -> int:
        row = self.counts[layer]
        return int((row > row[expert]).sum())

    def decide(self, layer: int, expert: int) -> str:
        """FULL, SM or EVICT for an expert that is not in the full pool.

        The authors' order: the band's own pool if it has a free slot, else the other pool if it
        has one, else the band's pool by eviction (EVICT for the lowest band). EVICT leaves an
        existing SM slot alone; FULL or SM are downgraded when every slot is locked."""
        pools = {FULL: self.full[layer], SM: self.sm[layer]}
        in_sm = expert in pools[SM]
        rank = self.rank(layer, expert)
        if rank < self.t_full:
            first, second, last = FULL, SM, FULL
        elif rank < self.t_sm:
            first, second, last = SM, FULL, SM
        else:
            first, second, last = SM, FULL, EVICT
        for choice in (first, second):
            if pools[choice].has_free():
                return choice
        if last == EVICT or (last == SM and in_sm) or pools[last].can_admit():
            return last
        return SM if in_sm else EVICT

    @property
    def used_bytes(self) -> int:
        return sum(p.used_bytes for p in self.full.values()) + \
            sum(p.used_bytes for p in self.sm.values())

    @property
    def capacity_bytes(self) -> int:
        return sum(p.slots * p.slot_bytes for p in self.full.values()) + \
            sum(p.slots * p.slot_bytes for p in self.sm.values())
