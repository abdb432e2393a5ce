"""Nearest-rank percentiles against hand-computed values; Pareto masks on known points."""
from __future__ import annotations

import math

import pytest

from edgekit.compare.pareto import frontier, pareto_mask
from edgekit.profiler.stats import latency_stats, nearest_rank


def test_nearest_rank_by_hand():
    values = [15, 20, 35, 40, 50]  # the textbook example
    assert nearest_rank(values, 5) == 15  # ceil(0.25) = 1
    assert nearest_rank(values, 30) == 20  # ceil(1.5) = 2
    assert nearest_rank(values, 40) == 20  # ceil(2.0) = 2
    assert nearest_rank(values, 50) == 35  # ceil(2.5) = 3
    assert nearest_rank(values, 100) == 50
    assert nearest_rank(values, 0) == 15
    with pytest.raises(ValueError):
        nearest_rank([], 50)


def test_latency_stats_on_1_to_100_ms():
    samples_s = [i / 1000 for i in range(100, 0, -1)]  # 100 ms ... 1 ms, unsorted on purpose
    s = latency_stats(samples_s)
    assert (s.min, s.p50, s.p90, s.p95, s.p99, s.max) == pytest.approx((1, 50, 90, 95, 99, 100))
    assert s.mean == pytest.approx(50.5) and s.count == 100
    assert s.std == pytest.approx(math.sqrt(sum((i - 50.5) ** 2 for i in range(1, 101)) / 99))


def test_latency_stats_small_sample():
    s = latency_stats([0.003, 0.001, 0.002])
    # n = 3: p50 -> rank ceil(1.5) = 2; p90/p95/p99 -> rank 3
    assert (s.p50, s.p90, s.p99) == pytest.approx((2, 3, 3))


def test_pareto_mask():
    acc = [0.90, 0.95, 0.93, 0.95, 0.80]
    lat = [1.0, 3.0, 3.5, 2.0, 1.0]
    #      front  dominated by #3  dominated  front  dominated by #0
    assert pareto_mask(acc, lat) == [True, False, False, True, False]
    assert frontier(acc, lat) == [(1.0, 0.90), (2.0, 0.95)]


def test_pareto_ties_and_nan():
    assert pareto_mask([0.9, 0.9], [1.0, 1.0]) == [True, True]  # equal points do not dominate
    assert pareto_mask([0.9, 0.95], [math.nan, 1.0]) == [False, True]
