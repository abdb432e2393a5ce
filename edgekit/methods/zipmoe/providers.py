"""Where the serving engine's experts come from: all in memory, naive offload, or ZipMoE.

All three hand the model the same bf16 tensors (the store's round trip is bit-exact), so they
give bit-identical logits; they differ only in what is held in memory and what is read when.

    MemoryExperts    every expert decoded once at start-up and kept (the upper bound)
    NaiveOffload     bf16 experts read on demand, one after another, into one LRU cache of the
                     byte budget; compute waits for each read (HF Accelerate-style offload)
    ZipMoEExperts    full and SM-only pools per layer (cache.py), the Type-I/Type-II order
                     (scheduler.py), a decode process that reads, decompresses and rebuilds
                     experts into shared memory (or threads: one I/O thread reading and L
                     decode workers, or with none the I/O thread, decompressing exponent
                     chunks), overlapping the layer's compute on the experts already there;
                     and the next layer's predicted experts prefetched behind the current
                     layer's reads, as the authors' engine does (``prefetch``; the model
                     predicts, model.py)
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import json
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from edgekit.kernels import zipmoe_codec as codec
from edgekit.kernels.zipmoe_planes import decode_exponents
from edgekit.methods.zipmoe.cache import FULL, SM, Policy, Pool, ZipMoECache
from edgekit.methods.zipmoe.decode_process import DecodeProcess, ExpertLayout, expert_layout
from edgekit.methods.zipmoe.guesses import GuessRecord
from edgekit.methods.zipmoe.model import ExpertWeights
from edgekit.methods.zipmoe.planner import (
    DelayModel,
    Plan,
    plan_pools,
    pool_slots,
    popularity_by_rank,
)
from edgekit.methods.zipmoe.scheduler import Job, SchedulerCore, schedule
from edgekit.methods.zipmoe.store import (
    Store,
    StoreError,
    TensorEntry,
    align_up,
    check_extent,
    stream_errors,
)
from edgekit.storage import StorageReader, wait_until

Key = tuple[int, int]  # (layer, expert)
# [ours] How far ahead of a capped channel the I/O thread books reads: enough to cover the
# decode workers' and the compute thread's scheduling delays, little enough that reads of a
# mispredicted prefetch are mostly still unbooked, and cancelled, when the layer routes.
READ_AHEAD_S = 1e-3
# [ours] The predictor's guesses come ranked (most likely first); a rank is prefetched only while
# at least this share of its guesses for that layer proves right (guesses.py). On a
# device whose reads are the limit, a prefetch right with probability p reads (1 - p) / p
# wasted experts per useful one ahead of the layer's own reads: at 0.75, one in three. On the
# trained benchmark model the ranks were right 92 %, 58 %, 48 % and 48 % of the time (random
# weights: 99-83 %), and prefetching all four read 30 % more bytes than not prefetching.
PREFETCH_MIN_PRECISION = 0.75
# With the decode process a wrong guess costs channel time only, not the compute thread's CPU,
# and its reads are cancelled once the layer routes: trained benchmark model, 7 interleaved
# rounds, ZipMoE / naive 1.76x at 0.75, 1.92x at 0.5 and 1.92x at 0 (every rank prefetched).
PREFETCH_MIN_PRECISION_PROCESS = 0.5
# [ours] Expert slots of the decode process's arena per routed expert (top-k): a layer's own
# reads and the next layer's prefetch fit beside the slots still copied out or lent; a prefill
# that routes to more experts streams them through (working memory beside the budget, reported
# by ``describe``), capped at ``ARENA_MAX_BYTES`` for very large experts (at least 2 slots).
ARENA_SLOTS_PER_TOP_K = 3
ARENA_MAX_BYTES = 1 << 30
# Tokens that ``ZipMoEExperts.calibrate`` runs (each reads, decodes and rebuilds top-k experts
# in every MoE layer).
CALIBRATION_TOKENS = 4


@dataclass
class ExpertStats:
    activations: int = 0     # (layer, expert) uses, one per layer step that routes to it
    full_hits: int = 0       # decoded expert already in memory
    sm_hits: int = 0         # sign-mantissa bytes in memory, exponents read and decoded
    misses: int = 0          # everything read (and decoded, for ZipMoE)
    prefetched: int = 0      # of the SM hits and misses: reads started by a prefetch
    prefetch_wasted: int = 0  # prefetched experts the layer did not route to
    wait_s: float = 0.0      # time the compute thread spent waiting for experts
    # The lookahead predictor itself, before the pools filter its guesses: over the decode steps
    # (one token; a prompt's prefill routes to most experts) of layers that had a prediction,
    # the experts guessed, the guesses the layer routed to, and the experts it routed to
    # (precision = right / predicted, recall = right / routed).
    predicted: int = 0
    predicted_right: int = 0
    routed_after_prediction: int = 0
    decode_s: float = 0.0    # exponent decompression, on whichever thread did it
    decode_compute_s: float = 0.0  # the part of decode_s on the compute thread (no workers)
    io_cpu_s: float = 0.0    # CPU time of the I/O thread (reads, checks, decoding there)
    rebuild_s: float = 0.0   # merging exponent and sign-mantissa planes (compute thread), or
                             # with a decode process copying the decoded tensors out of it
    worker_rebuild_s: float = 0.0  # merging the planes in the decode process
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_decode(self, seconds: float, on_compute: bool) -> None:
        with self._lock:
            self.decode_s += seconds
            if on_compute:
                self.decode_compute_s += seconds

    def to_json(self) -> dict[str, float]:
        n = max(1, self.activations)
        issued = self.prefetched + self.prefetch_wasted
        return {"activations": self.activations, "full_hits": self.full_hits,
                "sm_hits": self.sm_hits, "misses": self.misses,
                "full_hit_rate": self.full_hits / n, "sm_hit_rate": self.sm_hits / n,
                "miss_rate": self.misses / n, "prefetched": self.prefetched,
                "prefetch_wasted": self.prefetch_wasted,
                "prefetch_precision": self.prefetched / issued if issued else None,
                "predictor_precision": (self.predicted_right / self.predicted
                                        if self.predicted else None),
                "predictor_recall": (self.predicted_right / self.routed_after_prediction
                                     if self.routed_after_prediction else None),
                "wait_s": self.wait_s, "decode_s": self.decode_s,
                "decode_compute_s": self.decode_compute_s, "rebuild_s": self.rebuild_s,
                "worker_rebuild_s": self.worker_rebuild_s, "io_cpu_s": self.io_cpu_s}


def _tensor_from_bytes(data: bytes, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(
        getattr(torch, dtype)).reshape(shape)


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


class NaiveOffload:
    """bf16 experts read on demand into an LRU cache of ``budget_bytes`` (all layers together).

    The bf16 experts live in a plain file written from the store at start-up (each expert's three
    matrices contiguous, 4 KiB aligned) beside the store, so both read from the same device."""

    mode = "naive"

    def __init__(self, store: Store, budget_bytes: int, reader_factory, workers: int = 2,
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


def _rebuild(entry: TensorEntry, exponent: np.ndarray, raw: bytes) -> torch.Tensor:
    """A tensor from its exponent plane and raw bytes (the codec's vectorised inverse split)."""
    return codec.merge_planes(exponent, np.frombuffer(raw, np.uint8), entry.dtype, entry.shape)


def _scratch_dir(store: Store, scratch: str | Path | None) -> str | None:
    if scratch is not None:
        return str(scratch)
    parent = store.folder.resolve().parent
    return str(parent) if os.access(parent, os.W_OK) else None


# --------------------------------------------------------------------------------------------
# ZipMoE
# --------------------------------------------------------------------------------------------

class _ExpertJob:
    """Reads and decodes of one expert; when the last operation finishes (or one fails) the job
    goes to the ``done`` queue of the layer step that uses it. A prefetched job gets its queue
    only when that step adopts it (``deliver_to``), perhaps after it has finished."""

    def __init__(self, layer: int, expert: int, tokens: int, entries: tuple[TensorEntry, ...],
                 raws: list[bytes] | None, decision: str,
                 done: queue.SimpleQueue | None = None) -> None:
        self.layer, self.expert, self.tokens = layer, expert, tokens
        self.entries, self.decision = entries, decision
        self.type_i = raws is None
        self.raws: list[bytes | None] = [None] * len(entries) if raws is None else list(raws)
        self.id = -1  # with a decode process: the job's id there
        self.exps: list[np.ndarray | None] = [None] * len(entries)
        self.blobs: list[tuple[bytes, float] | None] = [None] * len(entries)  # no workers
        self.pending = len(entries)  # exponent decodes (reads, without decode workers)
        self.cancelled = False
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.done = done
        self.over = False  # finished or failed
        self.futures: list[cf.Future] = []  # the I/O thread appends the decodes it queues
        self.io_future: cf.Future | None = None  # the I/O batch holding the job's reads
        self.slot: int | None = None  # with a decode process: the arena slot it holds
        self.layout: ExpertLayout | None = None

    def _end(self) -> None:
        """Called with the lock held, once."""
        self.over = True
        if self.done is not None:
            self.done.put(self)

    def deliver_to(self, done: queue.SimpleQueue) -> None:
        with self.lock:
            self.done = done
            if self.over:
                done.put(self)

    def finish_one(self) -> None:
        with self.lock:
            self.pending -= 1
            if self.pending == 0 and self.error is None:
                self._end()

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = exc
                self._end()

    def cancel(self) -> None:
        """Drop the operations not started yet (a prefetch nobody needs); the I/O batch skips
        the job's reads not made yet."""
        self.cancelled = True
        for future in list(self.futures):
            future.cancel()

    def wait(self) -> None:
        """Until every operation queued for the job has ended (reads queue decodes)."""
        if self.io_future is not None:
            cf.wait([self.io_future])
        while any(not f.done() for f in self.futures):
            cf.wait(list(self.futures))


def _expert_span(entries: tuple[TensorEntry, ...]) -> tuple[int, int] | None:
    """Offset and length of one read covering all of an expert's streams, when only alignment
    padding lies between them; None otherwise. [ours] On the benchmark's models (three prompts
    x 16 tokens, prefetch off) this read 1.2-1.5 % more bytes than a read per stream (255.1
    against 252.0 MiB trained, 345.2 against 340.2 MiB random) in 40-57 % fewer reads (2,409
    against 3,999, and 2,053 against 4,758): each read is Python work and GIL hand-offs on the
    I/O thread, beside the compute thread on a 2-core machine."""
    extents = sorted((x for e in entries for x in (*e.chunks, e.raw)), key=lambda x: x.offset)
    for before, after in zip(extents, extents[1:], strict=False):
        if after.offset < before.end or after.offset > align_up(before.end):
            return None
    return extents[0].offset, extents[-1].end - extents[0].offset


def _span(entry: TensorEntry) -> tuple[int, int]:
    """Offset and length of one read covering all of a tensor's exponent chunks (they are
    written back to back, each 4 KiB aligned)."""
    first, last = entry.chunks[0], entry.chunks[-1]
    return first.offset, last.end - first.offset


class ZipMoEExperts:
    """ZipMoE's cache, scheduler and decode engine over a store.

    The decode process [ours, for Python; ``decode_on="process"``, the default on Linux]: the
    authors' C++ engine has one I/O thread for sign-mantissa bytes and L workers that each read
    and decompress an exponent chunk, beside the GPU. Here one process (decode_process.py,
    kernels/zipmoe_decoder.py) makes every read in the scheduler's order, straight into a
    shared-memory slot per expert, booked on the capped channel up to ``READ_AHEAD_S`` ahead;
    as each tensor's bytes arrive it checks, decompresses and rebuilds them there, and the
    compute thread copies out the experts the full pool keeps and uses the others in place
    (lent until the layer has used them). It has its own interpreter, so none
    of its work holds the compute thread's GIL: with threads, the compute thread's own time
    was 1.9x the all-in-memory model's on this 2-core VM (benchmarks/README.md).

    Threads (``decode_on`` "io" or "compute"): the I/O thread makes every read, in the
    scheduler's order and each tensor's sign-mantissa bytes before its exponents, booking
    them up to ``READ_AHEAD_S`` ahead (``read_ahead``, as an NVMe queue holds several
    commands); the L workers only decompress, one task per tensor (its K chunks; a Python task
    costs tens of microseconds); the compute thread rebuilds each tensor (vectorised) just
    before using it, like the authors' reconstruction kernel on the compute stream. Workers
    that read and decode in turn left the channel idle while all of them decoded (0.38 s of a
    1.8 s engine run here). With L = 0 (no core to spare for workers,
    engine.default_workers) the I/O thread is the one decode worker (``decode_on="io"``):
    while it waits to book its next read it decodes the exponents that have arrived, so the
    compute thread only rebuilds; ``decode_on="compute"`` decodes on the compute thread just
    before rebuilding.
    """

    mode = "zipmoe"

    def __init__(self, store: Store, budget_bytes: int, reader: StorageReader, workers: int = 2,
                 policy: str = "zipmoe", full_ratio: float | None = None,
                 prefetch: bool = True, decode_on: str = "process") -> None:
        """Plans the pools from the start-up profile of one tensor (``full_ratio`` None);
        ``calibrate`` then plans them again from the engine's own costs."""
        cfg = store.config
        self.store, self.reader, self.workers = store, reader, max(0, workers)
        self.stats = ExpertStats()
        self.codec = store.codec
        self.full_bytes = store.expert_bytes
        first = store.expert_entries(cfg.moe_layers[0], 0)
        self.sm_bytes = sum(e.raw.size for e in first)
        self.tensors_per_expert = len(first)
        self.chunks = max(len(e.chunks) for e in first)
        # A decode process reads, decodes and rebuilds (``decode_on`` "process"); else with no
        # decode worker the I/O thread decodes, between booking reads ("io"), or the compute
        # thread does, just before rebuilding ("compute").
        self.decoder: DecodeProcess | None = None
        self.io_decode = self.workers == 0 and decode_on == "io"
        threads = decode_on != "process"
        self.decode_pool = (cf.ThreadPoolExecutor(self.workers, thread_name_prefix="zipmoe-dec")
                            if self.workers and threads else None)
        self.io_thread = (cf.ThreadPoolExecutor(1, thread_name_prefix="zipmoe-io") if threads
                          else None)
        self._layouts: dict[tuple[int, int, bool], tuple[ExpertLayout, str]] = {}
        self._free_slots: list[int] = []
        self._sent: dict[int, _ExpertJob] = {}  # jobs in the decode process, by id
        self._backlog: collections.deque[_ExpertJob] = collections.deque()  # waiting for a slot
        self._ids = itertools.count()
        self._cpu_base = 0.0  # the decode process's CPU time when the statistics started
        # (job, tensor, exponent bytes, when the channel delivers them), in booking order
        self._pending: collections.deque[tuple[_ExpertJob, int, bytes | memoryview, float]] = \
            collections.deque()
        self.budget_bytes = budget_bytes
        self.policy = policy
        self.full_ratio = full_ratio
        self.calibration: dict[str, float] | None = None
        self.prefetch_enabled = prefetch
        self.prefetched: dict[Key, _ExpertJob] = {}  # reads started for the next layer
        # the predictor's last guess per (layer, late), and how often each rank proved right
        self.predictions: dict[tuple[int, bool], list[int]] = {}
        self.guesses = self._fresh_guesses()
        try:
            if not threads:
                self._start_decoder(cfg)
            self.profile = self._profile()
            self._plan(self.profile["decode_s"], self.profile["rebuild_s"], 0.0)
        except BaseException:
            self.close()  # the reader, the threads and the decode process it was handed
            raise

    def _start_decoder(self, cfg) -> None:
        slot_bytes = max(self._layout(layer, expert, True)[0].size
                         for layer in cfg.moe_layers for expert in range(cfg.num_experts))
        slots = max(2, min(ARENA_SLOTS_PER_TOP_K * cfg.top_k, ARENA_MAX_BYTES // slot_bytes))
        self.decoder = DecodeProcess(self.store.data_path, self.reader, self.codec, slot_bytes,
                                     slots, READ_AHEAD_S)
        self._free_slots = list(range(slots))[::-1]

    def _layout(self, layer: int, expert: int, type_i: bool) -> tuple[ExpertLayout, str]:
        """An expert's slot layout, and its JSON for the decode process (made once)."""
        key = (layer, expert, type_i)
        if key not in self._layouts:
            layout = expert_layout(self.store.expert_entries(layer, expert), type_i)
            self._layouts[key] = (layout, json.dumps({"reads": layout.reads,
                                                      "tensors": layout.tensors}))
        return self._layouts[key]

    def _plan(self, decode_s: float, rebuild_s: float, layer_compute_s: float) -> None:
        """The delay model from these costs, the plan (or the fixed share) and empty pools."""
        cfg = self.store.config
        self.delay_model = DelayModel(
            k=cfg.top_k, tensors_per_expert=self.tensors_per_expert, chunks=self.chunks,
            workers=1 if self.decoder is not None else max(1, self.workers), decode_s=decode_s,
            sm_read_s=self.profile["sm_read_s"], compression_ratio=self.profile["cr"],
            layer_compute_s=layer_compute_s, rebuild_s=rebuild_s,
            decode_on_compute=self.workers == 0 and not self.io_decode)
        layer_budget = self.budget_bytes / len(cfg.moe_layers)
        if self.full_ratio is None:
            trace = self.store.manifest.get("trace") or {}
            counts = trace.get("counts") or {}
            popularity = popularity_by_rank(counts, cfg.num_experts)
            self.plan = plan_pools(popularity, self.delay_model, cfg.num_experts, layer_budget,
                                   self.full_bytes, self.sm_bytes)
            self.plan.reason += "; popularity from " + (
                f"the store's routing trace ({trace.get('tokens')} tokens)" if counts else
                "a uniform prior (the store has no routing trace)")
        else:
            n_full, n_sm = pool_slots(self.full_ratio, layer_budget, self.full_bytes,
                                      self.sm_bytes, cfg.num_experts)
            self.plan = Plan(self.full_ratio, n_full, n_sm, float("nan"),
                             reason="fixed full ratio")
        self.cache = ZipMoECache(list(cfg.moe_layers), cfg.num_experts, self.plan.full_slots,
                                 self.plan.sm_slots, self.full_bytes, self.sm_bytes, self.policy)

    def calibrate(self, step: Callable[[], object], tokens: int = CALIBRATION_TOKENS) -> None:
        """Plan again from what the engine itself costs [ours]: ``step`` (one token through the
        model) runs once to warm up, then ``tokens`` times with empty pools and no prefetch, so
        every routed expert is read, decoded and rebuilt as in serving; the compute thread's
        time per layer (bookkeeping included, waits excluded) and the decode and rebuild time
        per tensor then replace the start-up profile's, which times one tensor alone on warm
        caches. (Quiet 7-round run of the trained benchmark model, benchmarks/README.md: the
        profile's loop gave 0.065 ms decode + 0.037 ms rebuild per tensor, serving averaged
        0.108 + 0.072 ms.) Nothing of the calibration stays: pools, statistics and read counts
        start empty."""
        if self.full_ratio is not None:
            return
        cfg = self.store.config
        keep_prefetch, self.prefetch_enabled = self.prefetch_enabled, False
        self.cache = ZipMoECache(list(cfg.moe_layers), cfg.num_experts, 0, 0, self.full_bytes,
                                 self.sm_bytes, self.policy)
        try:
            step()  # the model's first call pays one-off costs (allocations, lazy set-up)
            self.stats = ExpertStats()
            t0 = time.perf_counter()
            for _ in range(tokens):
                step()
            total = time.perf_counter() - t0
        finally:
            self.prefetch_enabled = keep_prefetch
        stats, steps = self.stats, tokens * len(cfg.moe_layers)
        decoded = max(1, (stats.sm_hits + stats.misses) * self.tensors_per_expert)
        layer_s = (total - stats.wait_s - stats.decode_compute_s - stats.rebuild_s) / steps
        # With a decode process its worker's cost per tensor is decoding and rebuilding there,
        # and the compute thread's is the copy out of the arena (``rebuild_s``).
        worker_s = (stats.decode_s + stats.worker_rebuild_s) / decoded
        self.calibration = {"tokens": tokens, "layer_compute_s": layer_s, "decode_s": worker_s,
                            "rebuild_s": stats.rebuild_s / decoded}
        self._plan(worker_s, stats.rebuild_s / decoded, layer_s)
        self.plan.reason += f"; costs calibrated on {tokens} tokens"
        self.stats = ExpertStats()
        self._cpu_base += stats.io_cpu_s if self.decoder is not None else 0.0
        self.predictions.clear()
        self.guesses = self._fresh_guesses()
        self.reader.stats.reset()

    # -- profiling d_dec and d_sm on this device ---------------------------------------------
    def _profile(self, repeats: int = 5) -> dict[str, float]:
        """d_sm, d_dec and the rebuild of one tensor on this device: the fastest of ``repeats``
        tries, since a shared machine's other work only ever adds time, and the plan must not
        change with one engine's start-up timing (the median of 3 moved a 25 % budget between
        2 full + 12 SM-only slots per layer and 7 + 2 on this loaded VM)."""
        cfg = self.store.config
        entries = self.store.expert_entries(cfg.moe_layers[0], 0)
        sm_times, dec_times, rebuild_times, copy_times = [], [], [], []
        for _ in range(repeats):
            for entry in entries:
                t0 = time.perf_counter()
                raw = self._read_raw(entry)
                sm_times.append(time.perf_counter() - t0)
                blob = self.reader.read(*_span(entry))
                t0 = time.perf_counter()
                exp = self._decompress(entry, blob)
                t1 = time.perf_counter()
                tensor = _rebuild(entry, exp, raw)
                t2 = time.perf_counter()
                tensor.clone()
                dec_times.append(t1 - t0)
                rebuild_times.append(t2 - t1)
                copy_times.append(time.perf_counter() - t2)
        self.reader.stats.reset()  # profiling reads are not the workload's
        exp_bytes = sum(c.size for e in entries for c in e.chunks)
        decode_s, rebuild_s = min(dec_times), min(rebuild_times)
        if self.decoder is not None:  # the process decodes and rebuilds; this thread copies
            decode_s, rebuild_s = decode_s + rebuild_s, min(copy_times)
        return {"decode_s": decode_s, "rebuild_s": rebuild_s,
                "sm_read_s": min(sm_times),
                "cr": exp_bytes / max(1, sum(e.raw.size for e in entries))}

    # -- worker operations -------------------------------------------------------------------
    def _read_raw(self, entry: TensorEntry) -> bytes:
        return check_extent(entry, entry.raw, self.reader.read(entry.raw.offset, entry.raw.size),
                            "sign-mantissa bytes")

    def _decompress(self, entry: TensorEntry, blob: bytes) -> np.ndarray:
        """Check and decode a tensor's K exponent chunks out of one spanning read."""
        base = entry.chunks[0].offset
        out = np.empty(entry.numel, np.uint8)
        view = memoryview(blob)
        with stream_errors():
            decode_exponents(entry.name, [(view[x.offset - base:x.end - base], x.size, x.crc32,
                                           x.start, x.stop) for x in entry.chunks],
                             out, self.codec)
        return out

    def _read_job(self, job: _ExpertJob) -> None:
        """I/O thread: the job's reads in order, each tensor's sign-mantissa bytes (Type-I) before
        its exponents, which go to a decode worker at once (or wait for the compute thread when
        there are no workers). A Type-I expert whose streams lie back to back in the store (as
        ``write_store`` lays them) is one read instead of two per tensor. Reads are booked on a
        capped channel at most ``READ_AHEAD_S`` ahead, so a cancelled prefetch stops early."""
        try:
            span = _expert_span(job.entries) if job.type_i else None
            if span is not None:
                if job.cancelled:
                    return
                self._throttle()
                data, ready_at = self.reader.read_ahead(*span)
                view, base = memoryview(data), span[0]
                for t, entry in enumerate(job.entries):
                    raw = view[entry.raw.offset - base:entry.raw.end - base]
                    job.raws[t] = bytes(check_extent(entry, entry.raw, raw,
                                                     "sign-mantissa bytes"))
                    offset, size = _span(entry)
                    self._hand_over(job, t, view[offset - base:offset - base + size], ready_at)
                return
            for t, entry in enumerate(job.entries):
                if job.cancelled:
                    return
                if job.type_i:
                    self._throttle()
                    data, _ = self.reader.read_ahead(entry.raw.offset, entry.raw.size)
                    job.raws[t] = check_extent(entry, entry.raw, data, "sign-mantissa bytes")
                self._throttle()
                blob, ready_at = self.reader.read_ahead(*_span(entry))
                self._hand_over(job, t, blob, ready_at)
        except BaseException as exc:  # noqa: BLE001 - handed to the compute thread
            job.fail(exc)

    def _hand_over(self, job: _ExpertJob, t: int, blob: bytes | memoryview,
                   ready_at: float) -> None:
        """A tensor's exponent bytes to a decode worker, or to the compute thread (_finish)."""
        if self.io_decode:
            self._pending.append((job, t, blob, ready_at))
        elif self.decode_pool is None:
            job.blobs[t] = (blob, ready_at)
            job.finish_one()
        else:
            job.futures.append(self.decode_pool.submit(self._decode_tensor, job, t, blob,
                                                       ready_at))

    def _decode_tensor(self, job: _ExpertJob, t: int, blob: bytes, ready_at: float) -> None:
        """Decode worker: wait for the bytes to arrive (the sign-mantissa bytes, booked before
        them, have arrived too), check and decompress them."""
        if job.cancelled:
            return
        try:
            wait_until(ready_at)
            t0 = time.perf_counter()
            exp = self._decompress(job.entries[t], blob)
            self.stats.add_decode(time.perf_counter() - t0, on_compute=False)
            with job.lock:
                job.exps[t] = exp
            job.finish_one()
        except BaseException as exc:  # noqa: BLE001 - handed to the compute thread
            job.fail(exc)

    def _finish(self, job: _ExpertJob) -> ExpertWeights:
        """Rebuild the expert's tensors on the compute thread (see the class docstring), after
        decoding them here when there are no decode workers; with a decode process, copy them
        out of its slot (and a miss's sign-mantissa bytes when the SM pool admits them). An
        expert the full pool will keep is copied out and its slot given back; any other is
        lent in place (``_deliver`` gives the slot back once the layer has used it), which
        saves a copy of every tensor the pool drops after use."""
        if self.decoder is not None:
            t0 = time.perf_counter()
            specs, keep = job.layout.tensors, job.decision == FULL
            tensors = [self.store.prove(entry, self.decoder.words(job.slot, spec, entry,
                                                                  copy=keep))
                       for spec, entry in zip(specs, job.entries, strict=True)]
            if job.type_i and job.decision == SM:
                job.raws = [self.decoder.take(job.slot, *spec["raw"][:2]) for spec in specs]
            self.stats.rebuild_s += time.perf_counter() - t0
            if keep:
                self._release(job)
            return ExpertWeights(*tensors)
        tensors = []
        for t, entry in enumerate(job.entries):
            exp = job.exps[t]
            if exp is None:
                blob, ready_at = job.blobs[t]
                t0 = time.perf_counter()
                wait_until(ready_at)
                self.stats.wait_s += time.perf_counter() - t0
                t0 = time.perf_counter()
                exp = self._decompress(entry, blob)
                self.stats.add_decode(time.perf_counter() - t0, on_compute=True)
            t0 = time.perf_counter()
            tensors.append(self.store.prove(entry, _rebuild(entry, exp, job.raws[t])))
            self.stats.rebuild_s += time.perf_counter() - t0
        return ExpertWeights(*tensors)

    def _throttle(self) -> None:
        """Until the next read may be booked (at most ``READ_AHEAD_S`` ahead on a capped
        channel); when the I/O thread decodes, it decodes the exponents that have arrived
        meanwhile instead of sleeping."""
        cap = self.reader.cap
        if not self.io_decode:
            if cap is not None:
                cap.throttle(READ_AHEAD_S)
            return
        pending = self._pending
        while True:
            now = time.perf_counter()
            opens_at = cap.opens_at(READ_AHEAD_S) if cap is not None else now
            if pending and pending[0][3] <= now:
                self._decode_arrived(*pending.popleft()[:3])
            elif opens_at <= now:
                return
            else:
                wait_until(min(opens_at, pending[0][3]) if pending else opens_at)

    def _drain(self) -> None:
        """I/O thread, after a batch's last read: decode what is still pending as it arrives."""
        while self._pending:
            job, t, blob, ready_at = self._pending.popleft()
            wait_until(ready_at)
            self._decode_arrived(job, t, blob)

    def _decode_arrived(self, job: _ExpertJob, t: int, blob: bytes | memoryview) -> None:
        """I/O thread: check and decompress a tensor's exponents once the channel has
        delivered them."""
        if job.cancelled:
            return
        try:
            t0 = time.perf_counter()
            exp = self._decompress(job.entries[t], blob)
            self.stats.add_decode(time.perf_counter() - t0, on_compute=False)
            job.exps[t] = exp
            job.finish_one()
        except BaseException as exc:  # noqa: BLE001 - handed to the compute thread
            job.fail(exc)

    # -- the provider ------------------------------------------------------------------------
    def _submit(self, jobs: list[Job[_ExpertJob]]) -> None:
        """Queue the jobs' reads in the Type-I/Type-II order (scheduler.py), each tensor's
        sign-mantissa bytes before its exponents."""
        dm, t = self.delay_model, self.tensors_per_expert
        core = SchedulerCore(dm.workers, t, dm.decode_s, t * dm.sm_read_s,
                             exp_read_s=t * dm.sm_read_s * dm.compression_ratio)
        order = [scheduled.item for scheduled in schedule(jobs, core)]
        if not order:
            return
        if self.decoder is not None:  # a job without a free slot waits for one, in order
            for job in order:
                if self._free_slots and not self._backlog:
                    self._dispatch(job)
                else:
                    self._backlog.append(job)
            return
        # One I/O task for the batch, not one per job: every task handed to the I/O thread wakes
        # it, and on a loaded 2-core machine the wake-ups cost the compute thread about 1 ms
        # each (cProfile: 0.95 s of a 5.1 s run in SimpleQueue.put, 1,029 calls).
        batch = self.io_thread.submit(self._read_jobs, order)
        for job in order:
            job.io_future = batch

    # -- the decode process ------------------------------------------------------------------
    def _dispatch(self, job: _ExpertJob) -> None:
        """Send a job to a free slot (an SM-only hit's sign-mantissa bytes go there first)."""
        job.slot = self._free_slots.pop()
        job.layout, layout_json = self._layout(job.layer, job.expert, job.type_i)
        if not job.type_i:
            for spec, raw in zip(job.layout.tensors, job.raws, strict=True):
                self.decoder.put(job.slot, spec["raw"][0], raw)
        job.id = next(self._ids)
        job.pending = 1  # one event for the whole expert
        self._sent[job.id] = job
        self.decoder.send_raw(f'{{"op": "job", "id": {job.id}, '
                              f'"base": {job.slot * self.decoder.slot_bytes}, '
                              f'"layout": {layout_json}}}')

    def _release(self, job: _ExpertJob) -> None:
        """Give the job's slot back and hand it to the next job waiting for one."""
        if job.slot is not None:
            self._free_slots.append(job.slot)
            job.slot = None
        while self._backlog and self._free_slots:
            self._dispatch(self._backlog.popleft())

    def _pump(self, block: bool) -> None:
        """Take the decode process's events: jobs done, failed or dropped."""
        for event in self.decoder.events(block):
            job = self._sent.pop(event["id"])
            stats = self.stats
            self.reader.stats.add_reads(event["reads"], event["bytes"])
            stats.add_decode(event["decode_s"], on_compute=False)
            stats.worker_rebuild_s += event["rebuild_s"]
            stats.io_cpu_s = event["cpu_s"] - self._cpu_base
            if "ok" in event and not job.cancelled:
                job.finish_one()  # the slot is released once copied out or used in place
                continue
            self._release(job)
            if "error" in event and not job.cancelled:
                job.fail(StoreError(event["error"], hint=event["hint"]))

    def _next_done(self, done: queue.SimpleQueue) -> _ExpertJob:
        if self.decoder is not None:
            while done.empty():
                self._pump(block=True)
        return done.get()

    def _cancel(self, job: _ExpertJob) -> None:
        if self.decoder is None:
            job.cancel()
            return
        job.cancelled = True
        if job.id in self._sent:
            self.decoder.send_raw(f'{{"op": "cancel", "id": {job.id}}}')
        elif job in self._backlog:
            self._backlog.remove(job)
        else:
            self._release(job)  # finished, never used

    def _abandon(self, jobs: list[_ExpertJob]) -> None:
        """After an error: cancel what is left of ``jobs`` and wait until it has ended."""
        if self.decoder is None:
            for job in jobs:
                job.wait()
            return
        for job in jobs:
            self._cancel(job)
        while any(job.id in self._sent for job in jobs):
            self._pump(block=True)

    def _read_jobs(self, jobs: list[_ExpertJob]) -> None:
        t0 = time.thread_time()
        for job in jobs:
            self._read_job(job)
        self._drain()
        self.stats.io_cpu_s += time.thread_time() - t0

    def _fresh_guesses(self) -> dict[bool, GuessRecord]:
        """Empty records of the early (False) and the late (True) guesses."""
        cfg = self.store.config
        return {late: GuessRecord(cfg.moe_layers, cfg.top_k) for late in (False, True)}

    def _rank_pays(self, layer: int, rank: int, late: bool) -> bool:
        """Whether one token's guesses of this rank for this layer (early or late ones) are
        right often enough to prefetch them."""
        gate = (PREFETCH_MIN_PRECISION_PROCESS if self.decoder is not None
                else PREFETCH_MIN_PRECISION)
        return self.guesses[late].pays(layer, rank, gate)

    def _drop_prefetches(self, keep_layer: int | None = None) -> None:
        for key in [k for k in self.prefetched if k[0] != keep_layer]:
            self._cancel(self.prefetched.pop(key))
            self.stats.prefetch_wasted += 1

    def prefetch(self, layer: int, tokens: dict[int, int], late: bool = False) -> None:
        """Start reading and decoding the experts ``layer`` is predicted to use (``tokens``: the
        predicted token counts), queued behind the reads already submitted. ``fetch`` adopts
        the ones the layer really routes to and cancels the rest; nothing enters a pool before
        its use, so the admission and eviction decisions stay those of on-demand serving.
        A ``late`` guess, made once the layer before has finished, replaces the early one: its
        prefetches still unfinished that the late guess leaves out are cancelled. Each kind
        is gated by its own record. The guess is recorded even with prefetching off, to
        measure the predictor."""
        self.predictions[layer, late] = list(tokens)
        if not self.prefetch_enabled:
            return
        self._drop_prefetches(keep_layer=layer)
        if late:
            for key in [k for k, job in self.prefetched.items()
                        if k[0] == layer and k[1] not in tokens and not job.over]:
                self._cancel(self.prefetched.pop(key))
                self.stats.prefetch_wasted += 1
        full, sm = self.cache.full[layer], self.cache.sm[layer]
        one_token = sum(tokens.values()) == self.store.config.top_k  # else a prompt: all of it
        jobs = []
        for rank, (expert, n) in enumerate(tokens.items()):
            key = (layer, expert)
            if (expert in full or key in self.prefetched
                    or (one_token and not self._rank_pays(layer, rank, late))):
                continue
            raws = sm.peek(expert)  # the hit is counted when the layer uses it
            job = _ExpertJob(layer, expert, n, self.store.expert_entries(layer, expert), raws,
                             decision="")
            self.prefetched[key] = job
            jobs.append(Job(n, job.type_i, job))
        self._submit(jobs)

    def fetch(self, layer: int, tokens: dict[int, int]) -> Iterator[tuple[int, ExpertWeights]]:
        """Submit the layer's reads now (before any prefetch for the next layer is queued) and
        return the experts as they become ready."""
        cache = self.cache
        full, sm = cache.full[layer], cache.sm[layer]
        cache.record(layer, tokens)
        one_token = sum(tokens.values()) == self.store.config.top_k
        for late, record in self.guesses.items():
            guess = self.predictions.pop((layer, late), None)
            if guess is None or not one_token:
                continue
            record.record(layer, guess, tokens)
            if not late:  # the predictor's figures are the early guess's (the lookahead)
                self.stats.predicted += len(guess)
                self.stats.predicted_right += len(set(guess) & set(tokens))
                self.stats.routed_after_prediction += len(tokens)
        ready = [e for e in sorted(tokens) if e in full]
        full.locked.update(ready)
        done: queue.SimpleQueue = queue.SimpleQueue()
        jobs, adopted = [], []
        for expert in sorted(tokens):
            if expert in full:
                continue
            decision = cache.decide(layer, expert)
            raws = None
            if expert in sm:
                raws = sm.hit(expert, tokens[expert])
                sm.locked.add(expert)
            job = self.prefetched.pop((layer, expert), None)
            if job is not None:
                job.tokens, job.decision = tokens[expert], decision
                job.deliver_to(done)
                adopted.append(job)
                continue
            job = _ExpertJob(layer, expert, tokens[expert],
                             self.store.expert_entries(layer, expert), raws, decision, done)
            jobs.append(Job(tokens[expert], job.type_i, job))
        self._drop_prefetches()  # mispredicted: whatever has not started is cancelled
        self._submit(jobs)
        self.stats.prefetched += len(adopted)
        return self._deliver(layer, tokens, ready, [j.item for j in jobs] + adopted, done)

    def _deliver(self, layer: int, tokens: dict[int, int], ready: list[int],
                 jobs: list[_ExpertJob], done: queue.SimpleQueue
                 ) -> Iterator[tuple[int, ExpertWeights]]:
        full, sm = self.cache.full[layer], self.cache.sm[layer]
        delivered = False
        lent: _ExpertJob | None = None
        arrived: list[tuple[_ExpertJob, ExpertWeights | None]] = []
        try:
            for expert in ready:
                self.stats.activations += 1
                self.stats.full_hits += 1
                yield expert, full.hit(expert, tokens[expert])
            for _ in jobs:
                t0 = time.perf_counter()
                job = self._next_done(done)
                self.stats.wait_s += time.perf_counter() - t0
                if job.error is not None:
                    raise job.error
                weights = self._finish(job)
                self.stats.activations += 1
                if job.type_i:
                    self.stats.misses += 1
                else:
                    self.stats.sm_hits += 1
                if job.decision in (FULL, SM):  # the rest is dropped after its use
                    arrived.append((job, weights if job.decision == FULL else None))
                lent = job
                yield job.expert, weights
                del weights
                self._release(lent)  # used: a slot lent in place may be reused now
                lent = None
            # Admitted in expert order once the step is done, not in the order the reads
            # happened to finish: the pools, and so the hits, then do not depend on timing
            # (nor on what a prefetch started early), and every round serves the same way.
            # Until then the step holds only what its pools will keep.
            for job, weights in sorted(arrived, key=lambda pair: pair[0].expert):
                self._admit(layer, job, weights)
            delivered = True
        finally:
            if not delivered:  # an error: let the rest finish before the pools unlock
                if lent is not None:
                    self._release(lent)
                self._abandon(jobs)
            full.locked.clear()
            sm.locked.clear()

    def _admit(self, layer: int, job: _ExpertJob, weights: ExpertWeights | None) -> None:
        full, sm = self.cache.full[layer], self.cache.sm[layer]
        if job.decision == FULL and full.admit(job.expert, weights, job.tokens):
            sm.remove(job.expert)  # exclusive pools
        elif job.decision == SM and job.expert not in sm:
            sm.admit(job.expert, list(job.raws), job.tokens)

    def describe(self) -> dict[str, object]:
        return {"policy": self.policy, "workers": self.workers,
                "decode": ("in a decode process" if self.decoder is not None else
                           "decode workers" if self.workers else
                           "on the I/O thread" if self.io_decode else "on the compute thread"),
                "decode_arena_bytes": self.decoder.arena_bytes if self.decoder else 0,
                "chunks": self.chunks,
                "prefetch": "lookahead routing" if self.prefetch_enabled else "off",
                "predictor_precision_by_rank": self.guesses[False].by_rank(),
                "predictor_precision_by_layer_and_rank": {
                    "early" if not late else "late": record.by_layer()
                    for late, record in self.guesses.items()},
                "plan": self.plan.to_json(),
                "calibration": None if self.calibration is None else {
                    "tokens": self.calibration["tokens"],
                    "layer_compute_ms": self.calibration["layer_compute_s"] * 1e3,
                    "decode_ms_per_tensor": self.calibration["decode_s"] * 1e3,
                    "rebuild_ms_per_tensor": self.calibration["rebuild_s"] * 1e3},
                "profile": {"decode_ms_per_tensor": self.profile["decode_s"] * 1e3,
                            "rebuild_ms_per_tensor": self.profile["rebuild_s"] * 1e3,
                            "sm_read_ms_per_tensor": self.profile["sm_read_s"] * 1e3,
                            "compression_ratio": self.profile["cr"]},
                "full_slot_bytes": self.full_bytes, "sm_slot_bytes": self.sm_bytes,
                "pool_capacity_bytes": self.cache.capacity_bytes,
                "pool_used_bytes": self.cache.used_bytes,
                "bytes_read": self.reader.stats.bytes, "reads": self.reader.stats.reads}

    def close(self) -> None:
        self._drop_prefetches()
        if self.decode_pool is not None:
            self.decode_pool.shutdown(wait=True)
        if self.io_thread is not None:
            self.io_thread.shutdown(wait=True)
        if self.decoder is not None:
            self.decoder.close()
        self.reader.close()


__all__ = ["ExpertStats", "MemoryExperts", "NaiveOffload", "ZipMoEExperts"]
