"""Summaries of a run's raw result: medians per case, bytes per token, the report document."""
from __future__ import annotations

import statistics
from typing import Any

from edgekit.methods.astra.runtime.spec import RunSpec
from edgekit.provenance import report_document


def case_summary(case: dict[str, Any], tokens: int, depth: int) -> dict[str, Any]:
    """Median latency over reps (each rep: the slowest rank) and its parts on the median rank.

    Bytes are what every rank sent in one forward, summed; per token per block divides that by
    the patch tokens and the blocks.
    """
    latency = statistics.median(case["latency_s"])
    ranks = [r for rep in case["ranks"] for r in rep]

    def med(key: str) -> float:
        return statistics.median(r[key] for r in ranks)

    sent = sum(r["bytes_sent"] for r in case["ranks"][0])
    return {"bandwidth": case["link"]["bandwidth"], "reps": len(case["latency_s"]),
            "latency_s": latency, "latency_min_s": min(case["latency_s"]),
            "compute_s": med("compute_s"), "comm_measured_s": med("comm_measured_s"),
            "comm_emulated_s": med("comm_emulated_s"), "comm_slept_s": med("comm_slept_s"),
            "bytes_sent_all_ranks": sent,
            "bytes_per_token": sent / tokens, "bytes_per_token_per_block": sent / tokens / depth}


def summarise(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Mode -> one summary per link case."""
    return {mode: [case_summary(c, result["tokens"], result["depth"]) for c in run["cases"]]
            for mode, run in result["modes"].items()}


def run_report(spec: RunSpec, result: dict[str, Any]) -> dict[str, Any]:
    """The report of ``edgekit astra run``: settings, emulation parameters, summary, raw data."""
    body = {"settings": {k: v for k, v in vars(spec).items() if k != "links"},
            "emulation": [link.describe() for link in spec.links],
            "summary": summarise(result), "result": result}
    return report_document("astra/run", body)
