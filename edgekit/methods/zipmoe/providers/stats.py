"""What every expert provider shares: the (layer, expert) key and the counters it reports."""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

Key = tuple[int, int]  # (layer, expert)


@dataclass
class ExpertStats:
    activations: int = 0     # (layer, expert) uses, one per layer step that routes to it
    full_hits: int = 0       # decoded expert already in memory
    sm_hits: int = 0         # sign-mantissa bytes in memory, exponents read and decoded
    misses: int = 0          # everything read (and decoded, for ZipMoE)
    prefetched: int = 0      # of the SM hits and misses: reads started by a prefetch
    prefetch_wasted: int = 0  # prefetched experts the layer did not route to
    wait_s: float = 0.0      # time the compute thread spent waiting for experts
    # The lookahead predictor itself, before the pools filter its guesses: over the decode steps
    # (one token; a prompt's prefill routes to most experts) of layers that had a prediction,
    # the experts guessed, the guesses the layer routed to, and the experts it routed to
    # (precision = right / predicted, recall = right / routed).
    predicted: int = 0
    predicted_right: int = 0
    routed_after_prediction: int = 0
    decode_s: float = 0.0    # exponent decompression, on whichever thread did it
    decode_compute_s: float = 0.0  # the part of decode_s on the compute thread (no workers)
    io_cpu_s: float = 0.0    # CPU time of the I/O thread (reads, checks, decoding there)
    rebuild_s: float = 0.0   # merging exponent and sign-mantissa planes (compute thread), or
                             # with a decode process copying the decoded tensors out of it
    worker_rebuild_s: float = 0.0  # merging the planes in the decode process
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_decode(self, seconds: float, on_compute: bool) -> None:
        with self._lock:
            self.decode_s += seconds
            if on_compute:
                self.decode_compute_s += seconds

    def reset(self) -> None:
        """Every count back to zero, in place: a provider's decoder threads hold this object."""
        with self._lock:
            for f in dataclasses.fields(self):
                if f.name != "_lock":
                    setattr(self, f.name, f.default)

    def to_json(self) -> dict[str, float]:
        n = max(1, self.activations)
        issued = self.prefetched + self.prefetch_wasted
        return {"activations": self.activations, "full_hits": self.full_hits,
                "sm_hits": self.sm_hits, "misses": self.misses,
                "full_hit_rate": self.full_hits / n, "sm_hit_rate": self.sm_hits / n,
                "miss_rate": self.misses / n, "prefetched": self.prefetched,
                "prefetch_wasted": self.prefetch_wasted,
                "prefetch_precision": self.prefetched / issued if issued else None,
                "predictor_precision": (self.predicted_right / self.predicted
                                        if self.predicted else None),
                "predictor_recall": (self.predicted_right / self.routed_after_prediction
                                     if self.routed_after_prediction else None),
                "wait_s": self.wait_s, "decode_s": self.decode_s,
                "decode_compute_s": self.decode_compute_s, "rebuild_s": self.rebuild_s,
                "worker_rebuild_s": self.worker_rebuild_s, "io_cpu_s": self.io_cpu_s}
