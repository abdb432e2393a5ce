"""What the thread decoders share: one I/O thread makes every read, the compute thread rebuilds.

The I/O thread makes the reads in the scheduler's order, each tensor's sign-mantissa bytes
before its exponents, booking them up to ``READ_AHEAD_S`` ahead (``read_ahead``, as an NVMe
queue holds several commands); each tensor's exponent bytes then go to whoever decompresses them
(``_hand_over``: workers.py, io_thread.py, compute_thread.py). The compute thread rebuilds each
tensor (vectorised) just before using it, like the authors' reconstruction kernel on the compute
stream. Why reads are not made by the workers: docs/methods/zipmoe.md, "Threads".
"""
from __future__ import annotations

import concurrent.futures as cf
import queue
import time
from abc import ABC, abstractmethod

import numpy as np

from edgekit.methods.zipmoe.model import ExpertWeights
from edgekit.methods.zipmoe.providers.decoder import PREFETCH_MIN_PRECISION
from edgekit.methods.zipmoe.providers.jobs import ExpertJob
from edgekit.methods.zipmoe.providers.reads import (
    READ_AHEAD_S,
    expert_span,
    exponent_span,
    rebuild,
)
from edgekit.methods.zipmoe.providers.stats import ExpertStats
from edgekit.methods.zipmoe.store import Store, check_extent
from edgekit.storage import StorageReader


class ThreadDecoder(ABC):
    """The I/O thread's reads and the compute thread's rebuild; subclasses decompress."""

    description: str
    delay_workers = 1
    decode_on_compute = False
    prefetch_gate = PREFETCH_MIN_PRECISION
    rebuilds_off_compute = False
    arena_bytes = 0

    def __init__(self, store: Store, reader: StorageReader, stats: ExpertStats) -> None:
        self.store, self.reader, self.stats = store, reader, stats
        self.codec = store.codec
        self.io_thread = cf.ThreadPoolExecutor(1, thread_name_prefix="zipmoe-io")

    # -- the compute thread ------------------------------------------------------------------
    def submit(self, order: list[ExpertJob]) -> None:
        """One I/O task for the batch, not one per job: every task handed to the I/O thread
        wakes it, which costs the compute thread about 1 ms each on a loaded 2-core machine
        (docs/methods/zipmoe.md, "Threads")."""
        batch = self.io_thread.submit(self._read_jobs, order)
        for job in order:
            job.io_future = batch

    def next_done(self, done: queue.SimpleQueue) -> ExpertJob:
        return done.get()

    def finish(self, job: ExpertJob) -> ExpertWeights:
        """Rebuild the expert's tensors on the compute thread."""
        tensors = []
        for t, entry in enumerate(job.entries):
            exp = self._exponents(job, t)
            t0 = time.perf_counter()
            tensors.append(self.store.prove(entry, rebuild(entry, exp, job.raws[t])))
            self.stats.rebuild_s += time.perf_counter() - t0
        return ExpertWeights(*tensors)

    def _exponents(self, job: ExpertJob, t: int) -> np.ndarray:
        """Tensor ``t``'s exponent plane, decoded off the compute thread."""
        return job.exps[t]

    def release(self, job: ExpertJob) -> None:  # noqa: B027 - a default that has nothing to do
        """Nothing is lent: every expert is rebuilt into its own tensors."""

    def cancel(self, job: ExpertJob) -> None:
        job.cancel()

    def abandon(self, jobs: list[ExpertJob]) -> None:
        for job in jobs:
            job.wait()

    def restart_counts(self) -> None:  # noqa: B027 - a default that has nothing to do
        """The I/O thread adds its CPU time to the statistics as it goes."""

    def close(self) -> None:
        self.io_thread.shutdown(wait=True)

    # -- the I/O thread ----------------------------------------------------------------------
    def _read_jobs(self, jobs: list[ExpertJob]) -> None:
        t0 = time.thread_time()
        for job in jobs:
            self._read_job(job)
        self._drain()
        self.stats.io_cpu_s += time.thread_time() - t0

    def _read_job(self, job: ExpertJob) -> None:
        """The job's reads in order, each tensor's sign-mantissa bytes (Type-I) before its
        exponents, which are handed over at once. A Type-I expert whose streams lie back to back
        in the store (as ``write_store`` lays them) is one read instead of two per tensor. Reads
        are booked on a capped channel at most ``READ_AHEAD_S`` ahead, so a cancelled prefetch
        stops early."""
        try:
            span = expert_span(job.entries) if job.type_i else None
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
                    offset, size = exponent_span(entry)
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
                blob, ready_at = self.reader.read_ahead(*exponent_span(entry))
                self._hand_over(job, t, blob, ready_at)
        except BaseException as exc:  # noqa: BLE001 - handed to the compute thread
            job.fail(exc)

    def _throttle(self) -> None:
        """Until the next read may be booked (at most ``READ_AHEAD_S`` ahead on a capped
        channel)."""
        cap = self.reader.cap
        if cap is not None:
            cap.throttle(READ_AHEAD_S)

    def _drain(self) -> None:  # noqa: B027 - a default that has nothing to do
        """After a batch's last read: whatever the I/O thread still has to do."""

    @abstractmethod
    def _hand_over(self, job: ExpertJob, t: int, blob: bytes | memoryview,
                   ready_at: float) -> None:
        """Tensor ``t``'s exponent bytes, which the channel delivers at ``ready_at``, to whoever
        decompresses them: each subclass says who."""
