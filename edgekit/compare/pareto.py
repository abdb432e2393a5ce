"""Pareto frontier of (maximise quality, minimise cost) points."""
from __future__ import annotations

import math
from collections.abc import Sequence


def pareto_mask(quality: Sequence[float], cost: Sequence[float]) -> list[bool]:
    """True where no other point is at least as good in both and strictly better in one.

    Points with a NaN in either coordinate are never on the frontier (and dominate nothing).
    """
    points = list(zip(quality, cost, strict=False))
    valid = [not (math.isnan(q) or math.isnan(c)) for q, c in points]
    mask = []
    for i, (q, c) in enumerate(points):
        if not valid[i]:
            mask.append(False)
            continue
        dominated = any(
            valid[j] and q2 >= q and c2 <= c and (q2 > q or c2 < c)
            for j, (q2, c2) in enumerate(points) if j != i
        )
        mask.append(not dominated)
    return mask


def frontier(quality: Sequence[float], cost: Sequence[float]) -> list[tuple[float, float]]:
    """The frontier's points sorted by cost, as (cost, quality) pairs for plotting a step line."""
    mask = pareto_mask(quality, cost)
    return sorted((c, q) for q, c, m in zip(quality, cost, mask, strict=False) if m)
