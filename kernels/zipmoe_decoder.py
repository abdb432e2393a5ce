"""ZipMoE's decode process: reads, checks, decompresses and rebuilds experts into shared memory.

The serving process (``edgekit.methods.zipmoe.decode_process``) starts one of these with
``python -m edgekit.kernels.zipmoe_decoder SETTINGS_JSON`` and three inherited descriptors: a
pipe of jobs, a pipe of events and a memfd arena both processes map; its first event says it
has warmed up. A job names reads (file offset, size, offset in its slot, one per tensor) and
tensors (where each one's sign-mantissa bytes and
exponent chunks lie in the arena, their CRC-32s, where its bf16/fp16/fp32 words go); this process
books each read on the capped channel at most ``read_ahead_s`` ahead (``edgekit.storage``),
reads straight into the arena, and once the channel has delivered a tensor's bytes checks,
decompresses and rebuilds it there. One event per job says it is done, failed (with the
store error's message) or dropped (cancelled before it finished). Closing the job pipe
stops it at once: the serving process has stopped waiting.

Why a process [ours]: the authors' engine decodes on C++ worker threads beside the GPU. In
Python a decode thread beside the compute thread holds the GIL for each of its many short
steps, and on a 2-core machine that made the compute thread's torch calls wait (its own work
1.9x the all-in-memory model's, benchmarks/README.md). A process has its own interpreter, and it
imports neither torch nor the serving engine (0.13 s to start instead of 2.4 s).
"""
from __future__ import annotations

import collections
import contextlib
import json
import mmap
import os
import select
import signal
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from edgekit.kernels.zipmoe_planes import (
    STREAM_HINT,
    StreamError,
    check_stream,
    compress_bytes,
    crc32,
    decode_exponents,
    decompress_bytes,
    reconstruct_into,
)
from edgekit.storage import BLOCK, BandwidthCap, StorageReader

WORDS = {2: np.uint16, 4: np.uint32}


@dataclass
class Job:
    id: int
    reads: list[list[int]]            # [file offset, size, arena offset], in booking order;
                                      # the arena has room for whole 4 KiB blocks
    tensors: list[dict]               # see decode_tensor
    booked: int = 0                   # reads booked so far
    arrivals: list[tuple[float, int, int]] = field(default_factory=list)  # (ready, arena, got)
    decoded: int = 0
    decode_s: float = 0.0
    rebuild_s: float = 0.0
    bytes: int = 0


def read_bytes(arena: memoryview, arrivals: list[tuple[float, int, int]], offset: int,
               size: int) -> memoryview:
    """The bytes a job's reads put at arena ``offset``, up to ``size`` (fewer where a read came
    back short, which ``check_stream`` then refuses)."""
    got = next((a_off + n - offset for _, a_off, n in arrivals
                if a_off <= offset < a_off + max(n, 1)), 0)
    return arena[offset:offset + max(0, min(size, got))]


def touch_pages(buffer: memoryview) -> None:
    """Fault every page of ``buffer`` in now (one byte read per page): a first touch costs a
    page fault per 4 KiB, which serving would otherwise pay inside its first reads."""
    int(np.frombuffer(buffer, np.uint8)[::mmap.PAGESIZE].sum())


def decode_tensor(arena: memoryview, job: Job, spec: dict, codec: str,
                  exponent: np.ndarray) -> None:
    """One tensor: ``spec`` has name, word (2 or 4 bytes), numel, out (arena offset of the
    words), raw [offset, size, crc; -1: put there by the serving process, already checked]
    and chunks [[offset, size, crc, start, stop], ...]; ``exponent`` is scratch of at least
    ``numel`` bytes."""
    name, numel = spec["name"], spec["numel"]
    raw_off, raw_size, raw_crc = spec["raw"]
    raw = arena[raw_off:raw_off + raw_size]
    if raw_crc >= 0:  # read here, not put here
        raw = check_stream(name, "sign-mantissa bytes",
                           read_bytes(arena, job.arrivals, raw_off, raw_size), raw_size, raw_crc)
    out = np.frombuffer(arena, WORDS[spec["word"]], numel, spec["out"])
    exponent = exponent[:numel]
    t0 = time.perf_counter()
    decode_exponents(name, [(read_bytes(arena, job.arrivals, offset, size), size, crc, start,
                             stop) for offset, size, crc, start, stop in spec["chunks"]],
                     exponent, codec)
    t1 = time.perf_counter()
    reconstruct_into(out, exponent, np.frombuffer(raw, np.uint8))
    job.decode_s += t1 - t0
    job.rebuild_s += time.perf_counter() - t1


