"""The serving engine: generate tokens from a store, and compare ZipMoE with its baselines.

``Engine`` loads a store's dense weights, builds the model over one expert provider
(``providers/``: zipmoe | naive | memory) and generates greedily with a KV cache. ``bench``
runs the same prompts through every mode, each with a fresh engine, and reports time to first
token (prefill), time per output token, tokens/s (generated tokens over prefill + decode time),
hit rates per pool and bytes read, and whether every mode's logits were bit-identical.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from edgekit.errors import UnknownNameError, UsageError
from edgekit.methods.zipmoe import decode_process
from edgekit.methods.zipmoe.cache import POLICIES
from edgekit.methods.zipmoe.model import KVCache, MoEModel, decode_tokens, encode_text
from edgekit.methods.zipmoe.providers import MemoryExperts, NaiveOffload, ZipMoEExperts
from edgekit.methods.zipmoe.store import Store
from edgekit.storage import BandwidthCap, StorageReader

MODES = ("zipmoe", "naive", "memory")
DECODE_ON = ("process", "io", "compute")
DEFAULT_PROMPTS = (
    "The weather today is",
    "def add(a, b):",
    "Edge devices have little memory, so",
)
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z%]*)\s*$")
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20,
          "g": 2**30}


# The largest size parse_size accepts: 1 PiB, beyond any machine's memory; larger numbers are
# typos (and a 400-digit one is inf as a float).
MAX_SIZE_BYTES = 2**50


def parse_size(text: str, total_expert_bytes: int | None = None) -> int:
    """Bytes from '64MiB', '1.5GB', '4096' or, relative to all experts' bf16 bytes, '25%'."""
    match = _SIZE.match(str(text))
    if not match:
        raise UsageError(f"cannot read the size '{text}'",
                         hint="use e.g. 512MiB, 2GB, 1048576 or 25% (of the experts' bf16 bytes)")
    value, unit = float(match.group(1)), match.group(2).lower()
    if unit == "%":
        if total_expert_bytes is None:
            raise UsageError("a percentage budget needs the store's expert size")
        size = value / 100 * total_expert_bytes
    elif unit not in _UNITS:
        raise UsageError(f"unknown size unit '{match.group(2)}'",
                         hint="valid: B, KB, MB, GB, KiB, MiB, GiB, %")
    else:
        size = value * _UNITS[unit]
    if not size <= MAX_SIZE_BYTES:  # also a 400-digit number, which float() makes inf
        raise UsageError(f"the size '{text}' is beyond {MAX_SIZE_BYTES // 2**40} TiB",
                         hint="use e.g. 512MiB, 2GB or 25%")
    return int(size)


# [ours] More decode workers than this gain nothing in Python: decoding is bound by the GIL-free
# zstd calls and their Python bookkeeping, not by cores.
MAX_DEFAULT_WORKERS = 4


def default_workers(compute_threads: int | None = None, cores: int | None = None) -> int:
    """ZipMoE decode workers for this machine: the cores left after the compute threads and the
    I/O thread, 0 to 4; with none the I/O thread decodes between its reads
    (``EngineSettings.decode_on``). A worker on a core the compute thread shares costs more
    than it gives: the compute thread's many short torch calls then wait for the GIL, and the
    decoded exponents reach it from another core's cache (on this 2-core VM, 4 alternated pairs
    of engine runs: no worker 30.4-39.4 tokens/s, one 27.5-34.7, two slower still;
    benchmarks/README.md)."""
    threads = torch.get_num_threads() if compute_threads is None else compute_threads
    cores = (os.cpu_count() or 1) if cores is None else cores
    return max(0, min(MAX_DEFAULT_WORKERS, cores - threads - 1))


