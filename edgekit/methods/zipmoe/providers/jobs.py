"""One expert's reads and decodes, handed from the decoder that makes them to the layer step that
uses them."""
from __future__ import annotations

import concurrent.futures as cf
import queue
import threading

import numpy as np

from edgekit.methods.zipmoe.decode_process import ExpertLayout
from edgekit.methods.zipmoe.store import TensorEntry


class ExpertJob:
    """Reads and decodes of one expert; when the last operation finishes (or one fails) the job
    goes to the ``done`` queue of the layer step that uses it. A prefetched job gets its queue
    only when that step adopts it (``deliver_to``), perhaps after it has finished.

    A Type-I job (a miss) reads the sign-mantissa bytes too; a Type-II one (an SM-only hit) has
    them from the pool (``raws``). The fields below ``pending`` belong to one decoder each."""

    def __init__(self, layer: int, expert: int, tokens: int, entries: tuple[TensorEntry, ...],
                 raws: list[bytes] | None, decision: str,
                 done: queue.SimpleQueue | None = None) -> None:
        self.layer, self.expert, self.tokens = layer, expert, tokens
        self.entries, self.decision = entries, decision
        self.type_i = raws is None
        self.raws: list[bytes | None] = [None] * len(entries) if raws is None else list(raws)
        self.pending = len(entries)  # exponent decodes (reads, without decode workers)
        self.cancelled = False
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.done = done
        self.over = False  # finished or failed
        # threads (threads.py): each tensor's exponent plane, or with no decode worker its
        # exponent bytes and when they arrive; the decodes queued and the I/O batch
        self.exps: list[np.ndarray | None] = [None] * len(entries)
        self.blobs: list[tuple[bytes | memoryview, float] | None] = [None] * len(entries)
        self.futures: list[cf.Future] = []  # the I/O thread appends the decodes it queues
        self.io_future: cf.Future | None = None  # the I/O batch holding the job's reads
        # the decode process (process.py): the job's id there, its arena slot and layout
        self.id = -1
        self.slot: int | None = None
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
