"""Latency statistics with nearest-rank percentiles, as trtexec reports them.

Nearest rank: the p-th percentile of n sorted samples is the sample at 1-based rank
``ceil(p/100 * n)`` (rank 1 for p = 0). It is always an observed value, never an interpolation.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

PERCENTILES = (50, 90, 95, 99)
PERCENTILE_METHOD = "nearest-rank"  # stated in every report that gives percentiles


def nearest_rank(sorted_values: Sequence[float], p: float) -> float:
    if not sorted_values:
        raise ValueError("no samples")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside [0, 100]")
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class LatencyStats:
    """Milliseconds."""

    count: int
    min: float
    mean: float
    std: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float

    def to_dict(self) -> dict[str, float | str]:
        return {**asdict(self), "percentile_method": PERCENTILE_METHOD}


def latency_stats(samples_s: Sequence[float]) -> LatencyStats:
    """Statistics in milliseconds of per-iteration latencies given in seconds."""
    ms = sorted(s * 1e3 for s in samples_s)
    n = len(ms)
    mean = sum(ms) / n if n else math.nan
    std = math.sqrt(sum((x - mean) ** 2 for x in ms) / (n - 1)) if n > 1 else 0.0
    p = {q: nearest_rank(ms, q) for q in PERCENTILES}
    return LatencyStats(n, ms[0], mean, std, p[50], p[90], p[95], p[99], ms[-1])
