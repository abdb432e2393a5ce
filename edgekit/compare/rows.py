"""The figures of a compare row, read from one profile report: the one place that knows which
profile fields a row carries (``edgekit compare`` on this machine and on a fleet)."""
from __future__ import annotations

import math
from typing import Any


def measured_fields(report: dict[str, Any]) -> dict[str, Any]:
    """A compare row's figures from one profile report (shared with the fleet's rows)."""
    energy = report["energy"]
    return {
        "precision": report["settings"]["precision"],
        "params": report["compute"]["params"],
        "flops_per_sample": report["compute"]["flops_per_sample"],
        "size_bytes": report["model_size"]["bytes"],
        "latency_p50_ms": report["latency_ms"]["p50"],
        "latency_p90_ms": report["latency_ms"]["p90"],
        "latency_p99_ms": report["latency_ms"]["p99"],
        "throughput_per_s": report["throughput"]["samples_per_s"],
        "energy_per_inference_j": energy.get("energy_per_inference_j", math.nan),
        "energy_source": energy["source"],
        "peak_rss_mib": report["memory"]["peak_rss_mib"],
        "profile": report,
    }
