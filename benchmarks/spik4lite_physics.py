"""Where ONNX Runtime's time goes in a Spik4lite-pruned net, at digits size and at the paper's
CIFAR size (``benchmarks/spik4lite.py --part physics``).

Issue 18's latency target (ORT at keep 0.5 at least 1.6x faster than the dense net) assumes the
arithmetic dominates. A T = 4 net unrolled into an ONNX graph has hundreds of small nodes (the
LIF charge/fire/reset ops of every step, reshapes, BatchNorms), each with a fixed cost that does
not shrink with the channel count. This part shows which regime each size is in:

- nets: the registry's digits SpikingResformer-SSA and Spikingformer, and the paper's
  Spikingformer-4-384 for CIFAR-10 (9.31M parameters), each dense and pruned to keep 0.5 by
  forced removal without training (gated, every channel ranked by its gate, the least kept
  removed until the budget; random weights: the latency of a dense graph does not depend on them);
- latency: batch 1, one thread, interleaved rounds (median of per-round medians, min-max);
- per operator type, from ONNX Runtime's own profiler (``SessionOptions.enable_profiling``,
  every node's kernel time, the warm-up run left out, each node's median over the runs so a
  preempted run does not count): nodes, microseconds per run, share; the
  "compute" share is the time in Conv / MatMul / Gemm, the ops whose cost scales with the
  channels removed; the rest is per-node cost that removal does not touch.
"""
from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from common import export_as_edgekit, median, run_rounds

from edgekit.backends import make_session
from edgekit.flops import model_cost
from edgekit.methods.spik4lite import build_cifar_model, prune, unwrap, wrap
from edgekit.registry import create_model

COMPUTE_OPS = ("Conv", "MatMul", "Gemm", "FusedConv", "FusedMatMul", "FusedGemm")
PROFILE_RUNS = 30


def nets() -> dict[str, Any]:
    """Builders of the dense nets, by label."""
    return {"digits spikingresformer": lambda: create_model("spikingresformer"),
            "digits spikingformer": lambda: create_model("spikingformer"),
            "cifar spikingformer-4-384": build_cifar_model}


def forced(model: torch.nn.Module, keep: float, steps: int = 6) -> torch.nn.Module:
    """``model`` pruned to ``keep`` of its prunable channels without training, in as many
    removal steps as the per-step caps need (as the trainer's cycles do; at most ``steps``)."""
    x = torch.rand((4, *model.input_shape), generator=torch.Generator().manual_seed(0))
    wrap(model, x)
    width = current = None
    for _ in range(steps):
        goal = keep if width is None else min(1.0, keep * width / current)
        report = prune(model, x, target_keep=goal)
        width = width or report.channels_before
        if report.channels_after == current or report.channels_after <= keep * width + 1:
            break
        current = report.channels_after
    unwrap(model)
    return model.eval()


