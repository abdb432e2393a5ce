"""The decode process [ours, for Python]: one process makes every read and decodes and rebuilds
each expert in shared memory, so none of its work holds the compute thread's GIL.

The authors' C++ engine has one I/O thread for sign-mantissa bytes and L workers that each read
and decompress an exponent chunk, beside the GPU. Here one process (decode_process.py,
kernels/zipmoe_decoder.py) makes every read in the scheduler's order, straight into a
shared-memory slot per expert, booked on the capped channel up to ``READ_AHEAD_S`` ahead; as
each tensor's bytes arrive it checks, decompresses and rebuilds them there, and the compute
thread copies out the experts the full pool keeps and uses the others in place (lent until the
layer has used them). Why a process and not threads: docs/methods/zipmoe.md, "Decode process".
"""
from __future__ import annotations

import collections
import itertools
import json
import queue
import time

from edgekit.methods.zipmoe.cache import FULL, SM
from edgekit.methods.zipmoe.decode_process import DecodeProcess, ExpertLayout, expert_layout
from edgekit.methods.zipmoe.model import ExpertWeights
from edgekit.methods.zipmoe.providers.decoder import PREFETCH_MIN_PRECISION_PROCESS
from edgekit.methods.zipmoe.providers.jobs import ExpertJob
from edgekit.methods.zipmoe.providers.reads import READ_AHEAD_S
from edgekit.methods.zipmoe.providers.stats import ExpertStats
from edgekit.methods.zipmoe.store import Store, StoreError
from edgekit.storage import StorageReader

# [ours] Expert slots of the decode process's arena per routed expert (top-k): a layer's own
# reads and the next layer's prefetch fit beside the slots still copied out or lent; a prefill
# that routes to more experts streams them through (working memory beside the budget, reported
# by ``describe``), capped at ``ARENA_MAX_BYTES`` for very large experts (at least 2 slots).
ARENA_SLOTS_PER_TOP_K = 3
ARENA_MAX_BYTES = 1 << 30


