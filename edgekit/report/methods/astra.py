"""ASTRA against one device and against full-precision sequence parallelism across emulated
link bandwidths, with the crossover named: the paper claims its gains on slow links (10 Mbps),
and a fast link takes them away, as the exchange it shrinks no longer costs much."""
from __future__ import annotations

from typing import Any

from edgekit.report.blocks import Figure, Result, Table, fmt
from edgekit.report.methods.story import MET, NOT_MET, Story, Verdict, missing

_UNITS = {"kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "bps": 1.0}


def bits_per_s(text: str) -> float:
    """``10Mbps`` -> 1e7 (the links ``astra run --bandwidth`` takes)."""
    low = text.strip().lower()
    for unit, scale in _UNITS.items():
        if low.endswith(unit):
            return float(low[:-len(unit)]) * scale
    raise ValueError(f"not a bandwidth: {text}")


def _latency(doc: dict[str, Any], mode: str) -> dict[str, float]:
    return {c["bandwidth"]: c["latency_s"] for c in doc["summary"].get(mode, [])}


def crossover(astra: dict[str, float], other: dict[str, float]) -> str:
    """Where ASTRA stops being faster than ``other``, between the links measured."""
    links = sorted(set(astra) & set(other), key=bits_per_s)
    wins = [astra[b] < other[b] for b in links]
    if all(wins):
        return f"ASTRA is faster on every link measured, up to {links[-1]}"
    if not any(wins):
        return f"ASTRA is slower on every link measured, from {links[0]}"
    for slow, fast, a, b in zip(links, links[1:], wins, wins[1:], strict=False):
        if a != b:
            return (f"the crossover lies between {slow} and {fast}: ASTRA is "
                    f"{'faster' if a else 'slower'} below, {'slower' if a else 'faster'} above")
    return "no single crossover"


def _figure(doc: dict[str, Any], modes: list[str]) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    for mode in modes:
        lat = _latency(doc, mode)
        links = sorted(lat, key=bits_per_s)
        fig.add_trace(go.Scatter(x=[bits_per_s(b) / 1e6 for b in links],
                                 y=[lat[b] * 1e3 for b in links], mode="lines+markers",
                                 name=mode, hoverinfo="text",
                                 hovertext=[f"{mode} on {b}: {lat[b] * 1e3:.2f} ms (measured, "
                                            "emulated link)" for b in links]))
    fig.update_layout(title="latency by link bandwidth (ms, from 0)", height=400,
                      xaxis={"type": "log", "title": "emulated link (Mbit/s)"},
                      yaxis={"title": "latency (ms)", "rangemode": "tozero"},
                      hoverlabel={"align": "left"})
    return Figure("method-astra", fig)


def judge(results: list[Result]) -> Verdict:
    docs = [r.doc for r in results if r.kind == "astra/run"
            and {"astra", "single", "sp"} <= set(r.doc["summary"])]
    if not docs:
        return missing("astra run report with modes astra, single and sp")
    doc = docs[0]
    astra, single, sp = (_latency(doc, m) for m in ("astra", "single", "sp"))
    slowest = min(astra, key=bits_per_s)
    met = astra[slowest] < single.get(slowest, 0) and astra[slowest] < sp.get(slowest, 0)
    why = (f"On {slowest}: ASTRA {astra[slowest] * 1e3:.2f} ms, one device "
           f"{single.get(slowest, float('nan')) * 1e3:.2f} ms, sequence parallelism "
           f"{sp.get(slowest, float('nan')) * 1e3:.2f} ms ({doc['result']['world_size']} ranks "
           f"on this machine, links emulated). Against one device, {crossover(astra, single)}; "
           f"against sequence parallelism, {crossover(astra, sp)}.")
    modes = [m for m in ("astra", "single", "sp") if m in doc["summary"]]
    links = sorted(astra, key=bits_per_s)
    table = Table(["link", *modes],
                  [[b, *(fmt(_latency(doc, m).get(b), ".2f", 1e3, " ms") for m in modes)]
                   for b in links], caption="median latency over the reps, measured")
    return Verdict(MET if met else NOT_MET, why, [_figure(doc, modes), table])


STORY = Story("astra", "ASTRA: communication-efficient multi-device inference",
              "vector-quantising the tokens devices exchange makes sequence-parallel inference "
              "faster than one device and than full-precision sequence parallelism on slow links "
              "(paper: 2.64x over one device, 15.25x over multi-device baselines at 10 Mbps).",
              judge)
