"""The task metric against latency and against energy, with the Pareto frontier drawn."""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from edgekit.compare.pareto import frontier
from edgekit.fileio import atomic_write_bytes

MARKERS = {"fp32": "o", "fp16": "s", "int8": "^"}  # precision by marker shape; others: circles


def plot_compare(result: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    metric = result["metric"]
    scale_y, unit = (100.0, " (%)") if metric == "accuracy" else (1.0, "")
    sign = 1.0 if result["higher_is_better"] else -1.0
    panels = [("latency_p50_ms", "median latency (ms)", "pareto_latency")]
    if any(not math.isnan(r["energy_per_inference_j"]) for r in rows):
        energy_label = "energy per inference (mJ, " + ", ".join(result["energy_sources"]) + ")"
        panels.append(("energy_per_inference_j", energy_label, "pareto_energy"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    for ax, (key, label, flag) in zip(axes[0], panels, strict=False):
        scale = 1e3 if key.startswith("energy") else 1.0
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
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(f"{metric} on {rows[0]['dataset']}{unit}")
        ax.grid(True, which="both", alpha=0.3)
    device = result["device"]
    fig.suptitle(f"{device['display_name']} · backend {result['backend']}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
