"""WBMM (windows 7 and 14) against depthwise convolution (5x5, 13x13, 27x27), torch and ONNX
Runtime.

Forward throughput of one operator at stage-like shapes, in deploy form (WBMM: fused table and
bias, no BatchNorm; depthwise conv: conv with bias). Every case (shape x thread count x backend x
operator) is set up first; then each round times every case once, in an order that rotates
between rounds, so a burst of load from another process on a shared machine spoils one round of
every case instead of every round of one case. Tables quote the median over rounds of each
round's median per-call latency. Each thread count is its own column of cases: all cores (how
the CPU is meant to be used) and one thread (immune to a second process stalling an OpenMP
barrier). The paper's claims (arXiv 2607.02097) checked here:

  1. WBMM with 14x14 windows is at least as fast as a 5x5 depthwise convolution;
  2. WBMM's throughput rises from window 7 to window 14;
  3. WBMM-14 is at least 3x faster than the 27x27 depthwise conv matching its in-window field.

    python benchmarks/wbmm.py [--rounds R] [--min-time S] [--threads N [N ...]] [--quick]

``--part backbone`` times whole backbones instead: WBMM-P against its 13x13 depthwise twin at
224 px (benchmarks/wbmm_backbone.py).

On a GPU (``--device cuda``, what benchmarks/device_check.py runs): torch (cuBLAS / cuDNN) in
fp32 and bf16 (``--dtypes``), at ``--batches 1 64``, plus the fused Triton kernel of the compact
form (``wbmm7-triton``, ``wbmm14-triton``: edgekit.kernels.wbmm_triton, checked against torch
before timing), with NVML energy per call; no ONNX Runtime rows (the GPU machine's is a CPU
build).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import wbmm_backbone
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
from edgekit.kernels.wbmm import WBMM
from edgekit.kernels.wbmm import flops as wbmm_flops

SHAPES = [(128, 56, 1), (128, 56, 8), (256, 28, 1), (256, 28, 8)]  # (channels, H = W, batch)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
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


TRITON_OPS = {"wbmm7-triton": 7, "wbmm14-triton": 14}  # the compact form, gather fused (GPU)


class TritonWBMM(nn.Module):
    """A compact-form WBMM run by the fused Triton kernel."""

    def __init__(self, compact: WBMM) -> None:
        super().__init__()
        self.compact = compact

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from edgekit.kernels.wbmm_triton import wbmm_compact_triton

        c = self.compact
        return wbmm_compact_triton(x, c.table, c.window, c.bias, c.index)


def build(name: str, channels: int) -> nn.Module:
    if name in TRITON_OPS:
        return TritonWBMM(build(f"wbmm{TRITON_OPS[name]}-compact", channels))
    kind, size, form = OPS[name]
    torch.manual_seed(0)
    if kind == "dw":
        return nn.Conv2d(channels, channels, size, padding=size // 2, groups=channels).eval()
    return WBMM(channels, size).eval().to_deploy(form)


def op_flops(name: str, channels: int, side: int, batch: int) -> int:
    if name in TRITON_OPS:
        return wbmm_flops(batch, channels, side, side, TRITON_OPS[name])
    kind, size, _ = OPS[name]
    if kind == "dw":
        return 2 * batch * channels * side * side * size * size
    return wbmm_flops(batch, channels, side, side, size)


def triton_unavailable() -> str | None:
    """Why the fused kernel cannot run here, or None."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed"
    return None


def gpu_cases(shapes, dtypes, use_triton: bool) -> dict:
    """GPU cases keyed (threads, shape, backend, op), backend "torch fp32" / "torch bf16"; each
    Triton op is checked against the torch compact form first."""
    cases = {}
    for channels, side, batch in shapes:
        shape = (channels, side, batch)
        names = list(OPS) + (list(TRITON_OPS) if use_triton else [])
        for label in dtypes:
            dtype = DTYPES[label]
            x = torch.randn(batch, channels, side, side, device="cuda", dtype=dtype)
            modules = {n: build(n, channels).to("cuda", dtype) for n in names}
            with torch.inference_mode():
                for name in TRITON_OPS if use_triton else ():
                    ref = modules[f"{name.split('-')[0]}-compact"](x).float()
                    err = float((modules[name](x).float() - ref).abs().max())
                    tol = (1e-3 if label == "fp32" else 5e-2) * max(1.0, float(ref.abs().max()))
                    if err > tol:
                        raise RuntimeError(f"Triton {name} disagrees with torch ({label}, C="
                                           f"{channels} {side}x{side} B={batch}): {err}")
            for name, module in modules.items():
                cases[(1, shape, f"torch {label}", name)] = synchronised(
                    lambda m=module, x=x: m(x), "cuda")
    return cases


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
                                    for key, faster, slower, _, _ in claims_for(ops)}
        rec["throughput_ratios"]["wbmm7_vs_dw13"] = (ops["dw13"]["latency_ms"]
                                                     / ops["wbmm7"]["latency_ms"])
    return sorted(records.values(), key=lambda r: (-r["threads"], r["channels"], r["batch"],
                                                   r["backend"] != "torch"))


