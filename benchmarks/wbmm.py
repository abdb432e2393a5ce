"""WBMM (windows 7 and 14) against depthwise convolution (5x5, 13x13, 27x27), torch and ONNX
Runtime.

Forward throughput of one operator at stage-like shapes, in deploy form (WBMM: fused table and
bias, no BatchNorm; depthwise conv: conv with bias). Every case (shape x thread count x backend x
operator) is set up first; then each round times every case once, in an order that rotates
between rounds, so a burst of load from another process on a shared machine spoils one round of
every case instead of every round of one case. Tables quote the median over rounds of each
round's median per-call latency. Each thread count is its own column of cases: all cores (how
the CPU is meant to be used) and one thread (immune to a second process stalling an OpenMP
barrier). The paper's claims (methods.md §3) checked here:

  1. WBMM with 14x14 windows is at least as fast as a 5x5 depthwise convolution;
  2. WBMM's throughput rises from window 7 to window 14;
  3. WBMM-14 is at least 3x faster than the 27x27 depthwise conv matching its in-window field.

    python benchmarks/wbmm.py [--rounds R] [--min-time S] [--threads N [N ...]] [--quick]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import export_module, markdown_table, median, run_rounds, write_result
from torch import nn

from edgekit.backends import make_session
from edgekit.kernels.wbmm import WBMM
from edgekit.kernels.wbmm import flops as wbmm_flops

SHAPES = [(128, 56, 1), (128, 56, 8), (256, 28, 1), (256, 28, 8)]  # (channels, H = W, batch)
QUICK_SHAPES = [(128, 56, 1), (256, 28, 8)]
# name -> (kind, size, deploy form). ONNX Runtime gets no compact rows: the exporter's optimiser
# (and ORT's own constant folding) turns Gather(table, index) of two constants into the dense
# matrix, so an exported compact operator runs as the cached one.
OPS = {
    "wbmm7": ("wbmm", 7, "cached"), "wbmm7-compact": ("wbmm", 7, "compact"),
    "wbmm14": ("wbmm", 14, "cached"), "wbmm14-compact": ("wbmm", 14, "compact"),
    "dw5": ("dw", 5, None), "dw13": ("dw", 13, None), "dw27": ("dw", 27, None),
}
ORT_OPS = ("wbmm7", "wbmm14", "dw5", "dw13", "dw27")
CLAIMS = [  # (key, faster, slower, threshold, statement)
    ("wbmm14_vs_dw5", "wbmm14", "dw5", 1.0, "WBMM-14 at least as fast as DW 5x5"),
    ("wbmm14_vs_wbmm7", "wbmm14", "wbmm7", 1.0, "WBMM throughput rises from window 7 to 14"),
    ("wbmm14_vs_dw27", "wbmm14", "dw27", 3.0, "WBMM-14 at least 3x faster than DW 27x27"),
]


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


def setup(shapes, threads_list, workdir: Path) -> dict:
    """Every case as a zero-argument callable, keyed (threads, shape, backend, op); the ONNX
    exports are checked against torch before anything is timed."""
    cases = {}
    for channels, side, batch in shapes:
        shape = (channels, side, batch)
        x = torch.randn(batch, channels, side, side)
        feed = {"x": x.numpy()}
        modules = {name: build(name, channels) for name in OPS}
        paths = {}
        for name in ORT_OPS:
            paths[name] = workdir / f"{name}-{channels}-{side}-{batch}.onnx"
            export_module(modules[name], x, paths[name])
        for threads in threads_list:
            for name, module in modules.items():
                cases[(threads, shape, "torch", name)] = lambda m=module, x=x: m(x)
            for name in ORT_OPS:
                session = make_session(paths[name], threads=threads)
                with torch.inference_mode():
                    ref = modules[name](x).numpy()
                err = float(np.abs(session.run(None, feed)[0] - ref).max())
                if err > 1e-3 * max(1.0, float(np.abs(ref).max())):
                    raise RuntimeError(f"ONNX Runtime disagrees with torch on {name}: {err}")
                cases[(threads, shape, "onnxruntime", name)] = (
                    lambda s=session, f=feed: s.run(None, f))
    return cases


def summarise(samples: dict) -> list[dict]:
    records: dict = {}
    for (threads, (channels, side, batch), backend, name), values in samples.items():
        rec = records.setdefault((threads, channels, side, batch, backend), {
            "threads": threads, "channels": channels, "side": side, "batch": batch,
            "backend": backend, "ops": {}})
        lat = median(values)
        rec["ops"][name] = {
            "latency_ms_per_round": [round(v * 1e3, 4) for v in values],
            "latency_ms": lat * 1e3,
            "images_per_s": batch / lat,
            "flops": op_flops(name, channels, side, batch),
            "gflop_per_s": op_flops(name, channels, side, batch) / lat / 1e9,
        }
    for rec in records.values():
        ops = rec["ops"]
        rec["throughput_ratios"] = {key: ops[slower]["latency_ms"] / ops[faster]["latency_ms"]
                                    for key, faster, slower, _, _ in CLAIMS}
        rec["throughput_ratios"]["wbmm7_vs_dw13"] = (ops["dw13"]["latency_ms"]
                                                     / ops["wbmm7"]["latency_ms"])
    return sorted(records.values(), key=lambda r: (-r["threads"], r["channels"], r["batch"],
                                                   r["backend"] != "torch"))


def verdicts(records: list[dict]) -> list[dict]:
    groups = sorted({(r["backend"], r["threads"]) for r in records},
                    key=lambda g: (g[0] != "torch", -g[1]))
    out = []
    for key, _, _, threshold, statement in CLAIMS:
        held = [r for r in records if r["throughput_ratios"][key] >= threshold]
        per_group = {}
        for backend, threads in groups:
            rows = [r for r in records if (r["backend"], r["threads"]) == (backend, threads)]
            ok = sum(r["throughput_ratios"][key] >= threshold for r in rows)
            per_group[f"{backend} {threads}t"] = f"{ok}/{len(rows)}"
        out.append({"claim": statement, "threshold": threshold,
                    "verdict": ("confirmed" if len(held) == len(records) else
                                "refuted" if not held else "mixed"),
                    "held_in": f"{len(held)}/{len(records)}", "held_per_backend": per_group,
                    "ratios": [round(r["throughput_ratios"][key], 3) for r in records]})
    return out


def tables(records: list[dict], claims: list[dict]) -> dict[str, str]:
    def shape(r):
        return f"C={r['channels']} {r['side']}x{r['side']} B={r['batch']}"

    lat = markdown_table(
        ["shape", "threads", "backend"] + [f"{n} (ms)" for n in OPS],
        [[shape(r), r["threads"], r["backend"]]
         + [f"{r['ops'][n]['latency_ms']:.3f}" if n in r["ops"] else "-" for n in OPS]
         for r in records])
    ratios = markdown_table(
        ["shape", "threads", "backend", "WBMM-14 vs DW5", "WBMM-14 vs WBMM-7", "WBMM-14 vs DW27",
         "WBMM-7 vs DW13"],
        [[shape(r), r["threads"], r["backend"]]
         + [f"{r['throughput_ratios'][k]:.2f}x" for k, *_ in CLAIMS]
         + [f"{r['throughput_ratios']['wbmm7_vs_dw13']:.2f}x"] for r in records])
    groups = list(claims[0]["held_per_backend"])
    verdict = markdown_table(
        ["claim", "verdict", "held in"] + groups,
        [[c["claim"], c["verdict"], c["held_in"]] + [c["held_per_backend"][g] for g in groups]
         for c in claims])
    return {"latency_ms": lat, "ratios": ratios, "verdicts": verdict}


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    cores = os.cpu_count() or 1
    parser.add_argument("--threads", type=int, nargs="+", default=[cores, 1] if cores > 1 else [1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.15, help="seconds per timing")
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two shapes, at most three rounds")
    args = parser.parse_args()
    if args.quick:
        args.rounds = min(args.rounds, 3)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cases = setup(shapes, args.threads, Path(tmp))
        samples, loads = run_rounds(cases, args.rounds, args.min_time, args.min_iters,
                                    before=lambda key: torch.set_num_threads(key[0]))
    records = summarise(samples)
    claims = verdicts(records)
    tabs = tables(records, claims)
    print("\nmedian latency per call (ms); WBMM in cached deploy form unless marked compact\n")
    print(tabs["latency_ms"])
    print("\nthroughput ratios (>1: the first is faster)\n")
    print(tabs["ratios"])
    print()
    print(tabs["verdicts"])
    write_result("wbmm", {
        "settings": {**vars(args), "shapes": shapes, "cpu_count": cores},
        "machine_load": {"loadavg_1min_at_round_start": loads, "loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "results": records, "claims": claims, "tables": tabs,
    })


if __name__ == "__main__":
    main()
