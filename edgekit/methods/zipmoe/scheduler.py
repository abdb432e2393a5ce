"""ZipMoE's Type-I / Type-II job order (the authors' ``ZipMoESchedulerFunc``; arXiv 2601.21198).

A layer's experts that are not in the full pool become jobs:

    Type-I   sign-mantissa bytes not cached: the I/O thread reads them, the decode workers read
             and decompress the exponent chunks
    Type-II  sign-mantissa bytes cached: only the workers' exponent reads and decodes

Both kinds sit in max-heaps by token count. The loop submits one Type-I job, then Type-II jobs
until the decode workers' estimated busy time exceeds the I/O thread's, and repeats, so the one
I/O channel and the L workers stay busy together (makespan <= (3 - 1/L) OPT [paper]).

[ours] edgekit's engine reads the exponents on the I/O thread too (providers/threads.py), so its
``SchedulerCore`` counts each job's exponent reads as I/O time (``exp_read_s``) and only
decoding as worker time; with ``exp_read_s = 0`` and the read inside ``op_s`` it is the authors'.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

J = TypeVar("J")


@dataclass
class SchedulerCore:
    """Running estimate of the I/O thread's and the workers' busy time for one layer."""

    workers: int
    ops_per_job: int           # worker operations per job (authors: K chunks x T tensors)
    op_s: float                # one operation (authors: d_dec / K + its exponent read)
    sm_read_s: float           # one job's sign-mantissa reads: T x d_sm
    exp_read_s: float = 0.0    # one job's exponent reads when the I/O thread does them
    ops: int = 0
    sm_reads: int = 0
    jobs: int = 0

    def add(self, type_i: bool) -> bool:
        """Account for one job; True when decoding is now the longer of the two."""
        self.sm_reads += int(type_i)
        self.jobs += 1
        self.ops += self.ops_per_job
        compute = math.ceil(self.ops / self.workers) * self.op_s
        return compute > self.sm_reads * self.sm_read_s + self.jobs * self.exp_read_s


@dataclass(frozen=True)
class Job(Generic[J]):
    tokens: int
    type_i: bool
    item: J


def schedule(jobs: Iterable[Job[J]], core: SchedulerCore) -> list[Job[J]]:
    """Submission order of ``jobs`` (most tokens first within each type)."""
    seq = itertools.count()
    type_i: list[tuple[int, int, Job[J]]] = []
    type_ii: list[tuple[int, int, Job[J]]] = []
    for job in jobs:
        heapq.heappush(type_i if job.type_i else type_ii, (-job.tokens, next(seq), job))
    order: list[Job[J]] = []
    while type_i or type_ii:
        end_block = False
        if type_i:
            order.append(heapq.heappop(type_i)[2])
            end_block = core.add(True)
        while type_ii and not end_block:
            order.append(heapq.heappop(type_ii)[2])
            end_block = core.add(False)
    return order
