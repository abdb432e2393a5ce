"""One version of WiFi-Mamba's scan against another: the same model and weights, the scan taken
from a given ``ssm.py`` (say an earlier commit's) or from edgekit's own, on ONNX Runtime and
eager torch, alternated call by call.

The earlier file's ``dual_selective_scan`` replaces the model's for its rows, and its module's
``softplus`` (or torch's, where the file has none) that of the SSMs' ``prepare``; everything else
is edgekit's. Each round visits every (backend, length) group once, in an order that rotates
between rounds, and times the two versions call by call; the table quotes each version's median
over rounds and the median (and range) of the per-round ratios earlier / this.

    git show 9ff9a8a~1:edgekit/methods/wifi_mamba/ssm.py > /tmp/previous_ssm.py
    python benchmarks/wifi_mamba_scan_ab.py /tmp/previous_ssm.py [--rounds R] [--reps N]
"""
from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from common import markdown_table, median, write_result

from edgekit.backends.onnxruntime_backend import make_session
from edgekit.exporters.onnx import export_graph
from edgekit.methods.wifi_mamba import model as wifi_model
from edgekit.methods.wifi_mamba import ssm
from edgekit.registry import create_model

LENGTHS = [20, 50, 100, 200, 500]
BACKENDS = ["onnxruntime", "torch"]


def load_scan(path: Path):
    """The file's (dual_selective_scan, softplus) pair."""
    if not path.is_file():
        raise SystemExit(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location("earlier_ssm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "dual_selective_scan"):
        raise SystemExit(f"{path} has no dual_selective_scan")
    return module.dual_selective_scan, getattr(module, "softplus", F.softplus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("earlier", type=Path, help="the ssm.py to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=5, help="calls per version per round")
    args = parser.parse_args()
    if args.rounds < 1 or args.reps < 1:
        parser.error("--rounds and --reps must be at least 1")
    versions = {"earlier": load_scan(args.earlier),
                "this": (ssm.dual_selective_scan, ssm.softplus)}

    def use(version: str) -> None:
        wifi_model.dual_selective_scan, ssm.softplus = versions[version]

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = create_model("wifi-mamba").eval()
    for block in model.blocks:  # a trained net's coupling is not zero
        block.coupling.data.normal_(0, 0.5)
    calls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for length in LENGTHS:
            x = torch.randn(1, 2, 270, length)
            for version in versions:
                use(version)
                path = Path(tmp) / f"{version}-{length}.onnx"
                export_graph(model, (x,), path, opset=18, input_names=["input"],
                             output_names=["poses", "logits"], dynamo=False)
                session = make_session(path, threads=1)
                feed = {"input": x.numpy()}
                with torch.inference_mode():
                    want = model(x)[0].numpy()
                err = float(np.abs(session.run(None, feed)[0] - want).max())
                if err > 1e-3:
                    raise SystemExit(f"{version} at {length}: ONNX Runtime off by {err:.2e}")
                calls[("onnxruntime", length, version)] = lambda s=session, f=feed: s.run(None, f)

                def eager(version=version, x=x):
                    use(version)
                    with torch.inference_mode():
                        model(x)
                calls[("torch", length, version)] = eager
    use("this")
    groups = [(backend, length) for backend in BACKENDS for length in LENGTHS]
    times: dict[tuple, list[float]] = {key: [] for key in calls}
    for r in range(args.rounds):
        for backend, length in groups[r % len(groups):] + groups[:r % len(groups)]:
            per: dict[str, list[float]] = {v: [] for v in versions}
            for _ in range(args.reps):
                for version in versions:
                    t0 = time.perf_counter()
                    calls[(backend, length, version)]()
                    per[version].append(time.perf_counter() - t0)
            for version, seconds in per.items():
                times[(backend, length, version)].append(median(seconds) * 1e3)
    use("this")
    rows, ratios = [], {}
    for backend in BACKENDS:
        for length in LENGTHS:
            earlier, this = times[(backend, length, "earlier")], times[(backend, length, "this")]
            ratio = [e / t for e, t in zip(earlier, this, strict=True)]
            ratios[f"{backend}:{length}"] = ratio
            rows.append([backend, length, f"{median(earlier):.2f}", f"{median(this):.2f}",
                         f"{median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})"])
    table = markdown_table(["backend", "packets L", "earlier ms", "this ms",
                            "earlier / this (rounds)"], rows)
    print(table)
    write_result("wifi_mamba_scan_ab", {
        "settings": {"earlier": str(args.earlier), "rounds": args.rounds, "reps": args.reps,
                     "lengths": LENGTHS, "threads": 1, "batch": 1},
        "round_ms": {f"{b}:{n}:{v}": t for (b, n, v), t in times.items()},
        "ratios": ratios, "table": table})


if __name__ == "__main__":
    main()
