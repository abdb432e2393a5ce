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


def _figure(lines: dict[str, dict[str, float]]) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    for mode, lat in lines.items():
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


def _single(results: list[Result], model: str) -> dict[str, float]:
    """One device's latency on every link (it sends nothing, so the link does not matter),
    from whichever run of the same model has the single mode (its own run: world size 1)."""
    for r in results:
        cases = r.doc["summary"].get("single") if r.kind == "astra/run" else None
        if cases and r.doc["result"]["model"] == model:
            return {"*": min(c["latency_s"] for c in cases)}
    return {}


def _load(doc: dict[str, Any]) -> str:
    """The ranks share this machine's cores: its load says how much compute they could split."""
    load = doc["result"].get("load_average")
    return (f"; the ranks shared one machine's cores, its 1-minute load {load[0]:.1f}"
            if isinstance(load, list) and load else "")


def judge(results: list[Result]) -> Verdict:
    docs = [r.doc for r in results if r.kind == "astra/run"
            and {"astra", "sp"} <= set(r.doc["summary"])]
    single = _single(results, docs[0]["result"]["model"]) if docs else {}
    if not docs or not single:
        return missing("astra run reports with modes astra and sp, and single (one device) "
                       "on the same model")
    doc = docs[0]
    astra, sp = (_latency(doc, m) for m in ("astra", "sp"))
    single = {b: single["*"] for b in astra}
    slowest = min(astra, key=bits_per_s)
    met = astra[slowest] < single[slowest] and astra[slowest] < sp.get(slowest, 0)
    why = (f"On {slowest}: ASTRA {astra[slowest] * 1e3:.2f} ms, one device "
           f"{single[slowest] * 1e3:.2f} ms, sequence parallelism "
           f"{sp.get(slowest, float('nan')) * 1e3:.2f} ms ({doc['result']['model']}, "
           f"{doc['result']['world_size']} ranks on this machine, links emulated{_load(doc)}). "
           f"Against one device, {crossover(astra, single)}; "
           f"against sequence parallelism, {crossover(astra, sp)}.")
    lines = {"astra": astra, "one device": single, "sp": sp}
    links = sorted(astra, key=bits_per_s)
    table = Table(["link", *lines],
                  [[b, *(fmt(lat.get(b), ".2f", 1e3, " ms") for lat in lines.values())]
                   for b in links], caption=f"{doc['result']['model']}, "
                  f"{doc['result'].get('tokens', '?')} tokens: median latency over the reps, "
                  "measured")
    return Verdict(MET if met else NOT_MET, why, [_figure(lines), table])


STORY = Story("astra", "ASTRA: communication-efficient multi-device inference",
              "vector-quantising the tokens devices exchange makes sequence-parallel inference "
              "faster than one device and than full-precision sequence parallelism on slow links "
              "(paper: 2.64x over one device, 15.25x over multi-device baselines at 10 Mbps).",
              judge)
