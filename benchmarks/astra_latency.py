"""ASTRA runtime latency: every mode at 10 Mbps, 100 Mbps and 1 Gbps against one device.

ViT-S (D=384, depth 12, 6 heads, G=32 and K=1024 VQ codebooks), untrained weights, 1024 patch
tokens (512x512 images), batch 1. The single device is one process with one torch thread; every
multi-rank mode runs on 2 local processes with one thread each over gloo, with each rank's link
emulated (``edgekit.methods.astra.runtime.link``). Latency is the slowest rank's wall time per
forward; each case is timed up to --reps times and stops after --budget-s (at least one rep), so
the cases whose latency is mostly emulated wire time get one or two reps. The analytic model is
calibrated on the single-device run, checked against every case and projected to 4 and 8 devices.

    python benchmarks/astra_latency.py [--reps 3] [--budget-s 12] [--tokens 1024]
"""
from __future__ import annotations

import argparse

from common import markdown_table, write_result

from edgekit.methods.astra.runtime.bench import run_bench


def tables(body: dict) -> str:
    bandwidths = body["settings"]["bandwidths"]
    single = body["measured"]["single"]["unshaped"]["latency_s"]
    rows = []
    for name, cases in body["measured"].items():
        first = next(iter(cases.values()))
        cells = []
        for b in bandwidths:
            case = cases.get(b, first)  # the single device has one unshaped case
            cells.append(f"{case['latency_s']:.3f} ({single / case['latency_s']:.2f}x, "
                         f"{case['reps']})")
        rows.append([name, f"{first['bytes_per_token_per_block']:.1f}", *cells])
    measured = markdown_table(["mode", "bytes/token/block", *(f"{b}: s (speed-up, reps)"
                                                               for b in bandwidths)], rows)
    check = markdown_table(
        ["mode", "link", "predicted (s)", "measured (s)", "error"],
        [[r["mode"], r["bandwidth"], f"{r['predicted_s']:.3f}", f"{r['measured_s']:.3f}",
          f"{r['error']:+.0%}"] for r in body["model_check"]])
    projection = markdown_table(
        ["mode", "link", "N=2 (s)", "N=4 (s)", "N=8 (s)"],
        [[r["mode"], r["bandwidth"], *(f"{r[f'n{n}_s']:.3f}" for n in (2, 4, 8))]
         for r in body["projection"]])
    return f"{measured}\n\n{check}\n\n{projection}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit-s")
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=12.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    body = run_bench(model=args.model, tokens=args.tokens, reps=args.reps,
                     budget_s=args.budget_s, threads=args.threads,
                     echo=lambda line: print(line, flush=True))
    write_result("astra_latency", body)
    print(tables(body))
    for name, t in body["targets"].items():
        print(f"{name} at 10Mbps: {t['vs_single']:.2f}x vs single (target 1.5x: "
              f"{'met' if t['vs_single_met'] else 'missed'}), {t['vs_sp']:.2f}x vs sp "
              f"(target 5x: {'met' if t['vs_sp_met'] else 'missed'})")
    print(f"load average before {body['load_average']['before']}, "
          f"after {body['load_average']['after']}")


if __name__ == "__main__":
    main()
