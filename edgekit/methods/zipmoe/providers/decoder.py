"""The one interface behind which ZipMoE's decode strategies sit (``ZipMoEExperts.decoder``).

``ZipMoEExperts`` (zipmoe.py) keeps the pools, the plan, the job order and the prefetches; a
decoder turns the ordered jobs into experts. Four do, one per file, and ``make_decoder``
(zipmoe.py) picks one from ``decode_on`` and the worker count:

    process.py         a decode process reads, decompresses and rebuilds into shared memory
    workers.py         the I/O thread reads, L decode-worker threads decompress
    io_thread.py       no worker: the I/O thread decompresses between its reads
    compute_thread.py  no worker: the compute thread decompresses just before rebuilding

The compute thread calls every method; a decoder's own threads or process do the rest.
"""
from __future__ import annotations

import queue
from typing import Protocol

from edgekit.methods.zipmoe.model import ExpertWeights
from edgekit.methods.zipmoe.providers.jobs import ExpertJob

# [ours] The predictor's guesses come ranked (most likely first); a rank is prefetched only while
# at least this share of its guesses for that layer proves right (guesses.py). On a device whose
# reads are the limit, a prefetch right with probability p reads (1 - p) / p wasted experts per
# useful one ahead of the layer's own reads: at 0.75, one in three (measured:
# docs/methods/zipmoe.md, "Prefetch gates").
PREFETCH_MIN_PRECISION = 0.75
# With the decode process a wrong guess costs channel time only, not the compute thread's CPU,
# and its reads are cancelled once the layer routes (docs/methods/zipmoe.md, "Prefetch gates").
PREFETCH_MIN_PRECISION_PROCESS = 0.5


class ExpertDecoder(Protocol):
    """Reads and decodes ``ExpertJob``s in the order given; lends or hands back their experts."""

    description: str         # where the exponents are decoded (``describe``)
    delay_workers: int       # decode lanes the planner's delay model counts
    decode_on_compute: bool  # whether the delay model puts decoding on the compute thread
    prefetch_gate: float     # the precision a guess rank needs to be prefetched
    rebuilds_off_compute: bool  # the decoder rebuilds; the compute thread only copies out
    arena_bytes: int         # working memory beside the budget (shared-memory slots)

    def submit(self, order: list[ExpertJob]) -> None:
        """Start the jobs' reads and decodes in this order (the scheduler's)."""

    def next_done(self, done: queue.SimpleQueue) -> ExpertJob:
        """The next job of a layer step that has finished or failed (waits for one)."""

    def finish(self, job: ExpertJob) -> ExpertWeights:
        """The finished job's expert, on the compute thread."""

    def release(self, job: ExpertJob) -> None:
        """The layer has used the job's expert: what it was lent in may be reused."""

    def cancel(self, job: ExpertJob) -> None:
        """Drop a job nobody needs (a wrong prefetch); what has not started does not."""

    def abandon(self, jobs: list[ExpertJob]) -> None:
        """After an error: cancel what is left of ``jobs`` and wait until it has ended."""

    def restart_counts(self) -> None:
        """The statistics are about to start afresh (``ExpertStats.reset``)."""

    def close(self) -> None:
        """Stop the decoder's threads or process; queued work is dropped."""
