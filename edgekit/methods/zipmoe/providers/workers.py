"""L decode-worker threads decompress what the I/O thread reads (``workers`` > 0, whatever
``decode_on`` names but "process"); one task per tensor, its K chunks, since a Python task costs
tens of microseconds."""
from __future__ import annotations

import concurrent.futures as cf
import time

from edgekit.methods.zipmoe.providers.jobs import ExpertJob
from edgekit.methods.zipmoe.providers.reads import decompress
from edgekit.methods.zipmoe.providers.stats import ExpertStats
from edgekit.methods.zipmoe.providers.threads import ThreadDecoder
from edgekit.methods.zipmoe.store import Store
from edgekit.storage import StorageReader, wait_until


class WorkerDecoder(ThreadDecoder):
    description = "decode workers"

    def __init__(self, store: Store, reader: StorageReader, stats: ExpertStats,
                 workers: int) -> None:
        self.decode_pool = cf.ThreadPoolExecutor(workers, thread_name_prefix="zipmoe-dec")
        super().__init__(store, reader, stats)
        self.delay_workers = workers

    def _hand_over(self, job: ExpertJob, t: int, blob: bytes | memoryview,
                   ready_at: float) -> None:
        job.futures.append(self.decode_pool.submit(self._decode_tensor, job, t, blob, ready_at))

    def _decode_tensor(self, job: ExpertJob, t: int, blob: bytes | memoryview,
                       ready_at: float) -> None:
        """Decode worker: wait for the bytes to arrive (the sign-mantissa bytes, booked before
        them, have arrived too), check and decompress them."""
        if job.cancelled:
            return
        try:
            wait_until(ready_at)
            t0 = time.perf_counter()
            exp = decompress(job.entries[t], blob, self.codec)
            self.stats.add_decode(time.perf_counter() - t0, on_compute=False)
            with job.lock:
                job.exps[t] = exp
            job.finish_one()
        except BaseException as exc:  # noqa: BLE001 - handed to the compute thread
            job.fail(exc)

    def close(self) -> None:
        self.decode_pool.shutdown(wait=True)
        super().close()
