"""The compare table's columns and cells, shared by the CLI table and the HTML report so that
both show the same figures: precision, backend and spiking columns appear only where they vary
or apply."""
from __future__ import annotations

import math
from typing import Any

PERCENT_METRICS = ("accuracy", "agreement")  # fractions shown in %


def format_score(metric: str, value: float) -> str:
    """Accuracy (and a suite's top-1 agreement) as a percentage; error metrics (MPJPE in mm)
    as they are."""
    return f"{value * 100:.2f}%" if metric in PERCENT_METRICS else f"{value:.1f}"


def _finite(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _cell(value: Any, spec: str, scale: float, dash: str) -> str:
    return f"{value * scale:{spec}}" if _finite(value) else dash


def columns(result: dict[str, Any]) -> list[str]:
    """Column titles of a compare result (``edgekit compare --json``)."""
    return ["", "model", *(["precision"] if _by_precision(result) else []),
            *(["backend"] if _by_backend(result) else []), result["metric"], "params", "MFLOPs",
            *(["MSOPs", "45nm µJ"] if _spiking(result) else []),
            *(["KiB"] if _by_precision(result) else []),
            "p50 ms", "p99 ms", "samples/s", "mJ/inf"]


def cells(result: dict[str, Any], row: dict[str, Any], dash: str = "-") -> list[str]:
    """One row's cells, in the order of ``columns``: the mark is ``*`` on the latency front,
    ``†`` on the energy front, ``!`` where validation failed, ``~`` an estimated row."""
    mark = ("*" * bool(row["pareto_latency"]) + "†" * bool(row["pareto_energy"])
            + "!" * (row.get("validated") is False) + "~" * bool(row.get("estimated")))
    score = row[result["metric"]]
    return [
        mark, row["name"], *([str(row.get("precision", dash))] if _by_precision(result) else []),
        *([str(row.get("backend", dash))] if _by_backend(result) else []),
        format_score(result["metric"], score) if _finite(score) else dash,
        _cell(row["params"], ",", 1, dash), _cell(row["flops_per_sample"], ".3f", 1e-6, dash),
        *([_cell(row.get("sops_per_sample"), ".3f", 1e-6, dash),
           _cell(row.get("energy_45nm_j"), ".3f", 1e6, dash)] if _spiking(result) else []),
        *([_cell(row.get("size_bytes"), ".1f", 1 / 1024, dash)] if _by_precision(result) else []),
        _cell(row["latency_p50_ms"], ".3f", 1, dash), _cell(row["latency_p99_ms"], ".3f", 1, dash),
        _cell(row["throughput_per_s"], ".0f", 1, dash),
        _cell(row["energy_per_inference_j"], ".4f", 1e3, dash)]


def _by_precision(result: dict[str, Any]) -> bool:
    return bool(result.get("precisions"))


def _by_backend(result: dict[str, Any]) -> bool:
    """Several backends, or estimated rows, whose backend cell names their device."""
    return len(result.get("backends", ())) > 1 or bool(result.get("estimated_devices"))


def _spiking(result: dict[str, Any]) -> bool:
    return any("sops_per_sample" in r for r in result["rows"])
