"""``edgekit astra run``: latency of each parallel mode on each emulated link."""
from __future__ import annotations

from html import escape
from typing import Any

from edgekit.report.blocks import Block, Figure, Note, Result, SectionKind, Table, fmt
from edgekit.schema import ANY_OBJECT, NUMBER, STR, ListOf, MapOf, Object, Optional

CASE = Object({"bandwidth": STR, "latency_s": NUMBER, "bytes_per_token_per_block": NUMBER,
               "compute_s": Optional(NUMBER), "comm_emulated_s": Optional(NUMBER)})
SCHEMA = Object({"summary": MapOf(ListOf(CASE)), "settings": ANY_OBJECT,
                 "result": Object({"model": STR, "world_size": NUMBER, "threads": NUMBER})})


def _cases(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One (mode, link) case per row of the run's summary."""
    return [{"mode": mode, **case} for mode, cases in doc["summary"].items() for case in cases]


def _hover(c: dict[str, Any]) -> str:
    parts = [f"<b>{escape(c['mode'])}</b> on {escape(c['bandwidth'])}",
             f"latency {c['latency_s']:.4f} s (measured, median over reps)"]
    if c.get("compute_s") is not None:
        parts.append(f"compute {c['compute_s']:.4f} s (measured)")
    if c.get("comm_emulated_s") is not None:
        parts.append(f"wire {c['comm_emulated_s']:.4f} s (emulated link)")
    parts.append(f"{c['bytes_per_token_per_block']:.1f} bytes/token/block (counted)")
    return "<br>".join(parts)


def _figure(cases: list[dict[str, Any]], name: str) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    for mode in dict.fromkeys(c["mode"] for c in cases):
        mine = [c for c in cases if c["mode"] == mode]
        fig.add_trace(go.Bar(name=mode, x=[c["bandwidth"] for c in mine],
                             y=[c["latency_s"] for c in mine], hoverinfo="text",
                             hovertext=[_hover(c) for c in mine]))
    fig.update_layout(barmode="group", title="latency by link and mode (s)",
                      xaxis_title="emulated link", yaxis_title="latency (s)", height=420,
                      hoverlabel={"align": "left"})
    return Figure(name, fig)


def render(results: list[Result]) -> list[Block]:
    blocks: list[Block] = []
    for i, result in enumerate(results):
        doc = result.doc
        cases = _cases(doc)
        run = doc["result"]
        blocks.append(Note(f"{run['model']}, {run['world_size']} rank(s), {run['threads']} "
                           f"thread(s) each; links emulated on this machine ({result.path})"))
        if not cases:
            blocks.append(Note("no cases in this report"))
            continue
        blocks.append(_figure(cases, f"astra-{i}"))
        blocks.append(Table(["mode", "link", "latency s", "compute s", "wire s",
                             "bytes/token/block"],
                            [[c["mode"], c["bandwidth"], fmt(c["latency_s"], ".4f"),
                              fmt(c.get("compute_s"), ".4f"), fmt(c.get("comm_emulated_s"), ".4f"),
                              fmt(c["bytes_per_token_per_block"], ".1f")] for c in cases]))
    return blocks


SECTION = SectionKind(key="astra", title="ASTRA runs in detail: latency by link and mode",
                      schemas={"astra/run": SCHEMA}, render=render)
