"""The merged fleet report as a plot: one colour per device, each device's own Pareto front."""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from edgekit.compare.pareto import frontier
from edgekit.fileio import atomic_write_bytes


def plot_fleet(result: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    metric = result["metric"]
    scale_y, unit = (100.0, " (%)") if metric == "accuracy" else (1.0, "")
    sign = 1.0 if result["higher_is_better"] else -1.0
    panels = [("latency_p50_ms", "median latency (ms)", 1.0)]
    if any(not math.isnan(r["energy_per_inference_j"]) for r in rows):
        panels.append(("energy_per_inference_j", "energy per inference (mJ, "
                       + ", ".join(result["energy_sources"]) + ")", 1e3))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, label, scale) in zip(axes[0], panels, strict=False):
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
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(f"{metric} on {rows[0]['dataset']}{unit}" if rows else metric)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(f"{len(result['devices'])} devices · backend {result['backend']} · "
                 "lines: each device's Pareto front")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
