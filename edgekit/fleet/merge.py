"""One table from many devices: rows with a device column and a Pareto front per device.

The same merge serves a fleet run and ``edgekit compare --from``: saved compare reports (from a
fleet, or from ``edgekit compare --json`` on one machine) are checked against a schema and
merged without measuring anything again.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.compare.pareto import pareto_mask
from edgekit.compare.rows import measured_fields
from edgekit.errors import UsageError
from edgekit.fileio import read_json_object
from edgekit.schema import BOOL, INT, NUMBER, STR, ListOf, Object, Optional, check

_ROW = Object({
    "name": STR, "family": STR, "metric": STR, "dataset": STR, "params": Optional(INT),
    "flops_per_sample": Optional(NUMBER), "latency_p50_ms": NUMBER, "latency_p99_ms": NUMBER,
    "throughput_per_s": NUMBER, "energy_per_inference_j": NUMBER, "energy_source": STR,
    "peak_rss_mib": NUMBER, "device": Optional(STR), "device_name": Optional(STR),
    "backend": Optional(STR), "measured_on": Optional(STR),
})
COMPARE_REPORT = Object({
    "kind": STR, "metric": STR, "higher_is_better": BOOL, "backend": STR, "rows": ListOf(_ROW),
    "device": Optional(Object({"profile": STR, "display_name": STR})),
    "failures": Optional(ListOf(Object({"name": STR, "device": STR, "error": STR}))),
})


def profile_row(name: str, report: dict[str, Any], *, family: str, metric: str, dataset: str,
                score: float, checkpoint: str | None, worker: str | None) -> dict[str, Any]:
    """A compare row (the fields ``edgekit compare`` writes) measured on a fleet device."""
    device = report["device"]
    return {
        "name": name, "family": family, "metric": metric, metric: score, "dataset": dataset,
        "device": device["profile"], "device_name": device["display_name"], "worker": worker,
        "measured_on": device.get("measured_on"),  # set when the device only carries the label
        "backend": report["backend"].get("backend"), "checkpoint": checkpoint,
        **measured_fields(report),
    }


def merged(rows: list[dict[str, Any]], *, metric: str, higher_is_better: bool, backend: str,
           failures: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The merged report: rows sorted by device, each marked on its own device's fronts."""
    sign = 1.0 if higher_is_better else -1.0
    devices = sorted({r["device"] for r in rows})
    by_device = {d: [r for r in rows if r["device"] == d] for d in devices}
    for group in by_device.values():
        quality = [sign * r[metric] for r in group]
        for flag, key in (("pareto_latency", "latency_p50_ms"),
                          ("pareto_energy", "energy_per_inference_j")):
            mask = pareto_mask(quality, [r[key] for r in group])
            for row, on_front in zip(group, mask, strict=True):
                row[flag] = on_front
    names = {r["device"]: r.get("device_name") or r["device"] for r in rows}
    return {"rows": [r for d in devices for r in by_device[d]],
            "devices": [{"profile": d, "display_name": names[d]} for d in devices],
            "backend": backend, "metric": metric, "higher_is_better": higher_is_better,
            "energy_sources": sorted({r["energy_source"] for r in rows}),
            "failures": list(failures)}


def _rows_of(path: Path, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's rows, each with its device (a one-device report names it once, on top)."""
    rows = []
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row.get(doc["metric"]), (int, float)) or isinstance(
                row.get(doc["metric"]), bool):
            raise UsageError(f"{path}: field 'rows[{i}].{doc['metric']}' must be a number")
        for key, value in row.items():  # Python's json reads NaN and Infinity; JSON has none
            if isinstance(value, float) and not math.isfinite(value):
                raise UsageError(f"{path}: field 'rows[{i}].{key}' is {value}, not a finite "
                                 f"number", hint="give reports written by 'edgekit compare "
                                                 "--json'")
        device = row.get("device") or (doc.get("device") or {}).get("profile")
        if device is None:
            raise UsageError(f"{path}: field 'rows[{i}].device' is missing and the report "
                             f"names no device")
        name = row.get("device_name") or (doc.get("device") or {}).get("display_name")
        rows.append({**row, "device": device, "device_name": name or device,
                     "backend": row.get("backend") or doc["backend"], "from": str(path)})
    return rows


def merge_reports(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Saved compare reports merged into one, nothing measured again. A file that is not a
    compare report, reports of different metrics, or one model on one device twice: one line."""
    if not paths:
        raise UsageError("--from needs at least one report")
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    metric = None
    for path in map(Path, paths):
        doc = read_json_object(path)
        if isinstance(doc.get("kind"), str) and doc["kind"] != "compare":
            raise UsageError(f"{path}: a '{doc['kind']}' report, not a compare report",
                             hint="give reports written by 'edgekit compare --json'")
        doc = check(doc, COMPARE_REPORT, str(path),
                    hint="give reports written by 'edgekit compare --json'")
        if metric is not None and (doc["metric"], doc["higher_is_better"]) != metric:
            raise UsageError(f"{path}: scored by {doc['metric']}, the others by {metric[0]}",
                             hint="merge reports of one task")
        metric = (doc["metric"], doc["higher_is_better"])
        rows.extend(_rows_of(path, doc))
        failures.extend(doc.get("failures") or ())
    seen: dict[tuple[str, str], str] = {}
    for row in rows:
        key = (row["name"], row["device"])
        if key in seen:
            raise UsageError(f"{row['name']} on {row['device']} is in both {seen[key]} and "
                             f"{row['from']}", hint="merge one measurement of each")
        seen[key] = row["from"]
    assert metric is not None  # at least one path was read
    backends = ", ".join(sorted({r["backend"] for r in rows})) or "none"
    return merged(rows, metric=metric[0], higher_is_better=metric[1], backend=backends,
                  failures=failures)
