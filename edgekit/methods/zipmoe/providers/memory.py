"""Every expert decoded at start-up and held in memory: the upper bound the others are held to."""
from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator

from edgekit.methods.zipmoe.model import ExpertWeights
from edgekit.methods.zipmoe.providers.stats import ExpertStats, Key
from edgekit.methods.zipmoe.store import Store


class MemoryExperts:
    """Every expert decoded at start-up and held in memory."""

    mode = "memory"

    def __init__(self, store: Store, workers: int = 2) -> None:
        self.stats = ExpertStats()
        self.experts: dict[Key, ExpertWeights] = {}
        with cf.ThreadPoolExecutor(max(1, workers)) as pool:
            for layer in store.config.moe_layers:
                for expert in range(store.config.num_experts):
                    names = [e.name for e in store.expert_entries(layer, expert)]
                    self.experts[layer, expert] = ExpertWeights(
                        *(store.load_tensor(n, pool) for n in names))
        self.resident_bytes = store.total_expert_bytes

    def fetch(self, layer: int, tokens: dict[int, int]) -> Iterator[tuple[int, ExpertWeights]]:
        for expert in sorted(tokens):
            self.stats.activations += 1
            self.stats.full_hits += 1
            yield expert, self.experts[layer, expert]

    def describe(self) -> dict[str, object]:
        return {"resident_expert_bytes": self.resident_bytes}

    def close(self) -> None:
        self.experts.clear()
