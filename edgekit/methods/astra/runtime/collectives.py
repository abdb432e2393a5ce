"""Collectives that count the bytes each rank sends and wait the emulated wire time.

Bytes are counted from the tensors, as a ring implementation would send them (gloo's and NCCL's
large-message algorithms are rings):

* all-gather of a chunk per rank: N-1 steps; in step s a rank forwards the chunk of rank r-s.
  Each rank sends the other N-1 ranks' chunks once: (N-1) x chunk bytes.
* all-reduce of S bytes: reduce-scatter then all-gather, 2(N-1) steps of one S/N slice each:
  2(N-1)/N x S bytes.
* all-to-all: N-1 direct messages, the slice meant for each peer.

Each step is one message on the link (``link.message_time``): the data counts as arrived the sum
of the steps' wire times after the real exchange completes. A blocking collective waits all of
it; an all-gather started early (``start_all_gather``) sleeps only what is left when the rank
asks for the data, so compute done meanwhile hides the wire time as on a real link. The measured
time of the real exchange (localhost gloo, including any wait for a slower peer) is recorded
beside the emulated wire time and the part of it the rank waited for.

Gloo exchanges CUDA tensors only in all-reduce and broadcast. With gloo and a model on a GPU
(several ranks sharing one GPU, where NCCL cannot run), the other collectives go through host
memory (``Comm.staged``): the copies are part of the measured exchange, as they are on an edge
device whose network card reads host memory.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from edgekit.methods.astra.runtime.link import LinkSpec, message_time


@dataclass
class CommStats:
    """What one rank sent and waited, summed over a forward pass (reset per pass)."""

    calls: int = 0
    bytes_sent: int = 0
    messages: int = 0
    measured_s: float = 0.0  # real localhost exchange, peer waits included
    emulated_s: float = 0.0  # wire time of the emulated link
    slept_s: float = 0.0  # the part of it the rank waited for (the rest overlapped compute)
    by_op: dict[str, int] = field(default_factory=dict)  # op -> bytes sent

    def add(self, op: str, sizes: Sequence[int], measured: float, emulated: float,
            slept: float | None = None) -> None:
        """``slept`` defaults to all of ``emulated``: a blocking collective hides none of it."""
        self.calls += 1
        self.messages += len(sizes)
        self.bytes_sent += sum(sizes)
        self.by_op[op] = self.by_op.get(op, 0) + sum(sizes)
        self.measured_s += measured
        self.emulated_s += emulated
        self.slept_s += emulated if slept is None else slept

    @property
    def waited_s(self) -> float:
        """Time the rank spent waiting on communication rather than computing."""
        return self.measured_s + self.slept_s


def _split_sizes(total: int, parts: int) -> list[int]:
    base, rest = divmod(total, parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


def all_gather_steps(chunk_bytes: Sequence[int], rank: int) -> list[int]:
    """Message sizes rank ``rank`` sends in a ring all-gather of per-rank chunks."""
    n = len(chunk_bytes)
    return [chunk_bytes[(rank - s) % n] for s in range(n - 1)]


def all_reduce_steps(total_bytes: int, world_size: int) -> list[int]:
    """Message sizes one rank sends in a ring all-reduce (reduce-scatter + all-gather)."""
    slices = _split_sizes(total_bytes, world_size)
    return [max(slices)] * (2 * (world_size - 1)) if world_size > 1 else []


def all_to_all_steps(slice_bytes: Sequence[int], rank: int) -> list[int]:
    """Message sizes one rank sends in an all-to-all: one slice to each peer."""
    return [b for peer, b in enumerate(slice_bytes) if peer != rank]


class PendingGather:
    """An all-gather on the wire. The data counts as arrived ``emulated`` seconds after the real
    exchange completed (noted by a callback on gloo's thread), so compute done meanwhile hides
    the wire time, as it would on a real link."""

    def __init__(self, comm: Comm, out: list[torch.Tensor], counts: Sequence[int],
                 steps: list[int], work: Any) -> None:
        self.comm, self.out, self.counts, self.steps, self.work = comm, out, counts, steps, work
        self.completed: float | None = None
        work.get_future().then(self._note)

    def _note(self, _: Any) -> None:
        self.completed = time.perf_counter()

    def wait(self) -> list[torch.Tensor]:
        started = time.perf_counter()
        self.work.wait()
        blocked = time.perf_counter() - started
        comm = self.comm
        emulated = sum(message_time(comm.link, b, comm.rng) for b in self.steps)
        arrived = (self.completed or time.perf_counter()) + emulated
        slept = max(0.0, arrived - time.perf_counter())
        if slept > 0:
            time.sleep(slept)
        comm.stats.add("all_gather", self.steps, blocked, emulated, slept)
        return [t[:c].to(comm.device) for t, c in zip(self.out, self.counts, strict=False)]


class Comm:
    """A rank's view of the group: real gloo/NCCL collectives plus link emulation and counting."""

    def __init__(self, link: LinkSpec, rank: int, world_size: int,
                 device: torch.device | str = "cpu", staged: bool = False) -> None:
        """``device``: where results belong; ``staged``: exchange through host memory (gloo with
        CUDA tensors)."""
        self.rank, self.world_size = rank, world_size
        self.device, self.staged = torch.device(device), staged
        self.link = link
        self.rng = np.random.default_rng([link.seed, rank])
        self.stats = CommStats()

    def set_link(self, link: LinkSpec) -> None:
        self.link = link
        self.rng = np.random.default_rng([link.seed, self.rank])

    def reset(self) -> CommStats:
        """Start a new forward pass; return the finished pass's stats."""
        done, self.stats = self.stats, CommStats()
        return done

    def _wire(self, op: str, sizes: list[int], started: float) -> None:
        measured = time.perf_counter() - started
        emulated = sum(message_time(self.link, b, self.rng) for b in sizes)
        if emulated > 0:
            time.sleep(emulated)
        self.stats.add(op, sizes, measured, emulated)

    def all_gather(self, local: torch.Tensor, counts: Sequence[int]) -> list[torch.Tensor]:
        """Gather every rank's ``local`` (dim 0 = rank's rows, ``counts[r]`` rows on rank r).

        Chunks are padded to the largest for the exchange; only real rows are counted as sent.
        """
        return self.start_all_gather(local, counts).wait()

    def start_all_gather(self, local: torch.Tensor, counts: Sequence[int]) -> PendingGather:
        """``all_gather`` in flight: the caller computes until it needs the result (``wait``)."""
        row_bytes = local[:1].numel() * local.element_size()  # one row of dim 0
        width = max(counts)
        padded = local.cpu() if self.staged else local
        if local.shape[0] < width:
            pad = padded.new_zeros((width - local.shape[0], *local.shape[1:]))
            padded = torch.cat([local, pad])
        out = [torch.empty_like(padded) for _ in range(self.world_size)]
        steps = all_gather_steps([c * row_bytes for c in counts], self.rank)
        return PendingGather(self, out, counts, steps,
                             dist.all_gather(out, padded.contiguous(), async_op=True))

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over ranks in place (and return it)."""
        started = time.perf_counter()
        dist.all_reduce(tensor)
        self._wire("all_reduce", all_reduce_steps(tensor.numel() * tensor.element_size(),
                                                  self.world_size), started)
        return tensor

    def all_to_all(self, chunks: list[torch.Tensor],
                   sent_bytes: Sequence[int] | None = None) -> list[torch.Tensor]:
        """Send ``chunks[p]`` to rank p; receive one chunk from every rank (same shapes).

        ``sent_bytes[p]``: the real bytes in ``chunks[p]`` when it carries padding.
        """
        started = time.perf_counter()
        sent = [(c.cpu() if self.staged else c).contiguous() for c in chunks]
        out = [torch.empty_like(c) for c in sent]
        dist.all_to_all(out, sent)
        out = [o.to(self.device) for o in out]
        sizes = sent_bytes or [c.numel() * c.element_size() for c in chunks]
        self._wire("all_to_all", all_to_all_steps(sizes, self.rank), started)
        return out