@dataclass
class EngineSettings:
    mode: str = "zipmoe"
    memory_budget: int = 0                 # bytes for expert caches (zipmoe, naive)
    workers: int | None = None             # ZipMoE with decode threads: workers (L, 0: the
                                           # I/O or compute thread decodes); None:
                                           # default_workers()
    policy: str = "zipmoe"                 # ZipMoE eviction policy
    bandwidth_bytes_s: float | None = None  # cap storage reads at this rate
    bandwidth_source: str = ""
    direct: bool = True                    # O_DIRECT where the file system allows
    full_ratio: float | None = None        # fix the full-pool share instead of planning it
    prefetch: bool = True                  # ZipMoE: prefetch the next layer's predicted experts
    device: str = "cpu"                    # where the model computes (cuda: decoding stays
                                           # on the CPU, as on the paper's Jetson)
    decode_on: str = "process"             # ZipMoE: a decode process reads, decodes and
                                           # rebuilds ("process"; Linux, else "io"); or threads:
                                           # the I/O thread decodes between its reads ("io"),
                                           # or, with no workers, the compute thread before
                                           # rebuilding ("compute")

    def check(self) -> None:
        if self.mode not in MODES:
            raise UnknownNameError("serving mode", self.mode, MODES)
        if self.policy not in POLICIES:
            raise UnknownNameError("cache policy", self.policy, POLICIES)
        if self.workers is not None and self.workers < 0:
            raise UsageError(f"workers cannot be negative, got {self.workers}")
        if self.memory_budget < 0:
            raise UsageError("the memory budget cannot be negative")
        if self.decode_on not in DECODE_ON:
            raise UnknownNameError("decode thread", self.decode_on, DECODE_ON)
        if self.full_ratio is not None and not 0.0 <= self.full_ratio <= 1.0:
            raise UsageError(f"the full-pool ratio must be in [0, 1], got {self.full_ratio}")


@dataclass
class Generation:
    prompt_tokens: int
    tokens: list[int]
    logits: list[torch.Tensor]   # (vocab,) per generated token
    ttft_s: float
    step_s: list[float] = field(default_factory=list)
    cpu_s: float = 0.0           # the compute thread's CPU time over the whole generation

    @property
    def text(self) -> str:
        return decode_tokens(self.tokens)

    @property
    def total_s(self) -> float:
        return self.ttft_s + sum(self.step_s)


