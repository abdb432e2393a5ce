"""``edgekit compare``: the table and the accuracy-latency and accuracy-energy Pareto plots.

Every point's hover shows every figure of its row and how each was obtained: the task metric
scored on the test split, latency measured by the profiler, energy measured by a sensor or
estimated from the device profile (the row's ``energy_source`` says which).
"""
from __future__ import annotations

from html import escape
from typing import Any

from edgekit.compare.pareto import frontier
from edgekit.compare.table import cells, columns
from edgekit.report.blocks import Block, Figure, Note, Result, SectionKind, Table, fmt, number
from edgekit.schema import ANY_OBJECT, BOOL, NUMBER, STR, ListOf, Object, Optional

# A user's model compared without --data or --evaluate has no metric or dataset (not scored).
ROW = Object({"name": STR, "family": STR, "metric": Optional(STR), "dataset": Optional(STR),
              "params": NUMBER,
              "flops_per_sample": NUMBER, "latency_p50_ms": NUMBER, "latency_p99_ms": NUMBER,
              "throughput_per_s": NUMBER, "energy_per_inference_j": NUMBER,
              "energy_source": STR, "peak_rss_mib": NUMBER, "pareto_latency": BOOL,
              "pareto_energy": BOOL, "profile": ANY_OBJECT})
SCHEMA = Object({"rows": ListOf(ROW), "device": Object({"display_name": STR}), "backend": STR,
                 "metric": STR, "higher_is_better": BOOL, "energy_sources": ListOf(STR)})


def _score(metric: str, value: Any) -> str:
    return fmt(value, ".2f", 100, "%") if metric == "accuracy" else fmt(value, ".1f")


def _latency_source(row: dict[str, Any], doc: dict[str, Any]) -> str:
    prof = row["profile"]
    settings = prof.get("settings", {})
    return (f"measured: {doc['backend']}, batch {settings.get('batch', '?')}, "
            f"{settings.get('threads', '?')} thread(s), {prof.get('iterations', '?')} timed runs")


def _hover(row: dict[str, Any], doc: dict[str, Any]) -> str:
    metric = doc["metric"]
    energy = number(row["energy_per_inference_j"])
    lines = [
        f"<b>{escape(row['name'])}</b> ({escape(row['family'])})",
        (f"{metric}: {_score(metric, row[metric])} (scored on the {row['dataset']} test split)"
         if row.get("dataset") else "not scored (no --data or --evaluate)"),
        f"latency p50 {fmt(row['latency_p50_ms'], '.4g')} ms, p99 "
        f"{fmt(row['latency_p99_ms'], '.4g')} ms ({_latency_source(row, doc)})",
        f"throughput: {fmt(row['throughput_per_s'], '.0f')} samples/s (measured)",
        "energy: " + ("none" if energy is None else f"{energy * 1e3:.4g} mJ per inference")
        + f" ({escape(row['energy_source'])})",
        f"params {row['params']:,}, {fmt(row['flops_per_sample'], '.4g', 1e-6)} MFLOPs per sample"
        " (counted)",
        f"peak RSS {fmt(row['peak_rss_mib'], '.1f')} MiB (measured)",
    ]
    if "sops_per_sample" in row:
        lines.append(f"{fmt(row['sops_per_sample'], '.4g', 1e-6)} MSOPs per sample, "
                     f"{fmt(row['energy_45nm_j'], '.4g', 1e6)} µJ at 45 nm (counted as "
                     "'edgekit simulate' counts them)")
    return "<br>".join(lines)


def _plot(doc: dict[str, Any], key: str, scale: float, label: str, flag: str,
          name: str) -> Figure:
    import plotly.graph_objects as go

    metric = doc["metric"]
    rows = [r for r in doc["rows"] if number(r[key]) is not None and number(r[metric]) is not None]
    scale_y = 100.0 if metric == "accuracy" else 1.0
    sign = 1.0 if doc["higher_is_better"] else -1.0
    fig = go.Figure()
    for on_front, colour, legend in ((True, "#d62728", "on the Pareto front"),
                                     (False, "#1f77b4", "dominated")):
        group = [r for r in rows if r[flag] == on_front]
        if not group:
            continue
        fig.add_trace(go.Scatter(
            x=[r[key] * scale for r in group], y=[r[metric] * scale_y for r in group],
            mode="markers+text", name=legend, text=[r["name"] for r in group], cliponaxis=False,
            textposition="top center", marker={"size": 11, "color": colour},
            hovertext=[_hover(r, doc) for r in group], hoverinfo="text"))
    front = frontier([sign * r[metric] * scale_y for r in rows], [r[key] * scale for r in rows])
    if front:
        fig.add_trace(go.Scatter(x=[x for x, _ in front], y=[sign * y for _, y in front],
                                 mode="lines", line={"shape": "hv", "color": "#d62728"},
                                 opacity=0.5, name="Pareto frontier", hoverinfo="skip"))
    unit = (" (%)" if metric == "accuracy"
            else "" if doc["higher_is_better"] else ", lower is better")
    fig.update_layout(title=f"{metric} against {label}", xaxis_title=label,
                      yaxis_title=f"{metric} on {rows[0]['dataset'] if rows else '?'}{unit}",
                      xaxis_type="log", height=460, margin={"t": 50, "b": 50},
                      hoverlabel={"align": "left"})
    return Figure(name, fig)


def _table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The CLI's compare table (``edgekit/compare/table.py``) plus where each energy came from."""
    return ([*columns(doc), "energy source"],
            [[*cells(doc, r, dash="–"), r["energy_source"]] for r in doc["rows"]])


def render(results: list[Result]) -> list[Block]:
    blocks: list[Block] = []
    for i, result in enumerate(results):
        doc = result.doc
        metric = doc["metric"]
        device = doc["device"]["display_name"]
        blocks.append(Note(f"{len(doc['rows'])} models on {device}, backend {doc['backend']}; "
                           f"energy: {', '.join(doc['energy_sources'])} ({result.path})"))
        header, rows = _table(doc)
        blocks.append(Table(header, rows,
                            caption=f"* on the {metric}-latency front, † on the {metric}-energy "
                                    "front, ! failed validation"))
        if not doc.get("scored", True):
            blocks.append(Note("Not scored: no --data or --evaluate was given for these models, "
                               "so there is no metric to plot against; the table holds the "
                               "efficiency figures."))
            continue
        blocks.append(_plot(doc, "latency_p50_ms", 1.0, "median latency (ms)", "pareto_latency",
                            f"compare-{i}-latency"))
        if any(number(r["energy_per_inference_j"]) is not None for r in doc["rows"]):
            blocks.append(_plot(doc, "energy_per_inference_j", 1e3,
                                "energy per inference (mJ)", "pareto_energy",
                                f"compare-{i}-energy"))
        else:
            blocks.append(Note("No energy figure: no sensor and no estimate for this device."))
    return blocks


SECTION = SectionKind(key="compare", title="Compare: accuracy, latency, energy",
                      schemas={"compare": SCHEMA}, render=render)
