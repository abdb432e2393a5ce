"""Latency of every mode at several emulated bandwidths, against the single device.

The single device runs in one process before and after the multi-rank modes (its reps pooled,
so slow drift in the machine's load hits both sides); all multi-rank modes, ASTRA at the extra
VQ group counts included, run in one process group (start-up paid once), their cases interleaved
round by round. Each case is timed ``reps`` times at most and sits out later rounds once it has
used ``budget_s`` (at least one rep): cases dominated by emulated wire time (full-precision
exchanges at 10 Mbps) get one or two reps. The analytic model (``latency_model``) is calibrated
with rank compute measured in this process (``calibrate.measure_compute``, no network) plus the
modelled wire time, compared with every measured case and projected to 4 and 8 devices.
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from typing import Any

from edgekit.methods.astra.runtime.all_modes import MULTI_MODES
from edgekit.methods.astra.runtime.calibrate import measure_compute
from edgekit.methods.astra.runtime.latency_model import (
    Workload,
    calibrate_rate,
    compute_at,
    messages,
    predict,
)
from edgekit.methods.astra.runtime.launch import launch
from edgekit.methods.astra.runtime.link import LinkSpec, parse_bandwidth
from edgekit.methods.astra.runtime.report import summarise
from edgekit.methods.astra.runtime.spec import RunSpec

TARGET_BANDWIDTH = "10Mbps"
TARGETS = {"astra_vs_single": 1.5, "astra_vs_sp": 5.0}  # issue 7, at 10 Mbps and 2 ranks
PROJECT_TO = (2, 4, 8)


# Over 8 parameters: the bench's knobs, each a CLI option of 'astra bench', with defaults a library
# caller can leave alone
def run_bench(model: str = "vit-s", tokens: int | None = 1024,
              bandwidths: tuple[str, ...] = ("10Mbps", "100Mbps", "1Gbps"),
              world_size: int = 2, threads: int = 1, reps: int = 3, budget_s: float = 12.0,
              latency_ms: float = 0.0, loss: float = 0.0, extra_groups: tuple[int, ...] = (1,),
              timeout_s: float = 300.0, echo: Callable[[str], None] | None = None
              ) -> dict[str, Any]:
    """Measure, model and project; returns the report body (JSON-ready)."""
    common = {"model": model, "tokens": tokens, "threads": threads, "reps": reps,
              "budget_s": budget_s, "latency_ms": latency_ms, "loss": loss,
              "timeout_s": timeout_s}
    load_before = os.getloadavg()
    single_spec = RunSpec(modes=("single",), **common)
    single = launch(single_spec, 1, echo=echo)
    multi = launch(RunSpec(modes=MULTI_MODES, bandwidths=bandwidths, astra_groups=extra_groups,
                           **common), world_size, echo=echo)
    _merge_single(single, launch(single_spec, 1, echo=echo))  # before and after: same drift
    load_after = os.getloadavg()

    workload = Workload.from_result(multi)
    single_s = statistics.median(single["modes"]["single"]["cases"][0]["latency_s"])
    rate = calibrate_rate(workload, single_s)
    measured = {"single": {"unshaped": summarise(single)["single"][0]}}
    for name, cases in summarise(multi).items():
        measured[name] = {c["bandwidth"]: c for c in cases}
    groups_of = {name: int(name[len("astra-g"):]) if name.startswith("astra-g")
                 else multi["groups"] for name in measured}

    compute = measure_compute(model, tokens, {name: groups_of[name] if name.startswith("astra-g")
                                              else None for name in measured},
                              sorted({world_size, *PROJECT_TO}), threads=threads, echo=echo)
    links = {b: LinkSpec(parse_bandwidth(b), latency_ms / 1e3, loss) for b in bandwidths}
    links["unshaped"] = LinkSpec(None, latency_ms / 1e3, loss)
    return {
        "settings": {**common, "bandwidths": list(bandwidths), "world_size": world_size,
                     "extra_groups": list(extra_groups)},
        "workload": vars(workload),
        "emulation": [LinkSpec(parse_bandwidth(b), latency_ms / 1e3, loss).describe()
                      for b in bandwidths],
        "load_average": {"before": list(load_before), "after": list(load_after),
                         "workers": {"single": [single["load_average"],
                                                single["load_average_after"]],
                                     "multi": multi["load_average"]}},
        "rate_gflops": rate / 1e9,
        "compute_measured_s": {k: {str(n): t for n, t in v.items()} for k, v in compute.items()},
        "measured": measured,
        "ratios": _ratios(measured, bandwidths),
        "targets": _targets(measured),
        "model_check": _check_model(measured, workload, groups_of, world_size, compute, links),
        "projection": _project(workload, groups_of, bandwidths, compute, links),
    }


def _merge_single(first: dict[str, Any], second: dict[str, Any]) -> None:
    """Pool the single-device reps run before and after the multi-rank modes."""
    a, b = first["modes"]["single"]["cases"][0], second["modes"]["single"]["cases"][0]
    a["latency_s"] += b["latency_s"]
    a["ranks"] += b["ranks"]
    first["load_average_after"] = second["load_average"]


def _mode_and_workload(name: str, w: Workload, groups: int) -> tuple[str, Workload]:
    mode = "astra" if name.startswith("astra") else name
    return mode, Workload(**{**vars(w), "groups": groups})


def _check_model(measured: dict, w: Workload, groups_of: dict, n: int,
                 compute: dict[str, dict[int, float]], links: dict[str, LinkSpec]
                 ) -> list[dict[str, Any]]:
    """Predicted (measured rank compute + modelled wire time) against every emulated run."""
    rows = []
    for name, cases in measured.items():
        mode, wl = _mode_and_workload(name, w, groups_of[name])
        ranks = 1 if mode == "single" else n
        compute_s, source = compute_at(mode, wl, ranks, compute[name])
        for bandwidth, case in cases.items():
            p = predict(mode, wl, ranks, links[bandwidth], compute_s)
            sent = sum(sum(messages(mode, wl, ranks, r)) for r in range(ranks))
            rows.append({"mode": name, "bandwidth": bandwidth,
                         "predicted_s": p["latency_s"], "measured_s": case["latency_s"],
                         "error": p["latency_s"] / case["latency_s"] - 1,
                         "predicted_compute_s": p["compute_s"], "compute_source": source,
                         "measured_compute_s": case["compute_s"],
                         "predicted_comm_s": p["comm_s"],
                         "measured_comm_s": case["comm_measured_s"] + case["comm_slept_s"],
                         "emulated_comm_s": case["comm_emulated_s"],
                         "predicted_bytes": sent, "measured_bytes": case["bytes_sent_all_ranks"]})
    return rows


def _project(w: Workload, groups_of: dict, bandwidths: tuple[str, ...],
             compute: dict[str, dict[int, float]], links: dict[str, LinkSpec]
             ) -> list[dict[str, Any]]:
    """Every mode at 2, 4 and 8 devices, each as fast as one rank here."""
    rows = []
    for name in groups_of:
        if name == "single":
            continue
        mode, wl = _mode_and_workload(name, w, groups_of[name])
        for bandwidth in bandwidths:
            row: dict[str, Any] = {"mode": name, "bandwidth": bandwidth}
            for n in PROJECT_TO:
                compute_s, source = compute_at(mode, wl, n, compute[name])
                row[f"n{n}_s"] = predict(mode, wl, n, links[bandwidth], compute_s)["latency_s"]
                row[f"n{n}_compute"] = source
            rows.append(row)
    single = compute["single"][1]
    rows.append({"mode": "single", "bandwidth": "-", **{f"n{n}_s": single for n in PROJECT_TO}})
    return rows


def _ratios(measured: dict, bandwidths: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per bandwidth: single-device latency / mode latency (speed-up), and SP / ASTRA."""
    single = measured["single"]["unshaped"]["latency_s"]
    out = {}
    for bandwidth in bandwidths:
        row = {f"speedup_{name}": single / cases[bandwidth]["latency_s"]
               for name, cases in measured.items() if bandwidth in cases}
        for name in measured:
            if name.startswith("astra") and bandwidth in measured[name]:
                row[f"sp_over_{name}"] = (measured["sp"][bandwidth]["latency_s"]
                                          / measured[name][bandwidth]["latency_s"])
        out[bandwidth] = row
    return out


def _targets(measured: dict) -> dict[str, Any]:
    """The issue's targets at 10 Mbps, for every ASTRA configuration measured."""
    if TARGET_BANDWIDTH not in measured["sp"]:
        return {"note": f"not measured at {TARGET_BANDWIDTH}"}
    single = measured["single"]["unshaped"]["latency_s"]
    sp = measured["sp"][TARGET_BANDWIDTH]["latency_s"]
    out = {}
    for name, cases in measured.items():
        if name.startswith("astra"):
            astra = cases[TARGET_BANDWIDTH]["latency_s"]
            out[name] = {"vs_single": single / astra, "vs_sp": sp / astra,
                         "vs_single_met": single / astra >= TARGETS["astra_vs_single"],
                         "vs_sp_met": sp / astra >= TARGETS["astra_vs_sp"]}
    return out
