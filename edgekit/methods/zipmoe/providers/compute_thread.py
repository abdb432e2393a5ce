"""No decode worker and ``decode_on="compute"``: the compute thread decompresses each tensor's
exponents just before rebuilding it; the I/O thread only reads."""
from __future__ import annotations

import time

import numpy as np

from edgekit.methods.zipmoe.providers.jobs import ExpertJob
from edgekit.methods.zipmoe.providers.reads import decompress
from edgekit.methods.zipmoe.providers.threads import ThreadDecoder
from edgekit.storage import wait_until


class ComputeThreadDecoder(ThreadDecoder):
    description = "on the compute thread"
    decode_on_compute = True

    def _hand_over(self, job: ExpertJob, t: int, blob: bytes | memoryview,
                   ready_at: float) -> None:
        job.blobs[t] = (blob, ready_at)
        job.finish_one()

    def _exponents(self, job: ExpertJob, t: int) -> np.ndarray:
        """Wait for the tensor's exponent bytes to arrive, then decompress them here."""
        blob, ready_at = job.blobs[t]
        t0 = time.perf_counter()
        wait_until(ready_at)
        self.stats.wait_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        exp = decompress(job.entries[t], blob, self.codec)
        self.stats.add_decode(time.perf_counter() - t0, on_compute=True)
        return exp
