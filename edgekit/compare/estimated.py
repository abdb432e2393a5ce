"""Estimated compare rows for devices that cannot be measured here (``--estimate-device``).

Each measured row gets a twin per device: the same model, score and precision, its latency
the roofline estimate of ``edgekit estimate`` for that device, its energy not measured. The
twins are marked (``estimated``: true; ``~`` in the table) and left off the Pareto fronts,
which compare measurements on one device.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from edgekit.estimate import analyse, device_profiles, roofline
from edgekit.targets import Target

ENERGY_SOURCE = "not measured (estimated row)"


def estimated_rows(rows: Sequence[dict[str, Any]], targets: dict[str, Target],
                   devices: Sequence[str], batch: int) -> list[dict[str, Any]]:
    """A twin of each measured row (``rows``, named by ``targets``' keys) per profile of
    ``devices``, with the estimated latency at the row's precision."""
    profiles = device_profiles(devices)
    analyses = {name: analyse(target, batch) for name, target in targets.items()}
    twins = []
    for row in rows:
        analysis = analyses[row["name"]]
        for profile in profiles:
            estimate = roofline(analysis, profile, row.get("precision") or "fp32")
            latency = estimate["latency_ms"]
            latency = math.nan if latency is None else latency
            twins.append({
                **{k: v for k, v in row.items() if k not in ("profile", "validated")},
                "backend": f"estimated: {profile.name}", "estimated": True,
                "estimate_device": profile.name, "estimate": estimate,
                "latency_p50_ms": latency, "latency_p90_ms": math.nan,
                "latency_p99_ms": math.nan,
                "throughput_per_s": batch / latency * 1e3 if latency else math.nan,
                "energy_per_inference_j": math.nan, "energy_source": ENERGY_SOURCE,
                "peak_rss_mib": math.nan,
                "size_bytes": estimate["weights_bytes"],
                "pareto_latency": False, "pareto_energy": False,
            })
    return twins
