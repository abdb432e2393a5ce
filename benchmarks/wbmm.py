"""WBMM (windows 7 and 14) against depthwise convolution (5x5, 13x13, 27x27), torch and ONNX Runtime.

Forward throughput of one operator at stage-like shapes, in deploy form (WBMM: fused table and
bias, no BatchNorm; depthwise conv: conv with bias). Alternatives run interleaved (a round times
every operator on both backends once, in an order that rotates between rounds) so drift on a
shared machine hits them alike; the tables quote the median over rounds of each round's median
per-call latency. The paper's claims (methods.md §3) checked here:

  1. WBMM with 14x14 windows is at least as fast as a 5x5 depthwise convolution;
  2. WBMM's throughput rises from window 7 to window 14;
  3. WBMM-14 is at least 3x faster than the 27x27 depthwise conv matching its in-window field.

    python benchmarks/wbmm.py [--rounds R] [--min-time S] [--threads N] [--quick]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from common import markdown_table, median, write_result
from torch import nn

from edgekit.backends import make_session
from edgekit.kernels.wbmm import WBMM, flops as wbmm_flops

SHAPES = [(128, 56, 1), (128, 56, 8), (256, 28, 1), (256, 28, 8)]  # (channels, H = W, batch)
QUICK_SHAPES = [(128, 56, 1), (256, 28, 8)]
# name -> (kind, size, deploy form); ORT gets no compact rows: the exporter and ORT's own constant
# folding turn Gather(table, index) of two constants into the dense matrix, i.e. the cached form.
OPS = {
    "wbmm7": ("wbmm", 7, "cached"), "wbmm7-compact": ("wbmm", 7, "compact"),
    "wbmm14": ("wbmm", 14, "cached"), "wbmm14-compact": ("wbmm", 14, "compact"),
    "dw5": ("dw", 5, None), "dw13": ("dw", 13, None), "dw27": ("dw", 27, None),
}
ORT_OPS = ("wbmm7", "wbmm14", "dw5", "dw13", "dw27")


def build(name: str, channels: int) -> nn.Module:
    kind, size, form = OPS[name]
    torch.manual_seed(0)
    if kind == "dw":
        return nn.Conv2d(channels, channels, size, padding=size // 2, groups=channels).eval()
    return WBMM(channels, size).eval().to_deploy(form)


def op_flops(name: str, channels: int, side: int, batch: int) -> int:
    kind, size, _ = OPS[name]
    if kind == "dw":
        return 2 * batch * channels * side * side * size * size
    return wbmm_flops(batch, channels, side, side, size)


def export(module: nn.Module, x: torch.Tensor, path: Path) -> None:
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"],
                          opset_version=18, dynamo=True, external_data=False)


def time_call(fn, min_time: float, min_iters: int) -> float:
    """Median seconds per call after one warm-up call, over at least min_iters and min_time."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return median(times)


def bench_shape(channels: int, side: int, batch: int, args, workdir: Path) -> dict:
    x = torch.randn(batch, channels, side, side)
    feed = {"x": x.numpy()}
    runs = {}
    for name in OPS:
        module = build(name, channels)
        runs[("torch", name)] = lambda m=module: m(x)
    for name in ORT_OPS:
        path = workdir / f"{name}-{channels}-{side}-{batch}.onnx"
        module = build(name, channels)
        export(module, x, path)
        session = make_session(path, threads=args.threads)
        with torch.inference_mode():
            ref = module(x).numpy()
        err = float(np.abs(session.run(None, feed)[0] - ref).max())
        if err > 1e-3 * max(1.0, float(np.abs(ref).max())):
            raise RuntimeError(f"ONNX Runtime disagrees with torch for {name}: max error {err}")
        runs[("onnxruntime", name)] = lambda s=session: s.run(None, feed)
    keys = list(runs)
    samples: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    with torch.inference_mode():
        for r in range(args.rounds):
            order = keys[r % len(keys):] + keys[:r % len(keys)]  # rotate who goes first
            for key in order:
                samples[key].append(time_call(runs[key], args.min_time, args.min_iters))
    out = {}
    for (backend, name), values in samples.items():
        lat = median(values)
        out.setdefault(backend, {})[name] = {
            "latency_ms_per_round": [round(v * 1e3, 4) for v in values],
            "latency_ms": lat * 1e3,
            "images_per_s": batch / lat,
            "gflop_per_s": op_flops(name, channels, side, batch) / lat / 1e9,
            "flops": op_flops(name, channels, side, batch),
        }
    return out


