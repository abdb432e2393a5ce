"""WiFi-Mamba against the PETR-style baseline: forward latency against sequence length.

The selective scan is linear in the number of packets L; self-attention over packet tokens is
quadratic. Both CPU-sized models (eval mode, batch 1, torch eager, one thread by default) run at
L = 20 ... 2000 packets. Every case is set up first; each round times every case once, in an order
that rotates between rounds, so a burst of load from another process spoils one round of every
case rather than every round of one case. The table quotes the median over rounds of each round's
median latency; the scaling exponent is the slope of log latency on log L, fitted by least
squares over all lengths and over L >= 200 (where fixed per-call costs no longer dominate).

    python benchmarks/wifi_mamba.py [--rounds R] [--reps N] [--threads T] [--quick]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from common import markdown_table, median, write_result

from edgekit.registry import create_model

LENGTHS = [20, 50, 100, 200, 500, 1000, 2000]
QUICK_LENGTHS = [20, 100, 500, 2000]
MODELS = ["wifi-mamba", "wifi-petr"]


def exponent(lengths: list[int], ms: list[float], min_len: int = 0) -> float:
    pts = [(length, m) for length, m in zip(lengths, ms, strict=False) if length >= min_len]
    slope, _ = np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)
    return float(slope)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3, help="calls per case per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    started = time.perf_counter()
    torch.manual_seed(0)
    models = {n: create_model(n).eval() for n in MODELS}
    cases = [(n, length) for n in MODELS for length in lengths]
    inputs = {length: torch.randn(1, 2, 270, length) for length in lengths}
    times: dict[tuple[str, int], list[float]] = {c: [] for c in cases}
    loads = []
    with torch.inference_mode():
        for case in cases:  # warm-up
            models[case[0]](inputs[case[1]])
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            shift = r % len(cases)
            for name, length in cases[shift:] + cases[:shift]:
                calls = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    models[name](inputs[length])
                    calls.append(time.perf_counter() - t0)
                times[(name, length)].append(median(calls) * 1e3)
    ms = {c: median(v) for c, v in times.items()}
    rows = [[length] + [f"{ms[(n, length)]:.2f}" for n in MODELS]
            + [f"{ms[(MODELS[1], length)] / ms[(MODELS[0], length)]:.2f}"] for length in lengths]
    fits = {n: {"all": exponent(lengths, [ms[(n, length)] for length in lengths]),
                "L>=200": exponent(lengths, [ms[(n, length)] for length in lengths], 200)}
            for n in MODELS}
    params = {n: sum(p.numel() for p in m.parameters()) for n, m in models.items()}
    table = markdown_table(["packets L"] + [f"{n} ms" for n in MODELS] + ["petr / mamba"], rows)
    fit_table = markdown_table(["model", "params", "exponent (all L)", "exponent (L >= 200)"],
                               [[n, f"{params[n]:,}", f"{fits[n]['all']:.2f}",
                                 f"{fits[n]['L>=200']:.2f}"]
                                for n in MODELS])
    print(table)
    print()
    print(fit_table)
    write_result("wifi_mamba", {
        "settings": {**vars(args), "lengths": lengths, "batch": 1, "backend": "torch eager",
                     "cpu_count": os.cpu_count()},
        "machine_load": {"loadavg_1min_at_round_start": loads, "loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "latency_ms": {n: {str(length): ms[(n, length)] for length in lengths} for n in MODELS},
        "exponents": fits, "params": params, "tables": {"latency": table, "fits": fit_table},
    })


if __name__ == "__main__":
    main()
