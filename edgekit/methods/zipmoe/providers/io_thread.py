"""No decode worker (L = 0, no core to spare: ``engine.default_workers``) and
``decode_on="io"``: the I/O thread is the one decode worker. While it waits to book its next
read it decodes the exponents that have arrived, so the compute thread only rebuilds."""
from __future__ import annotations

import collections
import time

from edgekit.methods.zipmoe.providers.jobs import ExpertJob
from edgekit.methods.zipmoe.providers.reads import READ_AHEAD_S, decompress
from edgekit.methods.zipmoe.providers.stats import ExpertStats
from edgekit.methods.zipmoe.providers.threads import ThreadDecoder
from edgekit.methods.zipmoe.store import Store
from edgekit.storage import StorageReader, wait_until


class IoThreadDecoder(ThreadDecoder):
    description = "on the I/O thread"

    def __init__(self, store: Store, reader: StorageReader, stats: ExpertStats) -> None:
        super().__init__(store, reader, stats)
        # (job, tensor, exponent bytes, when the channel delivers them), in booking order
        self._pending: collections.deque[tuple[ExpertJob, int, bytes | memoryview, float]] = \
            collections.deque()

    def _hand_over(self, job: ExpertJob, t: int, blob: bytes | memoryview,
                   ready_at: float) -> None:
        self._pending.append((job, t, blob, ready_at))

    def _throttle(self) -> None:
        """Until the next read may be booked, decoding the exponents that have arrived meanwhile
        instead of sleeping."""
        cap = self.reader.cap
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
        """After a batch's last read: decode what is still pending as it arrives."""
        while self._pending:
            job, t, blob, ready_at = self._pending.popleft()
            wait_until(ready_at)
            self._decode_arrived(job, t, blob)

    def _decode_arrived(self, job: ExpertJob, t: int, blob: bytes | memoryview) -> None:
        """Check and decompress a tensor's exponents once the channel has delivered them."""
        if job.cancelled:
            return
        try:
            t0 = time.perf_counter()
            exp = decompress(job.entries[t], blob, self.codec)
            self.stats.add_decode(time.perf_counter() - t0, on_compute=False)
            job.exps[t] = exp
            job.finish_one()
        except BaseException as exc:  # noqa: BLE001 - handed to the compute thread
            job.fail(exc)
