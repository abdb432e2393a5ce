"""Spiking attention blocks (reference O(N^2 D), SSA, USSA) from N = 64 to 4096 tokens, torch and
ONNX Runtime: latency, FLOPs, SOPs, inter-core communication and the scaling exponent in N.

One block at D = 256 channels, T = 4 steps, batch 1, on an N = side x side token grid, fed the
same real-valued residual stream (standard normal). Every block's BatchNorm statistics are first
calibrated on that input, so its neurons fire at realistic rates (an untrained block with
initial statistics never reaches threshold). Alternatives run interleaved (a round times every
case once, in an order that rotates between rounds); tables quote the median over rounds of each
round's median latency. A case whose single call takes over a second runs once per round.

Besides the whole block, the token-mixing core alone (``block.mix``: what the reference's N x N
matmuls and SSA's Hadamard product replace; the W1/W2 convolutions and the projection are
shared by all three) is timed on torch.

Targets (issue 4): SSA at least 10x faster than the reference at N = 1024, and a fitted scaling
exponent (least squares of log latency on log N) of 1.2 or less.

    python benchmarks/spiking_attention.py [--rounds R] [--threads N] [--sizes 64 256 ...] [--quick]
"""
from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import (
    add_device_argument,
    energy_rows,
    export_module,
    markdown_table,
    median,
    run_rounds,
    synchronised,
    write_result,
)
from torch import nn

from edgekit.backends import make_session
from edgekit.methods.ssa.attention import ATTENTION_KINDS, communication_values, make_attention
from edgekit.spiking.layers import calibrate_batchnorm, functional

D, T, BATCH = 256, 4, 1
SIZES = (64, 256, 1024, 4096)
TARGET_N, TARGET_SPEEDUP, TARGET_EXPONENT = 1024, 10.0, 1.2


