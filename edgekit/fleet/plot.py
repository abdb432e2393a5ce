"""The merged fleet report as a plot: one colour per device, each device's own Pareto front."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from edgekit.compare.pareto import frontier
from edgekit.compare.plot import label_axes, metric_figure, save_figure


def plot_fleet(result: dict[str, Any], path: str | Path) -> Path:
    rows, metric = result["rows"], result["metric"]
    figure = metric_figure(result)
    scale_y, sign = figure.scale_y, figure.sign
    colours = figure.plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key, label, scale in figure.panels:
        for i, device in enumerate(result["devices"]):
            group = [r for r in rows if r["device"] == device["profile"]
                     and not math.isnan(r[key])]
            if not group:
                continue
            colour = colours[i % len(colours)]
            xs = [r[key] * scale for r in group]
            ys = [r[metric] * scale_y for r in group]
            ax.scatter(xs, ys, color=colour, zorder=3, label=device["display_name"])
            for r, x, y in zip(group, xs, ys, strict=True):
                ax.annotate(r["name"], (x, y), textcoords="offset points", xytext=(5, 4),
                            fontsize=7)
            front = frontier([sign * y for y in ys], xs)
            fx, fy = zip(*front, strict=True)
            ax.step(fx, [sign * y for y in fy], where="post", color=colour, alpha=0.6)
        label_axes(ax, label, result, figure.unit)
        ax.legend(fontsize=8, loc="best")
    return save_figure(figure, f"{len(result['devices'])} devices · backend "
                       f"{result['backend']} · lines: each device's Pareto front", path)
