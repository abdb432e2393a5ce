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
from edgekit.report.blocks import (
    Block,
    Figure,
    Note,
    Result,
    SectionKind,
    Table,
    fmt,
    model_label,
    number,
)
from edgekit.schema import ANY_OBJECT, BOOL, NUMBER, STR, ListOf, Object, Optional

# A user's model compared without --data or --evaluate has no metric or dataset (not scored).
# A fleet's report (``compare --fleet`` or ``--from``) names each row's device and lists them in
# ``devices``; a one-machine report names its device once, on top.
ROW = Object({"name": STR, "family": STR, "metric": Optional(STR), "dataset": Optional(STR),
              "params": Optional(NUMBER),
              "flops_per_sample": Optional(NUMBER), "latency_p50_ms": NUMBER,
              "latency_p99_ms": NUMBER, "throughput_per_s": NUMBER,
              "energy_per_inference_j": NUMBER, "energy_source": STR, "peak_rss_mib": NUMBER,
              "pareto_latency": BOOL, "pareto_energy": BOOL, "profile": Optional(ANY_OBJECT),
              "device": Optional(STR), "device_name": Optional(STR)})
DEVICE = Object({"display_name": STR})
SCHEMA = Object({"rows": ListOf(ROW), "device": Optional(DEVICE),
                 "devices": Optional(ListOf(DEVICE)), "backend": STR, "metric": STR,
                 "higher_is_better": BOOL, "energy_sources": ListOf(STR)})
# Label positions tried in turn along each axis, so neighbouring points' names do not overlap.
_POSITIONS = ("top center", "bottom center", "top right", "bottom left", "middle right",
              "middle left")


def _score(metric: str, value: Any) -> str:
    return fmt(value, ".2f", 100, "%") if metric == "accuracy" else fmt(value, ".1f")


def _devices(doc: dict[str, Any]) -> list[str]:
    if doc.get("devices"):
        return [d["display_name"] for d in doc["devices"]]
    return [doc["device"]["display_name"]] if doc.get("device") else ["?"]


def _label(row: dict[str, Any], doc: dict[str, Any]) -> str:
    """A row by model, and by device where the report holds several."""
    device = row.get("device_name") or row.get("device")
    return model_label(row) + (f" @ {device}" if device and len(_devices(doc)) > 1 else "")


def _latency_source(row: dict[str, Any], doc: dict[str, Any]) -> str:
    prof = row.get("profile") or {}
    settings = prof.get("settings", {})
    return (f"measured: {doc['backend']}, batch {settings.get('batch', '?')}, "
            f"{settings.get('threads', '?')} thread(s), {prof.get('iterations', '?')} timed runs")


def _hover(row: dict[str, Any], doc: dict[str, Any]) -> str:
    metric = doc["metric"]
    energy = number(row["energy_per_inference_j"])
    lines = [
        f"<b>{escape(_label(row, doc))}</b> ({escape(row['family'])})",
        (f"{metric}: {_score(metric, row[metric])} (scored on the {row['dataset']} test split)"
         if row.get("dataset") else "not scored (no --data or --evaluate)"),
        f"latency p50 {fmt(row['latency_p50_ms'], '.4g')} ms, p99 "
        f"{fmt(row['latency_p99_ms'], '.4g')} ms ({_latency_source(row, doc)})",
        f"throughput: {fmt(row['throughput_per_s'], '.0f')} samples/s (measured)",
        "energy: " + ("none" if energy is None else f"{energy * 1e3:.4g} mJ per inference")
        + f" ({escape(row['energy_source'])})",
        f"params {fmt(row['params'], ',.0f')}, {fmt(row['flops_per_sample'], '.4g', 1e-6)} "
        "MFLOPs per sample"
        " (counted)",
        f"peak RSS {fmt(row['peak_rss_mib'], '.1f')} MiB (measured)",
    ]
    if "sops_per_sample" in row:
        lines.append(f"{fmt(row['sops_per_sample'], '.4g', 1e-6)} MSOPs per sample, "
                     f"{fmt(row['energy_45nm_j'], '.4g', 1e6)} µJ at 45 nm (counted as "
                     "'edgekit simulate' counts them)")
    return "<br>".join(lines)


def axis_range(values: list[float], log_spread: float = 10.0) -> dict[str, Any]:
    """An axis that keeps a small difference small: from zero (linear) unless the values span
    more than ``log_spread`` times, then logarithmic over their span."""
    top = max(values, default=1.0)
    bottom = min(values, default=0.0)
    if bottom > 0 and top / bottom > log_spread:
        return {"type": "log"}
    return {"type": "linear", "range": [0, top * 1.15 if top > 0 else 1.0]}


