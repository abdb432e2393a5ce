"""``edgekit validate``: each output's error against PyTorch (Polygraphy-style statistics)."""
from __future__ import annotations

from html import escape
from typing import Any

from edgekit.report.blocks import Block, Figure, Note, Result, SectionKind, Table, fmt, shown_path
from edgekit.schema import BOOL, NUMBER, STR, ListOf, Object

OUTPUT = Object({"name": STR, "max_abs": NUMBER, "median_abs": NUMBER, "p99_abs": NUMBER,
                 "max_rel": NUMBER, "median_rel": NUMBER, "p99_rel": NUMBER, "mismatched": NUMBER,
                 "elements": NUMBER, "atol": NUMBER, "rtol": NUMBER, "passed": BOOL})
SCHEMA = Object({"artifact": STR, "format": STR, "precision": STR, "passed": BOOL, "against": STR,
                 "inputs": STR, "outputs": ListOf(OUTPUT)})
_STATS = ("median_abs", "p90_abs", "p95_abs", "p99_abs", "max_abs")


def _figure(results: list[Result]) -> Figure:
    """Absolute error percentiles of every output of every validation, on one log axis."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for result in results:
        doc = result.doc
        for o in doc["outputs"]:
            stats = [s for s in _STATS if s in o]
            label = escape(f"{doc['artifact'].rstrip('/').split('/')[-1]}:{o['name']}")
            fig.add_trace(go.Scatter(
                x=[s.replace("_abs", "") for s in stats], y=[max(o[s], 1e-12) for s in stats],
                mode="lines+markers", name=label, hoverinfo="text",
                hovertext=[f"<b>{label}</b> ({doc['format']}, {doc['precision']})<br>"
                           f"{s.replace('_', ' ')} error {o[s]:.3g} against {doc['against']}"
                           f"<br>atol {o['atol']:g}, rtol {o['rtol']:g}; {o['mismatched']}/"
                           f"{o['elements']} outside (measured on {doc['inputs']})"
                           for s in stats]))
    fig.update_layout(title="absolute error by percentile (log)", yaxis_type="log",
                      yaxis_title="|actual - expected|", height=400, hoverlabel={"align": "left"})
    return Figure("validate", fig)


def _row(doc: dict[str, Any], o: dict[str, Any]) -> list[str]:
    return [shown_path(doc["artifact"]), f"{doc['format']}, {doc['precision']}", o["name"],
            "pass" if o["passed"] else "FAIL", fmt(o["max_abs"], ".3g"),
            fmt(o["median_abs"], ".3g"), fmt(o["p99_abs"], ".3g"), fmt(o["max_rel"], ".3g"),
            fmt(o["p99_rel"], ".3g"), f"{o['mismatched']}/{o['elements']}",
            f"{o['atol']:g} / {o['rtol']:g}"]


def render(results: list[Result]) -> list[Block]:
    passed = sum(r.doc["passed"] for r in results)
    return [Note(f"{passed} of {len(results)} exports within tolerance; an element passes when "
                 "|actual - expected| <= atol + rtol * |expected|."),
            Table(["artifact", "format", "output", "verdict", "max abs", "median abs", "p99 abs",
                   "max rel", "p99 rel", "outside", "atol / rtol"],
                  [_row(r.doc, o) for r in results for o in r.doc["outputs"]],
                  caption="; ".join(f"{r.path}: against {r.doc['against']} on {r.doc['inputs']}"
                                    for r in results)),
            _figure(results)]


SECTION = SectionKind(key="validate", title="Validation: export error statistics",
                      schemas={"validate": SCHEMA}, render=render)