def claims_for(ops) -> list[tuple]:
    """The paper's claims, and each again with the fused Triton kernel where it ran."""
    triton = [(f"{key}_triton", f"{faster}-triton", slower, threshold, f"{statement} (Triton)")
              for key, faster, slower, threshold, statement in CLAIMS
              if f"{faster}-triton" in ops and (slower in ops or f"{slower}-triton" in ops)]
    return CLAIMS + [(k, f, s if s in ops else f"{s}-triton", t, st)
                     for k, f, s, t, st in triton]


def verdicts(records: list[dict]) -> list[dict]:
    groups = sorted({(r["backend"], r["threads"]) for r in records},
                    key=lambda g: (g[0] != "torch", -g[1]))
    out = []
    every = {c[0]: c for r in records for c in claims_for(r["ops"])}
    for key, _, _, threshold, statement in every.values():
        measured = [r for r in records if key in r["throughput_ratios"]]
        held = [r for r in measured if r["throughput_ratios"][key] >= threshold]
        per_group = {}
        for backend, threads in groups:
            rows = [r for r in measured if (r["backend"], r["threads"]) == (backend, threads)]
            ok = sum(r["throughput_ratios"][key] >= threshold for r in rows)
            per_group[f"{backend} {threads}t"] = f"{ok}/{len(rows)}"
        out.append({"claim": statement, "threshold": threshold,
                    "verdict": ("confirmed" if len(held) == len(measured) else
                                "refuted" if not held else "mixed"),
                    "held_in": f"{len(held)}/{len(measured)}", "held_per_backend": per_group,
                    "ratios": [round(r["throughput_ratios"][key], 3) for r in measured]})
    return out


def roofline(records: list[dict], peak_flops: dict[str, float],
             bandwidth_bytes_s: float) -> list[dict]:
    """Each GPU op's least time under the roofline, max(FLOPs / peak, bytes / bandwidth), with
    the input read and the output written once (the weights are small and stay in cache), and
    the share of that least time the op reached (``op["roofline"]``); then, per record, whether
    WBMM-14 can be as fast as DW 5x5 at all on this device: a compute-bound WBMM-14 against a
    memory-bound DW5 cannot, whatever its kernel (the verdict the Triton kernel is judged by)."""
    out = []
    for r in records:
        label = r["backend"].split()[-1]  # "torch bf16" -> "bf16"
        peak = peak_flops.get(label)
        if peak is None:
            continue
        moved = 2 * r["batch"] * r["channels"] * r["side"] ** 2 * DTYPES[label].itemsize
        for op in r["ops"].values():
            least_s = max(op["flops"] / peak, moved / bandwidth_bytes_s)
            op["roofline"] = {"flop_per_byte": op["flops"] / moved,
                              "bound": ("compute" if op["flops"] / peak > moved / bandwidth_bytes_s
                                        else "memory"),
                              "least_ms": least_s * 1e3,
                              "share_of_roof": least_s * 1e3 / op["latency_ms"]}
        wbmm, dw5 = r["ops"].get("wbmm14"), r["ops"].get("dw5")
        if wbmm is None or dw5 is None:
            continue
        ratio = wbmm["roofline"]["least_ms"] / dw5["roofline"]["least_ms"]
        reached = ", ".join(f"{n} {r['ops'][n]['roofline']['share_of_roof'] * 100:.0f} %"
                            for n in ("wbmm14", "wbmm14-triton", "dw5") if n in r["ops"])
        out.append({"claim": f"roofline: WBMM-14 can be as fast as DW 5x5 ({label}, "
                             f"C={r['channels']} {r['side']}x{r['side']} B={r['batch']})",
                    "value": f"least time {ratio:.2f}x DW5's (WBMM-14 "
                             f"{wbmm['roofline']['bound']}-bound at "
                             f"{wbmm['roofline']['flop_per_byte']:.0f} FLOP/B, DW5 "
                             f"{dw5['roofline']['bound']}-bound); share of roof: {reached}",
                    "met": ratio <= 1.0, "least_time_ratio": ratio})
    return out