class Engine:
    def __init__(self, store: Store | str | Path, settings: EngineSettings,
                 scratch: str | Path | None = None) -> None:
        settings.check()
        if settings.workers is None:
            settings = replace(settings, workers=default_workers())
        if settings.decode_on == "process" and not decode_process.available():
            settings = replace(settings, decode_on="io")
        t0 = time.perf_counter()
        self.store = store if isinstance(store, Store) else Store(store)
        self.settings = settings
        cap = (BandwidthCap(settings.bandwidth_bytes_s, settings.bandwidth_source)
               if settings.bandwidth_bytes_s else None)
        self._reader = lambda path: StorageReader(path, settings.direct, cap)
        dense = {n: self.store.load_tensor(n) for n in self.store.dense_names()}
        if settings.mode == "memory":
            self.experts = MemoryExperts(self.store, settings.workers)
            self.storage: dict[str, object] = {"reads": "none (all experts in memory)"}
        elif settings.mode == "naive":
            self.experts = NaiveOffload(self.store, settings.memory_budget, self._reader,
                                        settings.workers, scratch)
            self.storage = self.experts.reader.describe()
        else:
            self.experts = ZipMoEExperts(self.store, settings.memory_budget,
                                         self._reader(self.store.data_path), settings.workers,
                                         settings.policy, settings.full_ratio, settings.prefetch,
                                         settings.decode_on)
            self.storage = self.experts.reader.describe()
        try:
            self.model = MoEModel(self.store.config, dense, self.experts, settings.device)
            if isinstance(self.experts, ZipMoEExperts):  # plan from the engine's own costs
                self.experts.calibrate(lambda: self.model.forward([0], KVCache()))
        except BaseException:
            self.experts.close()
            raise
        self.startup_s = time.perf_counter() - t0
        self.generations: list[Generation] = []

    def generate(self, prompt: str, max_new_tokens: int = 16,
                 on_token: Callable[[int], None] | None = None) -> Generation:
        """Greedy generation; the first token comes from the prefill (TTFT)."""
        if max_new_tokens < 1:
            raise UsageError(f"max new tokens must be at least 1, got {max_new_tokens}")
        ids = encode_text(prompt, self.store.config.vocab_size)
        cache = KVCache()
        cpu0 = time.thread_time()
        t0 = time.perf_counter()
        logits = self.model.forward(ids, cache)[-1].cpu()
        token = int(torch.argmax(logits))
        gen = Generation(len(ids), [token], [logits], time.perf_counter() - t0)
        if on_token:
            on_token(token)
        for _ in range(max_new_tokens - 1):
            t0 = time.perf_counter()
            logits = self.model.forward([token], cache)[-1].cpu()
            token = int(torch.argmax(logits))
            gen.step_s.append(time.perf_counter() - t0)
            gen.tokens.append(token)
            gen.logits.append(logits)
            if on_token:
                on_token(token)
        gen.cpu_s = time.thread_time() - cpu0
        self.generations.append(gen)
        return gen

    def metrics(self) -> dict[str, Any]:
        gens = self.generations
        steps = [s for g in gens for s in g.step_s]
        new_tokens = sum(len(g.tokens) for g in gens)
        total = sum(g.total_s for g in gens)
        stats = self.experts.stats.to_json()
        reader = getattr(self.experts, "reader", None)
        return {
            "mode": self.settings.mode,
            "prompts": len(gens),
            "prompt_tokens": sum(g.prompt_tokens for g in gens),
            "new_tokens": new_tokens,
            "ttft_ms": 1e3 * sum(g.ttft_s for g in gens) / max(1, len(gens)),
            "tpot_ms": 1e3 * sum(steps) / max(1, len(steps)),
            "tokens_per_s": new_tokens / total if total > 0 else 0.0,
            "decode_tokens_per_s": len(steps) / sum(steps) if steps else 0.0,
            "startup_s": self.startup_s,
            "experts": stats,
            "bytes_read": reader.stats.bytes if reader is not None else 0,
            "breakdown": time_breakdown(total, stats,
                                        reader.stats.bytes if reader is not None else 0,
                                        self.settings.bandwidth_bytes_s,
                                        sum(g.cpu_s for g in gens)),
            "storage": self.storage,
            "provider": self.experts.describe(),
        }

    def close(self) -> None:
        self.experts.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def time_breakdown(total_s: float, stats: dict[str, Any], bytes_read: int,
                   bandwidth_bytes_s: float | None,
                   compute_cpu_s: float | None = None) -> dict[str, float | None]:
    """Where a run's time went, so its limit is visible. The compute thread's time (prefill
    plus decode, ``total_s``) splits into waiting for experts, decoding on it (ZipMoE with the
    compute thread decoding), rebuilding tensors from their planes, and the rest: the model's
    own compute and the bookkeeping. Beside it, the capped channel's busy time (bytes read /
    bandwidth; None uncapped) and how much of it the compute thread did not wait for (hidden by
    overlap), decoding on all threads, and the CPU time of the compute thread and of ZipMoE's
    I/O thread: on a loaded machine wall times grow with the other work, CPU times much less,
    so these say what the run needs from each core."""
    decode_compute = stats.get("decode_compute_s", 0.0)
    rebuild = stats.get("rebuild_s", 0.0)
    wait = stats.get("wait_s", 0.0)
    reads = bytes_read / bandwidth_bytes_s if bandwidth_bytes_s else None
    return {"total_s": total_s, "wait_s": wait, "decode_on_compute_s": decode_compute,
            "rebuild_s": rebuild,
            "compute_s": max(0.0, total_s - wait - decode_compute - rebuild),
            "decode_all_threads_s": stats.get("decode_s", 0.0),
            "reads_at_cap_s": reads,
            "reads_hidden_s": None if reads is None else max(0.0, reads - wait),
            "cpu_compute_thread_s": compute_cpu_s,
            "cpu_io_thread_s": stats.get("io_cpu_s", 0.0)}


