"""The task metric against latency and against energy, with the Pareto frontier drawn."""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, NamedTuple

from edgekit.compare.pareto import frontier
from edgekit.compare.table import PERCENT_METRICS
from edgekit.fileio import atomic_write_bytes

MARKERS = {"fp32": "o", "fp16": "s", "int8": "^"}  # precision by marker shape; others: circles


class Figure(NamedTuple):
    """A metric-against-cost figure: one panel for latency and, where known, one for energy."""
    plt: Any
    fig: Any
    panels: list[tuple[Any, str, str, float]]  # (axes, row key, x label, x scale)
    scale_y: float  # accuracy in %, error metrics as they are
    unit: str
    sign: float  # +1 where higher is better: the Pareto front maximises sign * metric


def metric_figure(result: dict[str, Any]) -> Figure:
    """The panels of a compare-shaped result (shared by compare's plot and the fleet's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    scale_y, unit = (100.0, " (%)") if result["metric"] in PERCENT_METRICS else (1.0, "")
    keys = [("latency_p50_ms", "median latency (ms)", 1.0)]
    if any(not math.isnan(r["energy_per_inference_j"]) for r in rows):
        keys.append(("energy_per_inference_j", "energy per inference (mJ, "
                     + ", ".join(result["energy_sources"]) + ")", 1e3))
    fig, axes = plt.subplots(1, len(keys), figsize=(6.5 * len(keys), 4.8), squeeze=False)
    panels = [(ax, *k) for ax, k in zip(axes[0], keys, strict=True)]
    return Figure(plt, fig, panels, scale_y, unit, 1.0 if result["higher_is_better"] else -1.0)


def label_axes(ax: Any, label: str, result: dict[str, Any], unit: str) -> None:
    """Log cost axis, the metric on its dataset, a light grid."""
    rows, metric = result["rows"], result["metric"]
    ax.set_xscale("log")
    ax.set_xlabel(label)
    ax.set_ylabel(f"{metric} on {rows[0]['dataset']}{unit}" if rows else metric)
    ax.grid(True, which="both", alpha=0.3)


def save_figure(figure: Figure, title: str, path: str | Path) -> Path:
    figure.fig.suptitle(title)
    figure.fig.tight_layout()
    buf = io.BytesIO()
    figure.fig.savefig(buf, format="png", dpi=120)
    figure.plt.close(figure.fig)
    return atomic_write_bytes(path, buf.getvalue())


def plot_compare(result: dict[str, Any], path: str | Path) -> Path:
    metric = result["metric"]
    rows = [r for r in result["rows"] if r.get(metric) is not None]  # an unscored row has no y
    figure = metric_figure(result)
    scale_y, unit, sign = figure.scale_y, figure.unit, figure.sign
    flags = {"latency_p50_ms": "pareto_latency", "energy_per_inference_j": "pareto_energy"}
    for ax, key, label, scale in figure.panels:
        flag = flags[key]
        xs = [r[key] * scale for r in rows]
        ys = [r[metric] * scale_y for r in rows]
        for precision in dict.fromkeys(r.get("precision", "fp32") for r in rows):
            mine = [i for i, r in enumerate(rows) if r.get("precision", "fp32") == precision]
            marker = MARKERS.get(precision, "o")
            ax.scatter([xs[i] for i in mine], [ys[i] for i in mine],
                       c=["tab:red" if rows[i][flag] else "tab:blue" for i in mine],
                       marker=marker, zorder=3)
            if result.get("precisions"):  # a grey legend entry per shape; colour is the front
                ax.scatter([], [], c="tab:gray", marker=marker, label=precision)
        for r, x, y in zip(rows, xs, ys, strict=False):
            text = r["name"] + (f" {r['precision']}" if result.get("precisions") else "")
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
        front = frontier([sign * y for y in ys], xs)
        if front:
            fx, fy = zip(*front, strict=False)
            fy = [sign * y for y in fy]
            ax.step(fx, fy, where="post", color="tab:red", alpha=0.6, label="Pareto frontier")
        if front or result.get("precisions"):
            ax.legend(loc="lower right" if sign > 0 else "upper right")
        label_axes(ax, label, result, unit)
    device = result["device"]
    return save_figure(figure, f"{device['display_name']} · backend {result['backend']}", path)
