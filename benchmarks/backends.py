"""torch eager vs ONNX Runtime for every registry model: same inputs, same threads, as ratios.

Runs are interleaved (torch, ORT, torch, ORT, ...) so slow drift on a shared machine hits both
alike; the table quotes medians of the per-round p50 latencies.

    python benchmarks/backends.py [--threads N] [--rounds R] [--duration S] [--batch B]
"""
from __future__ import annotations

import argparse

from common import markdown_table, median, write_result

from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiler.timing import TimingPlan
from edgekit.registry import all_names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=0.5)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    plan = TimingPlan(warmup_s=0.1, duration_s=args.duration)
    rows, records = [], []
    for name in all_names():
        p50 = {"torch": [], "onnxruntime": []}
        for _ in range(args.rounds):
            for backend in p50:
                settings = ProfileSettings(backend=backend, batch=args.batch, threads=args.threads,
                                           plan=plan, energy="none")
                p50[backend].append(profile(name, settings)["latency_ms"]["p50"])
        t, o = median(p50["torch"]), median(p50["onnxruntime"])
        records.append({"model": name, "torch_p50_ms": p50["torch"],
                        "onnxruntime_p50_ms": p50["onnxruntime"],
                        "torch_median_ms": t, "onnxruntime_median_ms": o, "speedup_ort": t / o})
        rows.append([name, f"{t:.4f}", f"{o:.4f}", f"{t / o:.2f}x"])
        print(f"{name:14s} torch {t:.4f} ms  onnxruntime {o:.4f} ms  ratio {t / o:.2f}x",
              flush=True)
    table = markdown_table(["model", "torch p50 (ms)", "ORT p50 (ms)", "torch / ORT"], rows)
    print(table)
    write_result("backends", {"settings": vars(args), "models": records, "table": table})


if __name__ == "__main__":
    main()
