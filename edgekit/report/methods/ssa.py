"""SSA's spiking net against its ReLU twin on the axis the SSA paper claims: synaptic operations
and energy per inference, priced with Horowitz's 45 nm table (compare counts both rows) and with
Loihi's (Davies et al. 2018, Table 2; ``edgekit simulate`` prices the spiking net)."""
from __future__ import annotations

from typing import Any

from edgekit.report.blocks import Result, Table, fmt, number
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

SNN, ANN = "spikingresformer", "resformer-ann"


def _loihi(results: list[Result]) -> tuple[float | None, str]:
    """The spiking net's Loihi energy from a simulate report, and the table it names."""
    for r in results:
        if r.kind == "simulate" and r.doc["model"].startswith(SNN):
            for e in r.doc["energy"]:
                if "loihi" in e["model"].lower() and number(e["energy_j"]) is not None:
                    return e["energy_j"], e["cost_table"]
    return None, ""


def judge(results: list[Result]) -> Verdict:
    found = find_row(results, SNN), find_row(results, ANN)
    if None in found:
        return missing(f"compare rows for both {SNN} and its ReLU twin {ANN}")
    (s, _), (a, _) = found
    if number(s.get("energy_45nm_j")) is None or number(a.get("energy_45nm_j")) is None:
        return missing("45 nm energy on both rows (compare counts it for a spiking net and its "
                       "twin)")
    loihi, table_name = _loihi(results)
    lower = s["energy_45nm_j"] < a["energy_45nm_j"]
    why = (f"At 45 nm the spiking net costs {s['energy_45nm_j'] * 1e6:.4g} µJ per inference "
           f"({s['sops_per_sample'] / 1e6:.4g} M SOPs at 0.9 pJ + {s['macs_per_sample'] / 1e6:.4g} "
           f"M MACs at 4.6 pJ), its ReLU twin {a['energy_45nm_j'] * 1e6:.4g} µJ "
           f"({a['macs_per_sample'] / 1e6:.4g} M MACs): "
           f"{ratio(s['energy_45nm_j'], a['energy_45nm_j'])}. "
           f"Accuracy {s['accuracy']:.2%} against {a['accuracy']:.2%}; on this CPU the spiking "
           f"net's measured latency is {s['latency_p50_ms']:.4g} ms against "
           f"{a['latency_p50_ms']:.4g} ms (a CPU computes every spike densely, T times).")
    rows: list[list[str]] = []
    for name, r in ((SNN, s), (ANN, a)):
        rows.append([name, fmt(r["accuracy"], ".2f", 100, "%"),
                     fmt(r["sops_per_sample"], ".4g", 1e-6), fmt(r["macs_per_sample"], ".4g", 1e-6),
                     fmt(r["energy_45nm_j"], ".4g", 1e6),
                     fmt(loihi, ".4g", 1e6) if name == SNN and loihi is not None else
                     "not priced: Loihi has no MAC unit; a ReLU net does not run on it"
                     if name == ANN else "no simulate report"])
    panels: list[tuple[str, str, list[tuple[str, Any, str]]]] = [
        ("energy at 45 nm (µJ)", "µJ", [(n, r["energy_45nm_j"] * 1e6, f"{n}: counted, Horowitz "
                                         "ISSCC 2014") for n, r in ((SNN, s), (ANN, a))]),
        ("synaptic ops and MACs (M)", "M", [
            (f"{SNN} SOPs", s["sops_per_sample"] / 1e6, "spike-driven accumulates"),
            (f"{ANN} MACs", a["macs_per_sample"] / 1e6, "every operation a MAC")])]
    figure = bars("method-ssa", "SSA spiking net against its ReLU twin (bars start at 0)", panels)
    return Verdict(MET if lower else NOT_MET, why, [figure, Table(
        ["model", "accuracy", "M SOPs", "M MACs", "45 nm µJ", "Loihi µJ"], rows,
        caption=f"per inference; Loihi: {table_name or 'Davies et al. 2018, Table 2'}")])


STORY = Story("ssa", "SSA: simplified spiking attention",
              "a spiking transformer with SSA needs mostly cheap accumulates, so it costs less "
              "energy per inference than the same net with ReLU (45 nm and Loihi tables).", judge)
