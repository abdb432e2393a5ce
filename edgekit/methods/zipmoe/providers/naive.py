"""Naive offload: bf16 experts read on demand, one after another, into one LRU cache of the byte
budget; compute waits for each read (HF Accelerate-style offload)."""
from __future__ import annotations

import concurrent.futures as cf
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from edgekit.methods.zipmoe.cache import Policy, Pool
from edgekit.methods.zipmoe.model import ExpertWeights
from edgekit.methods.zipmoe.providers.stats import ExpertStats, Key
from edgekit.methods.zipmoe.store import Store, align_up
from edgekit.storage import StorageReader


class NaiveOffload:
    """bf16 experts read on demand into an LRU cache of ``budget_bytes`` (all layers together).

    The bf16 experts live in a plain file written from the store at start-up (each expert's three
    matrices contiguous, 4 KiB aligned) beside the store, so both read from the same device."""

    mode = "naive"

    def __init__(self, store: Store, budget_bytes: int,
                 reader_factory: Callable[[Path], StorageReader], workers: int = 2,
                 scratch: str | Path | None = None) -> None:
        self.store = store
        self.stats = ExpertStats()
        self.expert_bytes = store.expert_bytes
        slots = int(budget_bytes // self.expert_bytes)
        self.lru = Pool("lru", slots, self.expert_bytes, Policy("lru"))
        self._dir = Path(tempfile.mkdtemp(prefix=".zipmoe-naive-", dir=_scratch_dir(store,
                                                                                    scratch)))
        self.path = self._dir / "experts.bf16"
        self.index: dict[Key, tuple[int, int]] = {}
        self._write(workers)
        self.reader: StorageReader = reader_factory(self.path)

    def _write(self, workers: int) -> None:
        offset = 0
        with open(self.path, "wb") as handle, cf.ThreadPoolExecutor(max(1, workers)) as pool:
            for layer in self.store.config.moe_layers:
                for expert in range(self.store.config.num_experts):
                    parts = [self.store.load_tensor(e.name, pool).contiguous().view(torch.uint8)
                             .numpy().tobytes() for e in self.store.expert_entries(layer, expert)]
                    data = b"".join(parts)
                    handle.write(data + b"\0" * (align_up(len(data)) - len(data)))
                    self.index[layer, expert] = (offset, len(data))
                    offset += align_up(len(data))
            handle.flush()
            os.fsync(handle.fileno())

    def fetch(self, layer: int, tokens: dict[int, int]) -> Iterator[tuple[int, ExpertWeights]]:
        entries = None
        for expert in sorted(tokens):
            key = (layer, expert)
            self.stats.activations += 1
            if key in self.lru:
                self.stats.full_hits += 1
                yield expert, self.lru.hit(key, tokens[expert])
                continue
            self.stats.misses += 1
            t0 = time.perf_counter()
            offset, size = self.index[key]
            data = self.reader.read(offset, size)
            entries = entries or self.store.expert_entries(layer, 0)
            weights, start = [], 0
            for entry in entries:
                weights.append(_tensor_from_bytes(data[start:start + entry.nbytes], entry.shape,
                                                  entry.dtype))
                start += entry.nbytes
            ew = ExpertWeights(*weights)
            self.stats.wait_s += time.perf_counter() - t0
            self.lru.admit(key, ew, tokens[expert])
            yield expert, ew

    def describe(self) -> dict[str, object]:
        return {"lru_slots": self.lru.slots, "expert_bytes": self.expert_bytes,
                "bytes_read": self.reader.stats.bytes, "reads": self.reader.stats.reads}

    def close(self) -> None:
        self.reader.close()
        for child in self._dir.iterdir():
            child.unlink()
        self._dir.rmdir()


def _tensor_from_bytes(data: bytes, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(
        getattr(torch, dtype)).reshape(shape)


def _scratch_dir(store: Store, scratch: str | Path | None) -> str | None:
    if scratch is not None:
        return str(scratch)
    parent = store.folder.resolve().parent
    return str(parent) if os.access(parent, os.W_OK) else None