def positions(xs: list[float], ys: list[float]) -> list[str]:
    """Text positions: points in order along x take the next position in turn, so close
    neighbours put their names on different sides."""
    order = sorted(range(len(xs)), key=lambda i: (xs[i], ys[i]))
    placed = [""] * len(xs)
    for rank, i in enumerate(order):
        placed[i] = _POSITIONS[rank % len(_POSITIONS)]
    return placed


def _plot(doc: dict[str, Any], key: str, scale: float, label: str, flag: str,
          name: str) -> Figure:
    import plotly.graph_objects as go

    metric = doc["metric"]
    rows = [r for r in doc["rows"] if number(r[key]) is not None and number(r[metric]) is not None]
    scale_y = 100.0 if metric == "accuracy" else 1.0
    sign = 1.0 if doc["higher_is_better"] else -1.0
    xs, ys = [r[key] * scale for r in rows], [r[metric] * scale_y for r in rows]
    where = positions(xs, ys)
    fig = go.Figure()
    for on_front, colour, legend in ((True, "#d62728", "on the Pareto front"),
                                     (False, "#1f77b4", "dominated")):
        group = [i for i, r in enumerate(rows) if r[flag] == on_front]
        if not group:
            continue
        fig.add_trace(go.Scatter(
            x=[xs[i] for i in group], y=[ys[i] for i in group], mode="markers+text",
            name=legend, text=[_label(rows[i], doc) for i in group], cliponaxis=False,
            textposition=[where[i] for i in group], marker={"size": 11, "color": colour},
            hovertext=[_hover(rows[i], doc) for i in group], hoverinfo="text"))
    devices = dict.fromkeys(r.get("device") for r in rows)
    for n, device in enumerate(devices):  # a front per device
        mine = [i for i, r in enumerate(rows) if r.get("device") == device]
        front = frontier([sign * ys[i] for i in mine], [xs[i] for i in mine])
        if front:
            fig.add_trace(go.Scatter(x=[x for x, _ in front], y=[sign * y for _, y in front],
                                     mode="lines", line={"shape": "hv", "color": "#d62728"},
                                     opacity=0.5, name="Pareto frontier", hoverinfo="skip",
                                     showlegend=n == 0))
    unit = (" (%)" if metric == "accuracy"
            else "" if doc["higher_is_better"] else ", lower is better")
    x_axis = axis_range(xs)
    fig.update_layout(title=f"{metric} against {label}"
                            + (" (log)" if x_axis["type"] == "log" else " (from 0)"),
                      xaxis={"title": label, **x_axis},
                      yaxis={"title": f"{metric} on {rows[0]['dataset'] if rows else '?'}{unit}",
                             **axis_range(ys, log_spread=float("inf"))},
                      height=480, margin={"t": 50, "b": 60, "r": 120},
                      hoverlabel={"align": "left"})
    return Figure(name, fig)


def _table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The CLI's compare table (``edgekit/compare/table.py``) plus where each energy came from."""
    return ([*columns(doc), "energy source"],
            [[*_named(cells(doc, r, dash="–"), _label(r, doc)), r["energy_source"]]
             for r in doc["rows"]])


def _named(row_cells: list[str], label: str) -> list[str]:
    """The CLI's cells with the model column (the second) holding the row's model label."""
    return [row_cells[0], label, *row_cells[2:]]


def render(results: list[Result]) -> list[Block]:
    blocks: list[Block] = []
    for i, result in enumerate(results):
        doc = result.doc
        metric = doc["metric"]
        device = ", ".join(_devices(doc))
        blocks.append(Note(f"{len(doc['rows'])} rows on {device}, backend {doc['backend']}; "
                           f"energy: {', '.join(doc['energy_sources'])} ({result.path})"))
        header, rows = _table(doc)
        caption = (f"* on the {metric}-latency front, † on the {metric}-energy front, ! failed "
                   "validation")
        if "45nm µJ" in header:
            caption += ("; mJ/inf is this device's energy per inference (its source in the last "
                        "column), 45nm µJ the same inference's operations priced at 45 nm "
                        "(Horowitz): two different machines, so the two figures differ")
        blocks.append(Table(header, rows, caption=caption))
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


SECTION = SectionKind(key="compare", title="All models compared: accuracy, latency, energy",
                      schemas={"compare": SCHEMA}, render=render)