def tables(records: list[dict], claims: list[dict]) -> dict[str, str]:
    def shape(r):
        return f"C={r['channels']} {r['side']}x{r['side']} B={r['batch']}"

    names = list(OPS) + [n for n in TRITON_OPS if any(n in r["ops"] for r in records)]
    lat = markdown_table(
        ["shape", "threads", "backend"] + [f"{n} (ms)" for n in names],
        [[shape(r), r["threads"], r["backend"]]
         + [f"{r['ops'][n]['latency_ms']:.3f}" if n in r["ops"] else "-" for n in names]
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
    parser.add_argument("--part", choices=("ops", "backbone"), default="ops",
                        help="ops: single operators at stage shapes; backbone: WBMM-P and its "
                             "depthwise twin at 224 px (CPU)")
    parser.add_argument("--threads", type=int, nargs="+",
                        help="default: all cores and 1 (ops), 1 and 2 (backbone)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float,
                        help="seconds per timing (default: 0.15 ops, 0.5 backbone)")
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two shapes, at most three rounds")
    add_device_argument(parser)
    parser.add_argument("--shapes", nargs="+", metavar="CxS",
                        help="channels x side, e.g. 128x56 256x28 (default: the paper's stages)")
    parser.add_argument("--batches", type=int, nargs="+", help="default: 1 8")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["fp32"],
                        help="--device cuda only")
    args = parser.parse_args()
    if args.part == "backbone":
        if args.device != "cpu":
            parser.error("--part backbone runs on the CPU only")
        wbmm_backbone.run(args.rounds, args.min_time or wbmm_backbone.DEFAULT_MIN_TIME,
                          args.min_iters, args.threads or wbmm_backbone.DEFAULT_THREADS)
        return
    args.threads = args.threads or ([cores, 1] if cores > 1 else [1])
    args.min_time = args.min_time or 0.15
    if args.quick:
        args.rounds = min(args.rounds, 3)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.shapes or args.batches:
        pairs = ([tuple(int(v) for v in t.split("x")) for t in args.shapes] if args.shapes
                 else sorted({(c, side) for c, side, _ in shapes}))
        shapes = [(c, side, b) for c, side in pairs for b in (args.batches or [1, 8])]
    if args.device == "cpu" and args.dtypes != ["fp32"]:
        parser.error("--dtypes other than fp32 need --device cuda")
    started = time.perf_counter()
    energy: dict | None = None
    triton_note = None
    if args.device == "cuda":
        args.threads = [1]  # the GPU's work; one host thread launches it
        triton_note = triton_unavailable()
        cases = gpu_cases(shapes, args.dtypes, use_triton=triton_note is None)
        energy = {}
        samples, loads = run_rounds(cases, args.rounds, args.min_time, args.min_iters,
                                    energy=energy)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            cases = setup(shapes, args.threads, Path(tmp))
            samples, loads = run_rounds(cases, args.rounds, args.min_time, args.min_iters,
                                        before=lambda key: torch.set_num_threads(key[0]))
    records = summarise(samples)
    for key, value in (energy or {}).items():
        threads, (channels, side, batch), backend, name = key
        rec = next(r for r in records if (r["threads"], r["channels"], r["side"], r["batch"],
                                          r["backend"]) == (threads, channels, side, batch,
                                                            backend))
        rec["ops"][name]["energy_j_per_call"] = median(value["j_per_call"])
        rec["ops"][name]["energy_source"] = value["source"]
    claims = verdicts(records)
    roof = gpu_roofline(records) if args.device == "cuda" else []
    tabs = tables(records, claims)
    print("\nmedian latency per call (ms); WBMM in cached deploy form unless marked compact\n")
    print(tabs["latency_ms"])
    print("\nthroughput ratios (>1: the first is faster)\n")
    print(tabs["ratios"])
    print()
    print(tabs["verdicts"])
    if triton_note:
        print(f"\nTriton kernel skipped: {triton_note}")
    if roof:
        print(markdown_table(["roofline", "value"], [[v["claim"], v["value"]] for v in roof]))
    write_result("wbmm" if args.device == "cpu" else f"wbmm_{args.device}", {
        "settings": {**vars(args), "shapes": shapes, "cpu_count": cores},
        "device": _device_name(args.device), "triton_skipped": triton_note,
        "energy": energy_rows(energy) if energy else None,
        "machine_load": {"loadavg_1min_at_round_start": loads, "loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "results": records, "claims": claims, "roofline": roof, "tables": tabs,
    })


def gpu_roofline(records: list[dict]) -> list[dict]:
    """``roofline`` with the detected device profile's peaks and bandwidth (none: no verdict)."""
    from edgekit.profiles import detect_profile

    found = detect_profile()
    if not found.memory_bandwidth_bytes_s:
        print(f"no roofline: the profile {found.name} gives no memory bandwidth")
        return []
    return roofline(records, found.peak_flops, found.memory_bandwidth_bytes_s)


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(0) if device == "cuda" else "cpu"


if __name__ == "__main__":
    main()