class ProcessDecoder:
    """``decode_on="process"``, the default on Linux: jobs go to free arena slots in the
    scheduler's order (the rest wait in ``_backlog``), events come back through ``_pump``."""

    description = "in a decode process"
    delay_workers = 1
    prefetch_gate = PREFETCH_MIN_PRECISION_PROCESS
    rebuilds_off_compute = True

    def __init__(self, store: Store, reader: StorageReader, stats: ExpertStats,
                 workers: int) -> None:
        """``workers`` is only read for a quirk the single-class provider had, kept as it was:
        the delay model is told the compute thread decodes when there are no decode workers
        (``workers == 0``), though with a process it never does. On a 2-core machine
        (``engine.default_workers`` gives 0) the plan is made for that slower pipeline."""
        cfg = store.config
        self.store, self.reader, self.stats = store, reader, stats
        self.decode_on_compute = workers == 0
        self._layouts: dict[tuple[int, int, bool], tuple[ExpertLayout, str]] = {}
        self._sent: dict[int, ExpertJob] = {}  # jobs in the decode process, by id
        self._backlog: collections.deque[ExpertJob] = collections.deque()  # waiting for a slot
        self._ids = itertools.count()
        self._cpu_base = 0.0  # the decode process's CPU time when the statistics started
        slot_bytes = max(self._layout(layer, expert, True)[0].size
                         for layer in cfg.moe_layers for expert in range(cfg.num_experts))
        slots = max(2, min(ARENA_SLOTS_PER_TOP_K * cfg.top_k, ARENA_MAX_BYTES // slot_bytes))
        self.process = DecodeProcess(store.data_path, reader, store.codec, slot_bytes, slots,
                                     READ_AHEAD_S)
        self._free_slots = list(range(slots))[::-1]

    @property
    def arena_bytes(self) -> int:
        return self.process.arena_bytes

    def _layout(self, layer: int, expert: int, type_i: bool) -> tuple[ExpertLayout, str]:
        """An expert's slot layout, and its JSON for the decode process (made once)."""
        key = (layer, expert, type_i)
        if key not in self._layouts:
            layout = expert_layout(self.store.expert_entries(layer, expert), type_i)
            self._layouts[key] = (layout, json.dumps({"reads": layout.reads,
                                                      "tensors": layout.tensors}))
        return self._layouts[key]

    def submit(self, order: list[ExpertJob]) -> None:
        """A job without a free slot waits for one, in order."""
        for job in order:
            if self._free_slots and not self._backlog:
                self._dispatch(job)
            else:
                self._backlog.append(job)

    def _dispatch(self, job: ExpertJob) -> None:
        """Send a job to a free slot (an SM-only hit's sign-mantissa bytes go there first)."""
        job.slot = self._free_slots.pop()
        job.layout, layout_json = self._layout(job.layer, job.expert, job.type_i)
        if not job.type_i:
            for spec, raw in zip(job.layout.tensors, job.raws, strict=True):
                self.process.put(job.slot, spec["raw"][0], raw)
        job.id = next(self._ids)
        job.pending = 1  # one event for the whole expert
        self._sent[job.id] = job
        self.process.send_raw(f'{{"op": "job", "id": {job.id}, '
                              f'"base": {job.slot * self.process.slot_bytes}, '
                              f'"layout": {layout_json}}}')

    def release(self, job: ExpertJob) -> None:
        """Give the job's slot back and hand it to the next job waiting for one."""
        if job.slot is not None:
            self._free_slots.append(job.slot)
            job.slot = None
        while self._backlog and self._free_slots:
            self._dispatch(self._backlog.popleft())

    def _pump(self, block: bool) -> None:
        """Take the decode process's events: jobs done, failed or dropped."""
        for event in self.process.events(block):
            job = self._sent.pop(event["id"])
            stats = self.stats
            self.reader.stats.add_reads(event["reads"], event["bytes"])
            stats.add_decode(event["decode_s"], on_compute=False)
            stats.worker_rebuild_s += event["rebuild_s"]
            stats.io_cpu_s = event["cpu_s"] - self._cpu_base
            if "ok" in event and not job.cancelled:
                job.finish_one()  # the slot is released once copied out or used in place
                continue
            self.release(job)
            if "error" in event and not job.cancelled:
                job.fail(StoreError(event["error"], hint=event["hint"]))

    def next_done(self, done: queue.SimpleQueue) -> ExpertJob:
        while done.empty():
            self._pump(block=True)
        return done.get()

    def finish(self, job: ExpertJob) -> ExpertWeights:
        """Copy the expert's tensors out of its slot (and a miss's sign-mantissa bytes when the
        SM pool admits them). An expert the full pool will keep is copied out and its slot given
        back; any other is lent in place (``release`` gives the slot back once the layer has
        used it), which saves a copy of every tensor the pool drops after use."""
        t0 = time.perf_counter()
        specs, keep = job.layout.tensors, job.decision == FULL
        tensors = [self.store.prove(entry, self.process.words(job.slot, spec, entry, copy=keep))
                   for spec, entry in zip(specs, job.entries, strict=True)]
        if job.type_i and job.decision == SM:
            job.raws = [self.process.take(job.slot, *spec["raw"][:2]) for spec in specs]
        self.stats.rebuild_s += time.perf_counter() - t0
        if keep:
            self.release(job)
        return ExpertWeights(*tensors)

    def cancel(self, job: ExpertJob) -> None:
        job.cancelled = True
        if job.id in self._sent:
            self.process.send_raw(f'{{"op": "cancel", "id": {job.id}}}')
        elif job in self._backlog:
            self._backlog.remove(job)
        else:
            self.release(job)  # finished, never used

    def abandon(self, jobs: list[ExpertJob]) -> None:
        for job in jobs:
            self.cancel(job)
        while any(job.id in self._sent for job in jobs):
            self._pump(block=True)

    def restart_counts(self) -> None:
        """The process's CPU time counts on from here (``io_cpu_s`` is its total less this)."""
        self._cpu_base += self.stats.io_cpu_s

    def close(self) -> None:
        self.process.close()