def prefetch_summary(experts: dict[str, Any]) -> str:
    """Share of expert activations served by a prefetch, and the share of prefetches used."""
    precision = experts.get("prefetch_precision")
    if precision is None:
        return "-"
    return f"{experts['prefetched'] / max(1, experts['activations']):.1%} ({precision:.0%} used)"


def compare_logits(runs: dict[str, list[Generation]]) -> dict[str, Any]:
    """Whether every mode produced bit-identical logits (and tokens) for every step."""
    modes = list(runs)
    reference = runs[modes[0]]
    identical, max_diff = True, 0.0
    for mode in modes[1:]:
        for ref_gen, gen in zip(reference, runs[mode], strict=True):
            if ref_gen.tokens != gen.tokens or len(ref_gen.logits) != len(gen.logits):
                identical = False
            for a, b in zip(ref_gen.logits, gen.logits, strict=False):
                if not torch.equal(a, b):
                    identical = False
                    max_diff = max(max_diff, float((a - b).abs().max()))
    return {"modes": modes, "identical": identical, "max_abs_diff": max_diff,
            "steps_compared": sum(len(g.logits) for g in reference)}


def bench(store: Store | str | Path, settings: EngineSettings,
          prompts: tuple[str, ...] | list[str] = DEFAULT_PROMPTS, max_new_tokens: int = 16,
          modes: tuple[str, ...] = MODES, scratch: str | Path | None = None,
          progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Every mode on the same prompts, each from a cold cache; returns the report body."""
    store = store if isinstance(store, Store) else Store(store)
    for mode in modes:
        if mode not in MODES:
            raise UnknownNameError("serving mode", mode, MODES)
    results, runs = {}, {}
    steps_total = len(modes) * len(prompts)
    done = 0
    for mode in modes:
        mode_settings = EngineSettings(**{**settings.__dict__, "mode": mode})
        with Engine(store, mode_settings, scratch) as engine:
            runs[mode] = []
            for prompt in prompts:
                runs[mode].append(engine.generate(prompt, max_new_tokens))
                done += 1
                if progress:
                    progress(mode, done, steps_total)
            results[mode] = engine.metrics()
    speedups = {}
    if "zipmoe" in results:
        for other in ("naive", "memory"):
            if other in results and results[other]["tokens_per_s"] > 0:
                speedups[f"zipmoe_vs_{other}"] = (results["zipmoe"]["tokens_per_s"]
                                                  / results[other]["tokens_per_s"])
    return {
        "store": str(store.folder),
        "model": {"family": store.config.family, "moe_layers": len(store.config.moe_layers),
                  "experts": store.config.num_experts, "top_k": store.config.top_k,
                  "expert_bytes": store.expert_bytes,
                  "total_expert_bytes": store.total_expert_bytes},
        "settings": {"memory_budget_bytes": settings.memory_budget,
                     "budget_share_of_experts": settings.memory_budget
                     / max(1, store.total_expert_bytes),
                     "workers": (default_workers() if settings.workers is None
                                 else settings.workers),
                     "policy": settings.policy,
                     "prefetch": settings.prefetch,
                     "max_new_tokens": max_new_tokens, "prompts": list(prompts),
                     "torch_threads": torch.get_num_threads()},
        "results": results,
        "speedup": speedups,
        "logits": compare_logits(runs),
        "definitions": {
            "ttft_ms": "prefill of the prompt to the first generated token, mean over prompts",
            "tpot_ms": "mean time of each further token",
            "tokens_per_s": "generated tokens / (prefill + decode time), all prompts",
            "hit rates": "per expert activation (one per layer step that routes to it)",
        },
    }
