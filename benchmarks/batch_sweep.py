"""edgekit profile across batch sizes, eagerly and from a CUDA graph: where each model on the GPU
stops being bound by kernel launches and starts being bound by its arithmetic.

For every model and batch, edgekit's profiler (the code behind ``edgekit profile --backend torch
--provider DEVICE``) times the forward pass: p50 latency, samples/s, achieved FLOP/s and its
share of the device profile's peak. On CUDA every case runs a second time from a captured CUDA
graph (``--cuda-graph``), which submits the whole forward as one launch.

A model is launch-bound while a bigger batch costs (almost) no more time: the GPU runs each
kernel faster than the host issues the next one, so latency is the sum of launch overheads and
samples/s grows with the batch. Once the latency grows in proportion to the batch, the
arithmetic (or memory traffic) binds. Per model the verdicts give the largest batch still
launch-bound (p50 within 1.5x of batch 1), samples/s from the smallest to the largest batch, and
the CUDA graph's speed-up at the smallest batch (launch-bound) and the largest.

A time budget (``--budget-s``) bounds the sweep: the smallest and the largest batch of every
model come first, then the batches between, and no case starts once the budget is spent (the
cases left out are listed in the JSON, not counted as failures).

    python benchmarks/batch_sweep.py [--device cpu|cuda] [--models mlp ds-cnn ...]
        [--batches 1 8 32 128 256] [--duration 0.2] [--budget-s 60]
"""
from __future__ import annotations

import argparse
import time
import warnings

from common import add_device_argument, markdown_table, write_result

from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiler.timing import TimingPlan

MODELS = ("mlp", "ds-cnn", "spiking-cnn", "spikingresformer", "wbmm", "wifi-mamba", "astra-vit")
BATCHES = (1, 8, 32, 128, 256)
LAUNCH_BOUND = 1.5  # p50 within this factor of the smallest batch's: still launch-bound


def order(models: list[str], batches: list[int]) -> list[tuple[str, int]]:
    """Both regimes first: every model's smallest and largest batch, then the ones between."""
    ends = [min(batches), max(batches)]
    rest = [b for b in batches if b not in ends]
    return ([(m, b) for b in dict.fromkeys(ends) for m in models]
            + [(m, b) for b in rest for m in models])


def one_case(model: str, batch: int, device: str, graph: bool, plan: TimingPlan) -> dict:
    settings = ProfileSettings(backend="torch", provider=device, batch=batch, plan=plan,
                               energy="none", cuda_graph=graph)
    with warnings.catch_warnings(record=True) as caught:  # a capture that failed says so
        warnings.simplefilter("always")
        report = profile(model, settings)
    comp = report["compute"]
    return {"model": model, "batch": batch, "cuda_graph": report["backend"].get("cuda_graph",
                                                                                "off"),
            "p50_ms": report["latency_ms"]["p50"], "p99_ms": report["latency_ms"]["p99"],
            "samples_per_s": report["throughput"]["samples_per_s"],
            "iterations": report["iterations"],
            "achieved_flops_per_s": comp.get("achieved_flops_per_s"),
            "share_of_peak": comp.get("share_of_peak"),
            "gpu_memory": report["backend"].get("gpu_memory"),
            "warnings": [str(w.message).splitlines()[0] for w in caught]}


def verdicts(rows: list[dict]) -> list[dict]:
    """Per model: the launch-bound range, the throughput gained by batching, and the CUDA
    graph's speed-up at the smallest and the largest batch measured for both."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        eager = {r["batch"]: r for r in rows if r["model"] == model and not r["graph"]}
        graph = {r["batch"]: r for r in rows if r["model"] == model and r["graph"]}
        if not eager:
            continue
        small, large = min(eager), max(eager)
        bound = max(b for b in eager if eager[b]["p50_ms"] <= LAUNCH_BOUND * eager[small]["p50_ms"])
        out.append({"claim": f"{model}: largest batch still launch-bound (p50 within "
                             f"{LAUNCH_BOUND:g}x of batch {small})",
                    "value": bound, "met": None,
                    "p50_ms": {b: round(r["p50_ms"], 4) for b, r in sorted(eager.items())}})
        if large != small:
            gain = eager[large]["samples_per_s"] / eager[small]["samples_per_s"]
            out.append({"claim": f"{model}: samples/s at batch {large} over batch {small} "
                                 f"(ideal {large // small}x)", "value": round(gain, 3),
                        "met": None})
        for b in sorted({small, large} & set(graph)):
            if graph[b]["cuda_graph"] != "on":
                out.append({"claim": f"{model}: CUDA graph at batch {b}",
                            "value": graph[b]["cuda_graph"], "met": False})
                continue
            speedup = eager[b]["p50_ms"] / graph[b]["p50_ms"]
            out.append({"claim": f"{model}: CUDA graph p50 speed-up at batch {b}",
                        "value": round(speedup, 3), "met": speedup >= 1.0})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(parser)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--warmup", type=float, default=0.05, help="warm-up seconds per case")
    parser.add_argument("--duration", type=float, default=0.2, help="timed seconds per case")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no case after this many seconds (default: no limit)")
    args = parser.parse_args()
    started = time.perf_counter()  # the budget counts the start-up below too
    plan = TimingPlan(warmup_s=args.warmup, duration_s=args.duration, min_iterations=5)
    # the process's first profile pays torch's one-off start-up (thread pools, the CUDA
    # context, cuBLAS handles): a short case run and discarded takes it out of the figures
    one_case(args.models[0], min(args.batches), args.device, False,
             TimingPlan(warmup_s=0.0, iterations=3))
    rows: list[dict] = []
    left_out: list[str] = []
    for model, batch in order(args.models, args.batches):
        for graph in ((False, True) if args.device == "cuda" else (False,)):
            case = f"{model} batch {batch}{' graph' if graph else ''}"
            if args.budget_s is not None and time.perf_counter() - started > args.budget_s:
                left_out.append(case)
                continue
            row = one_case(model, batch, args.device, graph, plan)
            rows.append({**row, "graph": graph})
            print(f"{case}: p50 {row['p50_ms']:.4f} ms, {row['samples_per_s']:.1f} samples/s",
                  flush=True)
    rows.sort(key=lambda r: (args.models.index(r["model"]), r["batch"], r["graph"]))
    found = verdicts(rows)
    table = markdown_table(
        ["model", "batch", "CUDA graph", "p50 ms", "samples/s", "share of peak"],
        [[r["model"], r["batch"], r["cuda_graph"], f"{r['p50_ms']:.4f}",
          f"{r['samples_per_s']:.1f}",
          "-" if r["share_of_peak"] is None else f"{r['share_of_peak'] * 100:.2f} %"]
         for r in rows])
    print(table)
    print(markdown_table(["claim", "value"], [[v["claim"], v["value"]] for v in found]))
    if left_out:
        print(f"left out (budget of {args.budget_s:g} s spent): {', '.join(left_out)}")
    write_result(f"batch_sweep_{args.device}", {
        "settings": {**vars(args), "launch_bound_factor": LAUNCH_BOUND},
        "seconds": round(time.perf_counter() - started, 1), "results": rows,
        "left_out": left_out, "verdicts": found, "table": table})


if __name__ == "__main__":
    main()
