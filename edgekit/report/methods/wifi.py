"""WiFi-Mamba against the PETR-style baseline of Person-in-WiFi 3D, both trained, scored by MPJPE
on the station protocol of the simulated CSI (one person on a mark)."""
from __future__ import annotations

from edgekit.report.blocks import Result, Table, fmt
from edgekit.report.methods.story import (
    MET,
    NOT_MET,
    Story,
    Verdict,
    bars,
    find_row,
    missing,
    ratio,
)

MAMBA, PETR = "wifi-mamba", "wifi-petr"
METRIC = "mpjpe_mm"  # the task's metric, as compare names it


def judge(results: list[Result]) -> Verdict:
    found = find_row(results, MAMBA, METRIC), find_row(results, PETR, METRIC)
    if None in found:
        return missing(f"compare rows scored by MPJPE for both {MAMBA} and {PETR}")
    (m, _), (p, _) = found
    m, p = ({**r, "mpjpe": r[METRIC]} for r in (m, p))
    lower = m["mpjpe"] < p["mpjpe"]
    why = (f"MPJPE {m['mpjpe']:.1f} mm against the baseline's {p['mpjpe']:.1f} mm "
           f"({ratio(m['mpjpe'], p['mpjpe'])}; paper: 16-27 % lower) with {m['params']:,} "
           f"parameters against {p['params']:,}, on {m['dataset']}; latency "
           f"{m['latency_p50_ms']:.3g} against {p['latency_p50_ms']:.3g} ms (measured).")
    if "station" not in str(m["dataset"]):
        why += " Not the station protocol: the inputs were scored on another dataset."
    rows = ((MAMBA, m), (PETR, p))
    figure = bars("method-wifi-mamba", "WiFi-Mamba against PETR (bars start at 0)", [
        ("MPJPE (mm, lower is better)", "mm", [(n, r["mpjpe"], "test split") for n, r in rows]),
        ("parameters (M)", "M", [(n, r["params"] / 1e6, "counted") for n, r in rows]),
        ("median latency (ms)", "ms", [(n, r["latency_p50_ms"], "measured") for n, r in rows])])
    table = Table(["model", "MPJPE mm", "params", "p50 ms", "MFLOPs"],
                  [[n, fmt(r["mpjpe"], ".1f"), f"{r['params']:,}", fmt(r["latency_p50_ms"], ".3f"),
                    fmt(r["flops_per_sample"], ".3f", 1e-6)] for n, r in rows])
    return Verdict(MET if lower else NOT_MET, why, [figure, table])


STORY = Story("wifi-mamba", "WiFi-Mamba: selective state spaces for WiFi pose",
              "a dual-stream selective SSM estimates 3D pose from WiFi CSI with 16-27 % lower "
              "MPJPE than the PETR-style baseline and far fewer parameters (2.14M against "
              "48.2M).", judge)