class Decoder:
    def __init__(self, settings: dict, jobs_fd: int, events_fd: int, arena_fd: int) -> None:
        cap = (BandwidthCap(settings["bandwidth_bytes_s"], settings["bandwidth_source"])
               if settings.get("bandwidth_bytes_s") else None)
        self.reader = StorageReader(settings["data_path"], settings["direct"], cap)
        self.codec = settings["codec"]
        self.read_ahead_s = settings["read_ahead_s"]
        self._map = mmap.mmap(arena_fd, settings["arena_bytes"])
        self.arena = memoryview(self._map)
        touch_pages(self.arena)
        self.exponent = np.empty(0, np.uint8)  # scratch, grown to the largest tensor
        self.jobs_fd, self.events_fd = jobs_fd, events_fd
        os.set_blocking(jobs_fd, False)
        self.queue: collections.deque[Job] = collections.deque()  # reads left to book
        self.reading: collections.deque[Job] = collections.deque()  # tensors left to decode
        self.by_id: dict[int, Job] = {}
        self._partial = b""
        self.open = True
        self.warm_up()

    def warm_up(self) -> None:
        """Load the codec and run every step once, then say so: a fresh process's first
        expert otherwise paid 60-120 ms of lazy imports and first calls inside serving."""
        words = np.arange(4096, dtype=np.uint16)
        exponent = np.frombuffer(decompress_bytes(compress_bytes(words.view(np.uint8)[:4096],
                                                                 self.codec, 1),
                                                  self.codec, 4096), np.uint8)
        reconstruct_into(words, exponent, exponent)
        crc32(exponent)
        os.write(self.events_fd, b'{"ready": true}\n')

    # -- commands ----------------------------------------------------------------------------
    def take_commands(self) -> None:
        while True:
            try:
                data = os.read(self.jobs_fd, 1 << 16)
            except BlockingIOError:
                return
            if not data:  # the serving process closed the pipe: finish
                self.open = False
                return
            *lines, self._partial = (self._partial + data).split(b"\n")
            for line in lines:
                self.command(json.loads(line))

    def command(self, msg: dict) -> None:
        if msg["op"] == "job":  # offsets in the layout are relative to the job's slot
            base, layout = msg["base"], msg["layout"]
            tensors = [{**t, "out": base + t["out"], "raw": [base + t["raw"][0], *t["raw"][1:]],
                        "chunks": [[base + c[0], *c[1:]] for c in t["chunks"]]}
                       for t in layout["tensors"]]
            job = Job(msg["id"], [[o, n, base + a] for o, n, a in layout["reads"]], tensors)
            self.by_id[job.id] = job
            self.queue.append(job)
        elif msg["op"] == "cancel":  # reads already made stay booked on the channel
            job = self.by_id.get(msg["id"])
            if job is not None:
                self.forget(job)
                self.send(job, dropped=True)

    def forget(self, job: Job) -> None:
        for line in (self.queue, self.reading):
            if job in line:
                line.remove(job)

    def send(self, job: Job, **fields: object) -> None:
        self.by_id.pop(job.id, None)
        event = {"id": job.id, "decode_s": job.decode_s, "rebuild_s": job.rebuild_s,
                 "reads": job.booked, "bytes": job.bytes, "cpu_s": time.process_time(),
                 **fields}
        data = (json.dumps(event) + "\n").encode()
        while data:
            data = data[os.write(self.events_fd, data):]

    # -- work --------------------------------------------------------------------------------
    def book_next(self) -> None:
        job = self.queue[0]
        offset, size, arena_off = job.reads[job.booked]
        length = -(-size // BLOCK) * BLOCK  # whole blocks, as O_DIRECT reads them
        got, ready_at = self.reader.read_into(offset, size,
                                              self.arena[arena_off:arena_off + length])
        job.arrivals.append((ready_at, arena_off, got))
        job.booked += 1
        job.bytes += got
        if job.booked == 1:
            self.reading.append(job)
        if job.booked == len(job.reads):
            self.queue.popleft()

    def ready_tensor(self, now: float) -> Job | None:
        """The oldest job with a tensor whose bytes have all arrived."""
        if not self.reading:
            return None
        job = self.reading[0]
        need = job.tensors[job.decoded]["after"]
        if need < job.booked and job.arrivals[need][0] <= now:
            return job
        return None

    def decode_next(self, job: Job) -> None:
        try:
            spec = job.tensors[job.decoded]
            if self.exponent.size < spec["numel"]:
                self.exponent = np.empty(spec["numel"], np.uint8)
            decode_tensor(self.arena, job, spec, self.codec, self.exponent)
        except StreamError as exc:
            self.forget(job)
            self.send(job, error=str(exc), hint=STREAM_HINT)
            return
        job.decoded += 1
        if job.decoded == len(job.tensors):
            self.reading.popleft()
            self.send(job, ok=True)

    def next_wake(self, now: float) -> float | None:
        """Seconds until something may be done without a command (None: nothing pending)."""
        times = []
        if self.queue:
            cap = self.reader.cap
            times.append(cap.opens_at(self.read_ahead_s) if cap is not None else now)
        if self.reading:
            job = self.reading[0]
            need = job.tensors[job.decoded]["after"]
            if need < job.booked:
                times.append(job.arrivals[need][0])
        return max(0.0, min(times) - now) if times else None

    def run(self) -> None:
        """Until the serving process closes the job pipe (what is left is dropped: it has
        stopped waiting for events)."""
        while True:
            self.take_commands()
            if not self.open:
                return
            now = time.perf_counter()
            job = self.ready_tensor(now)
            cap = self.reader.cap
            if job is not None:
                self.decode_next(job)
            elif self.queue and (cap is None or cap.opens_at(self.read_ahead_s) <= now):
                self.book_next()
            else:
                select.select([self.jobs_fd], [], [], self.next_wake(now))


def main(argv: list[str]) -> int:
    # The serving process owns this one's lifetime: Ctrl-C reaches both, and the serving
    # process stops it by closing the job pipe; a closed event pipe means it has gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    settings = json.loads(argv[1])
    decoder = Decoder(settings, settings["jobs_fd"], settings["events_fd"], settings["arena_fd"])
    with contextlib.suppress(BrokenPipeError):
        decoder.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
