"""Bar plots of a simulation report: firing rate per neuron layer, operations per synaptic layer."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from edgekit.fileio import atomic_write_bytes


def plot_simulation(report: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    neurons = [r for r in report["layers"] if "firing_rate" in r]
    synaptic = [r for r in report["layers"] if r["macs"] or r["sops"]]
    height = 0.22 * max(len(neurons), len(synaptic)) + 1.6
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, height))
    names = [r["name"] for r in neurons]
    left.barh(names, [r["firing_rate"] * 100 for r in neurons], color="tab:orange")
    left.set_xlabel("firing rate (% of neuron updates that spike)")
    left.set_title("neuron layers")
    names = [r["name"] for r in synaptic]
    ys = range(len(synaptic))
    right.barh([y - 0.2 for y in ys], [r["sops"] for r in synaptic], height=0.4,
               label="SOPs (spike-driven accumulates)", color="tab:blue")
    right.barh([y + 0.2 for y in ys], [r["macs"] for r in synaptic], height=0.4,
               label="MACs (real-valued inputs)", color="tab:red")
    right.set_yticks(list(ys), names)
    right.set_xscale("symlog", linthresh=1.0)
    right.set_xlabel("operations per inference (SpikingJelly op counters)")
    right.set_title("synaptic layers")
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8)
    for ax in (left, right):
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(f"{report['model']}: T={report['T']}, {report['samples']} samples of "
                 f"{report['inputs']}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