CLAIMS = [  # (key, faster, slower, threshold, statement)
    ("wbmm14_vs_dw5", "wbmm14", "dw5", 1.0, "WBMM-14 at least as fast as DW 5x5"),
    ("wbmm14_vs_wbmm7", "wbmm14", "wbmm7", 1.0, "WBMM throughput rises from window 7 to 14"),
    ("wbmm14_vs_dw27", "wbmm14", "dw27", 3.0, "WBMM-14 at least 3x faster than DW 27x27"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.15, help="seconds per timing")
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two shapes, three rounds")
    args = parser.parse_args()
    if args.quick:
        args.rounds = min(args.rounds, 3)
    torch.set_num_threads(args.threads)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    load_before = os.getloadavg()
    started = time.perf_counter()
    records, lat_rows, ratio_rows = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for channels, side, batch in shapes:
            result = bench_shape(channels, side, batch, args, Path(tmp))
            for backend, ops in result.items():
                shape = f"C={channels} {side}x{side} B={batch}"
                ratios = {key: ops[slower]["latency_ms"] / ops[faster]["latency_ms"]
                          for key, faster, slower, _, _ in CLAIMS}
                ratios["wbmm7_vs_dw13"] = ops["dw13"]["latency_ms"] / ops["wbmm7"]["latency_ms"]
                records.append({"channels": channels, "side": side, "batch": batch,
                                "backend": backend, "ops": ops, "throughput_ratios": ratios})
                lat_rows.append([shape, backend] + [f"{ops[n]['latency_ms']:.3f}" if n in ops else "-"
                                                    for n in OPS])
                ratio_rows.append([shape, backend] + [f"{ratios[k]:.2f}x" for k, *_ in CLAIMS]
                                  + [f"{ratios['wbmm7_vs_dw13']:.2f}x"])
                print(f"{shape:22s} {backend:12s} " + "  ".join(
                    f"{n} {ops[n]['latency_ms']:.3f}" for n in OPS if n in ops), flush=True)
    verdicts = []
    for key, _, _, threshold, statement in CLAIMS:
        held = [r for r in records if r["throughput_ratios"][key] >= threshold]
        verdict = ("confirmed" if len(held) == len(records) else
                   "refuted" if not held else "mixed")
        verdicts.append({"claim": statement, "threshold": threshold, "verdict": verdict,
                         "held_in": f"{len(held)}/{len(records)}",
                         "ratios": [round(r["throughput_ratios"][key], 3) for r in records]})
    lat_table = markdown_table(["shape", "backend"] + [f"{n} (ms)" for n in OPS], lat_rows)
    ratio_table = markdown_table(
        ["shape", "backend", "WBMM-14 vs DW5", "WBMM-14 vs WBMM-7", "WBMM-14 vs DW27",
         "WBMM-7 vs DW13"], ratio_rows)
    verdict_table = markdown_table(["claim", "verdict", "held in"],
                                   [[v["claim"], v["verdict"], v["held_in"]] for v in verdicts])
    print("\nmedian latency per call (ms); WBMM in cached deploy form unless marked compact\n")
    print(lat_table)
    print("\nthroughput ratios (>1: the first is faster)\n")
    print(ratio_table)
    print()
    print(verdict_table)
    write_result("wbmm", {
        "settings": {**vars(args), "shapes": shapes, "torch_threads": torch.get_num_threads()},
        "machine_load": {"loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "results": records, "claims": verdicts,
        "tables": {"latency_ms": lat_table, "ratios": ratio_table, "verdicts": verdict_table},
    })


if __name__ == "__main__":
    main()
