"""Storage reads for the serving engine: real reads, optionally capped at a device's bandwidth.

``StorageReader`` opens a data file with O_DIRECT where the file system accepts it (so reads come
from the device, not the page cache), else with ordinary buffered reads, and says which.

``BandwidthCap`` emulates a slower device on this machine: the device is one FIFO channel of
``bytes_per_s``; every read reserves ``size / bytes_per_s`` seconds of it after the reads queued
before it, performs the real read, then sleeps until its reserved slot ends. Threads reading at
once therefore share the bandwidth as they would share one SSD or eMMC, and a read is never
faster than the real one. Sleeping releases the GIL, so decoding and compute go on meanwhile.
Reports carry ``describe()``: which mode, which bandwidth, from where.

``read_ahead`` is the non-blocking form for an engine that queues reads ahead of their use (as
an NVMe queue or io_uring would): it performs the real read now and returns the bytes with the
time the capped channel delivers them; the consumer calls ``wait_until`` before using them.
``BandwidthCap.throttle`` keeps such a reader from booking more than a set backlog, so reads not
yet booked can still be cancelled.
"""
from __future__ import annotations

import mmap
import os
import threading
import time
from dataclasses import dataclass, field

from edgekit.errors import UsageError

BLOCK = 4096


@dataclass
class BandwidthCap:
    bytes_per_s: float
    source: str  # where the figure comes from, e.g. "profile jetson-agx-orin-64gb"
    _busy_until: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not self.bytes_per_s > 0:
            raise UsageError(f"storage bandwidth must be positive, got {self.bytes_per_s}")

    def reserve(self, size: int) -> float:
        """Book ``size`` bytes on the channel; returns the monotonic time the read may end."""
        with self._lock:
            start = max(time.perf_counter(), self._busy_until)
            self._busy_until = start + size / self.bytes_per_s
            return self._busy_until

    def opens_at(self, backlog_s: float) -> float:
        """The monotonic time from which at most ``backlog_s`` of reads are booked ahead."""
        return self._busy_until - backlog_s

    def throttle(self, backlog_s: float) -> None:
        """Sleep until at most ``backlog_s`` of reads are booked ahead of now."""
        wait_until(self.opens_at(backlog_s))


def wait_until(ready_at: float) -> None:
    """Sleep until the monotonic time ``ready_at`` (from ``StorageReader.read_ahead``)."""
    delay = ready_at - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


@dataclass
class ReadStats:
    reads: int = 0
    bytes: int = 0
    seconds: float = 0.0  # summed wall time of reads (overlapping reads count each)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_reads(self, reads: int, size: int) -> None:
        """Reads another process made for this reader's file."""
        with self._lock:
            self.reads += reads
            self.bytes += size

    def reset(self) -> None:
        with self._lock:
            self.reads, self.bytes, self.seconds = 0, 0, 0.0

    def add(self, size: int, seconds: float) -> None:
        with self._lock:
            self.reads += 1
            self.bytes += size
            self.seconds += seconds


class StorageReader:
    """Positional reads of one file; thread-safe (``pread`` has no shared file position)."""

    def __init__(self, path: str | os.PathLike[str], direct: bool = True,
                 cap: BandwidthCap | None = None) -> None:
        self.path = os.fspath(path)
        self.cap = cap
        self.stats = ReadStats()
        self.direct = False
        self._fd = -1
        if direct and hasattr(os, "O_DIRECT"):
            fd = -1
            try:  # tmpfs and some network file systems refuse O_DIRECT
                fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
                self._probe(fd)
                self._fd, self.direct = fd, True
            except OSError:
                if fd >= 0:
                    os.close(fd)
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except OSError as exc:
                raise UsageError(f"cannot open {self.path}: {exc.strerror}") from exc

    @staticmethod
    def _probe(fd: int) -> None:
        buf = mmap.mmap(-1, BLOCK)
        try:
            os.preadv(fd, [buf], 0)
        finally:
            buf.close()

    def describe(self) -> dict[str, object]:
        mode = "O_DIRECT" if self.direct else "buffered (page cache may serve reads)"
        out: dict[str, object] = {"reads": mode}
        if self.cap is None:
            out["bandwidth"] = "real (uncapped)"
        else:
            out["bandwidth"] = f"capped at {self.cap.bytes_per_s / 1e9:.3g} GB/s"
            out["bandwidth_bytes_s"] = self.cap.bytes_per_s
            out["bandwidth_source"] = self.cap.source
        return out

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` (fewer only at the end of the file)."""
        t0 = time.perf_counter()
        data, ready_at = self._book_and_read(offset, size)
        wait_until(ready_at)
        self.stats.add(len(data), time.perf_counter() - t0)
        return data

    def read_ahead(self, offset: int, size: int) -> tuple[bytes, float]:
        """The bytes now, and the time a capped channel delivers them (0 when uncapped); the
        stats count the real read's time."""
        t0 = time.perf_counter()
        data, ready_at = self._book_and_read(offset, size)
        self.stats.add(len(data), time.perf_counter() - t0)
        return data, ready_at

    def read_into(self, offset: int, size: int, buffer: memoryview) -> tuple[int, float]:
        """``read_ahead`` of ``size`` bytes into ``buffer`` (shared memory; at least ``size``
        long, and with O_DIRECT its address and length, like ``offset``, multiples of 4 KiB):
        returns the bytes of the ``size`` read (fewer only at the end of the file) and the
        delivery time."""
        t0 = time.perf_counter()
        deadline = self.cap.reserve(size) if self.cap is not None else 0.0
        got = min(size, os.preadv(self._fd, [buffer], offset))
        self.stats.add(got, time.perf_counter() - t0)
        return got, deadline

    def _book_and_read(self, offset: int, size: int) -> tuple[bytes, float]:
        deadline = self.cap.reserve(size) if self.cap is not None else 0.0
        data = self._read_direct(offset, size) if self.direct else os.pread(self._fd, size, offset)
        return data, deadline

    def _read_direct(self, offset: int, size: int) -> bytes:
        start = offset - offset % BLOCK
        length = -(-(offset + size - start) // BLOCK) * BLOCK
        buf = mmap.mmap(-1, length)  # page-aligned, as O_DIRECT requires
        try:
            got = os.preadv(self._fd, [buf], start)
            lead = offset - start
            end = min(got, lead + size)
            return buf[lead:end] if end > lead else b""
        finally:
            buf.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> StorageReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