class Stateless(nn.Module):
    """A block that starts from rest at every call, as inside a net (whose forward resets)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        functional.reset_net(self.block)
        return self.block(x)


def build(kind: str, x: torch.Tensor) -> Stateless:
    torch.manual_seed(0)
    module = Stateless(make_attention(kind, D, heads=1)).to(x.device)
    return calibrate_batchnorm(module, [x])


def flops(module: nn.Module, x: torch.Tensor) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(x)
    return int(counter.get_total_flops())


def sops(module: nn.Module, x: torch.Tensor) -> int:
    from spikingjelly.activation_based.op_counter import DispatchCounterMode, SynOpCounter

    counter = SynOpCounter(extra_ignore_modules=[nn.modules.batchnorm._BatchNorm])
    with DispatchCounterMode([counter]), torch.no_grad():
        module(x)
    return int(counter.get_total())


def setup(sizes, threads: int, workdir: Path, ort: bool, device: str = "cpu",
          reference_up_to: int | None = None) -> tuple[dict, dict]:
    """Cases (zero-argument callables keyed (N, backend, kind)) and per-(N, kind) counts; the
    reference only up to ``reference_up_to`` tokens (its N x N maps outgrow any memory)."""
    cases, counts = {}, {}
    for n in sizes:
        side = math.isqrt(n)
        x = torch.randn(T, BATCH, D, side, side, generator=torch.Generator().manual_seed(n))
        x = x.to(device)  # built, calibrated, counted and timed where it runs
        for kind in _kinds(n, reference_up_to):
            module = build(kind, x)
            block = module.block
            with torch.no_grad():
                functional.reset_net(block)
                parts = block.branches(block.act_in(x))
                y = module(x)
            counts[(n, kind)] = {"flops": flops(module, x), "sops": sops(module, x),
                                 "values_moved": communication_values(kind, T, n, D),
                                 "mix_flops": flops(_Mix(block, parts), x)}
            cases[(n, "torch", kind)] = synchronised(lambda m=module, x=x: m(x), device)
            cases[(n, "torch-mix", kind)] = synchronised(
                lambda b=block, p=parts: (functional.reset_net(b), b.mix(*p)), device)
            if ort:
                path = workdir / f"{kind}-{n}.onnx"
                export_module(module, x, path)
                session = make_session(path, threads=threads)
                feed = {"x": x.numpy()}
                err = float(np.abs(session.run(None, feed)[0] - y.numpy()).max())
                if err > 1e-3 * max(1.0, float(y.abs().max())):
                    raise RuntimeError(f"ONNX Runtime disagrees with torch on {kind} N={n}: {err}")
                cases[(n, "onnxruntime", kind)] = lambda s=session, f=feed: s.run(None, f)
            print(f"set up {kind} N={n}", flush=True)
    return cases, counts


class _Mix(nn.Module):
    def __init__(self, block: nn.Module, parts: tuple) -> None:
        super().__init__()
        self.block, self.parts = block, parts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        functional.reset_net(self.block)
        return self.block.mix(*self.parts)


def _kinds(n: int, reference_up_to: int | None) -> tuple[str, ...]:
    return tuple(k for k in ATTENTION_KINDS
                 if k != "reference" or reference_up_to is None or n <= reference_up_to)


def exponent(ns: list[int], latencies: list[float]) -> float:
    """Least-squares slope of log latency on log N."""
    slope, _ = np.polyfit(np.log(ns), np.log(latencies), 1)
    return float(slope)


def summarise(samples: dict, counts: dict, sizes) -> tuple[list[dict], dict, list[dict]]:
    backends = sorted({b for _, b, _ in samples}, key=["torch", "onnxruntime", "torch-mix"].index)
    rows = []
    for n in sizes:
        for kind in (k for k in ATTENTION_KINDS if (n, k) in counts):
            row = {"N": n, "kind": kind, **counts[(n, kind)]}
            for backend in backends:
                values = samples[(n, backend, kind)]
                row[f"{backend}_ms"] = median(values) * 1e3
                row[f"{backend}_ms_per_round"] = [round(v * 1e3, 3) for v in values]
            rows.append(row)
    fits = {}
    for backend in backends:
        for kind in ATTENTION_KINDS:
            ns = [n for n in sizes if (n, kind) in counts]
            lat = [_row(rows, n, kind)[f"{backend}_ms"] for n in ns]
            fits[f"{backend}/{kind}"] = {
                "sizes": ns,
                "exponent_all": exponent(ns, lat),
                "exponent_n_ge_256": exponent([n for n in ns if n >= 256],
                                              [v for n, v in zip(ns, lat, strict=True)
                                               if n >= 256])
                if sum(n >= 256 for n in ns) >= 2 else None}
    verdicts = []
    for backend in backends:
        if backend == "torch-mix":
            continue
        if (TARGET_N, "reference") in counts:
            ref = next(r for r in rows if r["N"] == TARGET_N and r["kind"] == "reference")
            ssa = next(r for r in rows if r["N"] == TARGET_N and r["kind"] == "ssa")
            speedup = ref[f"{backend}_ms"] / ssa[f"{backend}_ms"]
            verdicts.append({"target": f"SSA >= {TARGET_SPEEDUP:g}x faster than the reference "
                                       f"at N={TARGET_N} ({backend})", "value": round(speedup, 2),
                             "met": speedup >= TARGET_SPEEDUP})
        slope = fits[f"{backend}/ssa"]["exponent_all"]
        verdicts.append({"target": f"SSA scaling exponent <= {TARGET_EXPONENT} ({backend})",
                         "value": round(slope, 3), "met": slope <= TARGET_EXPONENT})
    return rows, fits, verdicts


def tables(rows: list[dict], fits: dict, verdicts: list[dict], backends: list[str]) -> dict:
    lat = markdown_table(
        ["N", "block", "GFLOPs", "MSOPs", "values moved"] + [f"{b} ms" for b in backends],
        [[r["N"], r["kind"], f"{r['flops'] / 1e9:.3f}", f"{r['sops'] / 1e6:.2f}",
          f"{r['values_moved']:,}"] + [f"{r[f'{b}_ms']:.2f}" for b in backends] for r in rows])
    sizes = sorted({r["N"] for r in rows if r["kind"] == "reference"})
    speed = markdown_table(
        ["N"] + [f"ref / SSA ({b})" for b in backends] + [f"ref / USSA ({b})" for b in backends],
        [[n] + [f"{_row(rows, n, 'reference')[f'{b}_ms'] / _row(rows, n, 'ssa')[f'{b}_ms']:.2f}x"
                for b in backends]
         + [f"{_row(rows, n, 'reference')[f'{b}_ms'] / _row(rows, n, 'ussa')[f'{b}_ms']:.2f}x"
            for b in backends] for n in sizes])
    exp = markdown_table(
        ["backend", "block", "N", "exponent (all N)", "exponent (N >= 256)"],
        [[k.split("/")[0], k.split("/")[1], f"{v['sizes'][0]}-{v['sizes'][-1]}",
          f"{v['exponent_all']:.3f}",
          "-" if v["exponent_n_ge_256"] is None else f"{v['exponent_n_ge_256']:.3f}"]
         for k, v in fits.items()])
    verdict = markdown_table(["target", "measured", "met"],
                             [[v["target"], v["value"], "yes" if v["met"] else "no"]
                              for v in verdicts])
    return {"latency": lat, "speedups": speed, "exponents": exp, "verdicts": verdict}


def _row(rows: list[dict], n: int, kind: str) -> dict:
    return next(r for r in rows if r["N"] == n and r["kind"] == kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads for torch and ONNX Runtime (default 1: a shared "
                             "machine's second process cannot stall an OpenMP barrier)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds per timing")
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--no-ort", action="store_true", help="torch only")
    parser.add_argument("--reference-up-to", type=int, metavar="N",
                        help="time the O(N^2) reference only up to N tokens (default: all N; "
                             "at N = 65536 its N x N maps take 17 GB per time step)")
    parser.add_argument("--quick", action="store_true", help="N = 64, 256, 1024; two rounds")
    add_device_argument(parser)
    args = parser.parse_args()
    if args.device == "cuda":
        args.no_ort = True  # the GPU machine's ONNX Runtime is a CPU build
    if args.quick:
        args.sizes, args.rounds = [64, 256, 1024], min(args.rounds, 2)
    for n in args.sizes:
        if math.isqrt(n) ** 2 != n:
            parser.error(f"N={n} is not a square (tokens form a side x side grid)")
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cases, counts = setup(args.sizes, args.threads, Path(tmp), not args.no_ort,
                              args.device, args.reference_up_to)
        energy = {} if args.device == "cuda" else None
        samples, loads = run_rounds(cases, args.rounds, args.min_time, args.min_iters,
                                    slow_s=1.0, energy=energy)
    rows, fits, verdicts = summarise(samples, counts, args.sizes)
    backends = [b for b in ("torch", "onnxruntime", "torch-mix") if f"{b}_ms" in rows[0]]
    tabs = tables(rows, fits, verdicts, backends)
    print(f"\nD={D}, T={T}, batch {BATCH}, {args.threads} thread(s); median latency per call; "
          "torch-mix: the token-mixing core alone\n")
    print(tabs["latency"])
    print("\nspeedups over the reference (>1: faster than the reference)\n")
    print(tabs["speedups"])
    print("\nfitted scaling exponent of latency in N\n")
    print(tabs["exponents"])
    print()
    print(tabs["verdicts"])
    write_result("spiking_attention" if args.device == "cpu"
                 else f"spiking_attention_{args.device}", {
        "settings": {**vars(args), "D": D, "T": T, "batch": BATCH, "heads": 1,
                     "cpu_count": os.cpu_count()},
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "energy": energy_rows(energy) if energy else None,
        "machine_load": {"loadavg_1min_at_round_start": loads, "loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "results": rows, "exponents": fits, "verdicts": verdicts, "tables": tabs,
    })


if __name__ == "__main__":
    main()