def op_profile(path: Path, feed: dict[str, Any], runs: int = PROFILE_RUNS) -> dict[str, Any]:
    """Kernel time per operator type per run, from ONNX Runtime's profiler (one thread)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ort-profile-") as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(str(path), sess_options=opts,
                                       providers=["CPUExecutionProvider"])
        for _ in range(runs + 1):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    model_runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    start = model_runs[1]["ts"]  # the first run is a warm-up
    durations: dict[str, list[float]] = defaultdict(list)
    nodes: dict[str, str] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < start:
            continue
        nodes[e["name"]] = e["args"]["op_name"]
        durations[e["name"]].append(e["dur"])
    by_op: dict[str, dict[str, float]] = defaultdict(lambda: {"nodes": 0, "us": 0.0})
    for name, op in nodes.items():  # a node's median over the runs: a preempted run is ignored
        by_op[op]["nodes"] += 1
        by_op[op]["us"] += median(durations[name])
    kernel_us = sum(v["us"] for v in by_op.values())
    compute_us = sum(v["us"] for op, v in by_op.items() if op in COMPUTE_OPS)
    run_us = median([e["dur"] for e in model_runs[1:]])
    return {"nodes": len(nodes), "run_us": run_us, "kernel_us": kernel_us,
            "compute_us": compute_us, "compute_share": compute_us / kernel_us,
            "by_op": dict(sorted(by_op.items(), key=lambda kv: -kv[1]["us"]))}


def measure(rounds: int, min_time: float, keeps: tuple[float, ...] = (1.0, 0.5),
            only: list[str] | None = None) -> dict[str, Any]:
    """Every net at every keep: parameters, FLOPs, ORT latency and its profile per op type."""
    torch.set_num_threads(1)
    workdir = Path(tempfile.mkdtemp(prefix="spik4lite-physics-"))
    rows: dict[tuple[str, float], dict[str, Any]] = {}
    cases = {}
    for label, build in nets().items():
        if only and label not in only:
            continue
        for keep in keeps:
            torch.manual_seed(0)
            model = build().eval()
            if keep < 1.0:
                model = forced(model, keep)
            x1 = torch.rand((1, *model.input_shape), generator=torch.Generator().manual_seed(1))
            cost = model_cost(model, (x1,))
            path = workdir / f"{label.replace(' ', '_')}-{keep}.onnx"
            export_as_edgekit(model, x1, path)
            session = make_session(path, threads=1)
            feed = {session.get_inputs()[0].name: x1.numpy()}
            rows[(label, keep)] = {"net": label, "keep": keep, "params": cost.params,
                                   "flops": cost.flops, "profile": op_profile(path, feed)}
            cases[(label, keep)] = lambda s=session, f=feed: s.run(None, f)
            p = rows[(label, keep)]["profile"]
            print(f"{label} keep {keep}: {cost.params / 1e6:.3f}M params, {cost.flops / 1e6:.1f}M "
                  f"FLOPs, {p['nodes']} nodes, compute share {p['compute_share']:.0%}", flush=True)
    samples, loads = run_rounds(cases, rounds, min_time, 5, slow_s=2.0)
    for key, row in rows.items():
        s = samples[key]
        row["onnxruntime_ms"] = median(s) * 1e3
        row["onnxruntime_spread_ms"] = [min(s) * 1e3, max(s) * 1e3]
    speedups = {}
    for label in dict.fromkeys(k[0] for k in rows):
        dense, half = rows[(label, 1.0)], rows[(label, keeps[-1])]
        speedups[label] = {"keep": keeps[-1],
                           "ort_speedup": dense["onnxruntime_ms"] / half["onnxruntime_ms"],
                           "flops_ratio": dense["flops"] / half["flops"],
                           "compute_share_dense": dense["profile"]["compute_share"]}
    return {"rows": list(rows.values()), "speedups": speedups, "load_average_1min": loads}


def table_rows(result: dict[str, Any]) -> list[list[Any]]:
    """Markdown rows: net, keep, params, FLOPs, nodes, mean kernel time per node (profiled),
    ORT ms, compute share, top three ops."""
    out = []
    for r in result["rows"]:
        p = r["profile"]
        top = ", ".join(f"{op} {v['us'] / p['kernel_us']:.0%} ({v['nodes']})"
                        for op, v in list(p["by_op"].items())[:3])
        out.append([r["net"], r["keep"], f"{r['params'] / 1e6:.3f}M", f"{r['flops'] / 1e6:.1f}M",
                    p["nodes"], f"{p['kernel_us'] / p['nodes']:.2f}",
                    f"{r['onnxruntime_ms']:.2f} ({r['onnxruntime_spread_ms'][0]:.2f}-"
                    f"{r['onnxruntime_spread_ms'][1]:.2f})", f"{p['compute_share']:.0%}", top])
    return out


HEADER = ["net", "keep", "params", "FLOPs", "ORT nodes", "µs per node", "ORT ms",
          "Conv/MatMul/Gemm share", "top ops by kernel time (nodes)"]

