"""WBMM-P against its depthwise twin as whole backbones at 224 px, batch 1, in torch eager and
ONNX Runtime (the ``--part backbone`` of benchmarks/wbmm.py).

The twin (``edgekit.methods.wbmm.model.paper_dw_config``) is WBMM-P with every WBMM mixer
replaced by a 13x13 depthwise convolution, the same in-window receptive field as a window of 7;
stem, widths, depths, the 3x3 blocks and the head are the same. Both run in their deploy form
(``reparameterize("cached")``: BatchNorms folded, WBMM with its dense window matrices, which is
what the registry deploys), random weights. Each is exported the way ``edgekit export`` does
(``common.export_as_edgekit``) and checked against torch before anything is timed; the ONNX
Runtime sessions are the edge suite's (``edge_suite.session``: every graph optimisation, idle
workers sleep). Timing: ``common.run_rounds``, every case (model x backend x thread count) once
per round in an order that rotates between rounds; the table quotes the median over rounds of
each round's median call, with the min-max over rounds. ONNX Runtime's profiler splits each
graph's time by operator type and torch's profiler each eager net's by aten operator (1 thread,
median of passes alternating between the two nets), which shows where WBMM's time goes.

    python benchmarks/wbmm.py --part backbone [--rounds R] [--min-time S] [--threads 1 2]
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import export_as_edgekit, markdown_table, median, run_rounds, write_result
from edge_suite import machine, session

from edgekit.flops import count_params, model_cost
from edgekit.methods.wbmm.model import WBMMNet, paper_config, paper_dw_config

MODELS = {"wbmm-p": paper_config("p"), "wbmm-p-dw13": paper_dw_config("p")}
WBMM, TWIN = MODELS
BACKENDS = ("torch", "onnxruntime")
DEFAULT_THREADS = [1, 2]
DEFAULT_MIN_TIME = 0.5  # seconds per timing: several calls of a backbone
SIDE = 224
PROFILE_PASSES = 5  # profiled sessions per model, alternating between the models
PROFILE_CALLS = 5  # timed calls per pass, after one warm-up call that is left out


def build(name: str) -> tuple[WBMMNet, dict[str, Any]]:
    """The deploy-form backbone and its size: parameters of the training and of the deploy form
    (the cached WBMM stores dense window matrices), FLOPs of one 224 px image (torch's counter)."""
    torch.manual_seed(0)
    model = WBMMNet(**MODELS[name]).eval()
    params_train = count_params(model)
    model.reparameterize("cached")
    cost = model_cost(model, (torch.zeros(1, 3, SIDE, SIDE),))
    return model, {"params_train_form": params_train, "params_deploy": cost.params,
                   "gflops": cost.flops / 1e9}


def setup(threads_list: list[int], work: Path) -> tuple[dict, dict, dict]:
    """Every case as a zero-argument callable keyed (threads, backend, model); the size of each
    model; the ONNX files and the feed, for the profiler."""
    torch.manual_seed(1)
    x = torch.rand(1, 3, SIDE, SIDE)
    feed = {"x": x.numpy()}
    cases, sizes, paths, models = {}, {}, {}, {}
    for name in MODELS:
        model, sizes[name] = build(name)
        models[name] = model
        paths[name] = work / name / "model.onnx"
        paths[name].parent.mkdir()
        export_as_edgekit(model, x, paths[name])
        sizes[name]["onnx_bytes"] = paths[name].stat().st_size
        with torch.inference_mode():
            ref = model(x).numpy()
        for threads in threads_list:
            sess = session(paths[name], threads)
            err = float(np.abs(sess.run(None, feed)[0] - ref).max())
            if err > 1e-3 * max(1.0, float(np.abs(ref).max())):
                raise RuntimeError(f"ONNX Runtime disagrees with torch on {name}: {err}")
            cases[(threads, "torch", name)] = lambda m=model, x=x: m(x)
            cases[(threads, "onnxruntime", name)] = lambda s=sess: s.run(None, feed)
    return cases, sizes, {"paths": paths, "feed": feed, "models": models, "x": x}


def profiled_ops(path: Path, feed: dict[str, np.ndarray], prefix: Path) -> dict[str, float]:
    """Milliseconds per call by operator type in one fresh profiled session (1 thread), from
    ONNX Runtime's profiler, the warm-up call's events left out."""
    sess = session(path, 1, prefix)
    for _ in range(PROFILE_CALLS + 1):
        sess.run(None, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    warm = next(e for e in events if e.get("cat") == "Session" and e["name"] == "model_run")
    totals: Counter = Counter()
    for e in events:
        if (e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
                and e["ts"] >= warm["ts"] + warm["dur"]):
            totals[e["args"]["op_name"]] += e["dur"]
    return {op: us / 1e3 / PROFILE_CALLS for op, us in totals.items()}


def torch_profiled_ops(model: WBMMNet, x: torch.Tensor) -> dict[str, float]:
    """Milliseconds per call by aten operator (self CPU time, 1 thread), from torch's profiler,
    after one unprofiled warm-up call."""
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    with torch.inference_mode():
        model(x)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(PROFILE_CALLS):
                model(x)
    return {e.key: e.self_cpu_time_total / 1e3 / PROFILE_CALLS for e in prof.key_averages()
            if e.self_cpu_time_total > 0}


def op_profile(profile_once: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per model, milliseconds per call by operator type: the median over ``PROFILE_PASSES``
    passes that alternate between the models, so a burst of load spoils one pass of each.
    ``profile_once``: model name -> a callable taking the pass number, giving one pass."""
    passes: dict[str, list[dict[str, float]]] = {n: [] for n in profile_once}
    for p in range(PROFILE_PASSES):
        for name, once in profile_once.items():
            passes[name].append(once(p))
    out = {}
    for name, found in passes.items():
        ops = {op: median([f.get(op, 0.0) for f in found]) for op in set().union(*found)}
        out[name] = dict(sorted(ops.items(), key=lambda kv: -kv[1]))
    return out


def summarise(samples: dict) -> dict[str, dict[str, dict[str, float]]]:
    """``{"torch@1": {model: {median, min, max, rounds}}}``, milliseconds."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (threads, backend, name), values in samples.items():
        ms = [v * 1e3 for v in values]
        out.setdefault(f"{backend}@{threads}", {})[name] = {
            "median": median(ms), "min": min(ms), "max": max(ms), "rounds": ms}
    return out


def verdict(group: str, latency: dict[str, dict[str, float]]) -> dict[str, Any]:
    """WBMM-P against its twin in one group (backend@threads): the twin's median over WBMM-P's
    (> 1: WBMM-P faster), whether the two min-max ranges over rounds are apart (if they overlap,
    the order is within the noise), and the sentence that says so."""
    backend, _, threads = group.partition("@")
    ours, twin = latency[WBMM], latency[TWIN]
    ratio = twin["median"] / ours["median"]
    apart = ours["max"] < twin["min"] or twin["max"] < ours["min"]
    word, factor = ("faster", ratio) if ratio >= 1 else ("slower", 1 / ratio)
    return {"group": group, "twin_over_wbmm": ratio, "ranges_apart": apart,
            "text": f"WBMM-P {word} than its depthwise twin by {factor:.2f}x on {backend} at "
                    f"{threads} thread{'s' if threads != '1' else ''}"
                    + ("" if apart else " (min-max over rounds overlap: within the noise)")}


def op_table(ops: dict[str, dict[str, float]], label: str, least_ms: float = 0.0) -> str:
    """Milliseconds per call by operator type for both graphs and the difference, largest
    difference first (where WBMM-P spends more or less than its twin)."""
    names = sorted((op for op in set(ops[WBMM]) | set(ops[TWIN])
                    if max(ops[WBMM].get(op, 0.0), ops[TWIN].get(op, 0.0)) >= least_ms),
                   key=lambda op: -abs(ops[WBMM].get(op, 0.0) - ops[TWIN].get(op, 0.0)))
    rows = [[op, f"{ops[WBMM].get(op, 0.0):.2f}", f"{ops[TWIN].get(op, 0.0):.2f}",
             f"{ops[WBMM].get(op, 0.0) - ops[TWIN].get(op, 0.0):+.2f}"] for op in names]
    rows.append(["total", f"{sum(ops[WBMM].values()):.2f}", f"{sum(ops[TWIN].values()):.2f}",
                 f"{sum(ops[WBMM].values()) - sum(ops[TWIN].values()):+.2f}"])
    return markdown_table([f"operator ({label}, 1 thread)", f"{WBMM} (ms)", f"{TWIN} (ms)",
                           "difference (ms)"], rows)


def latency_table(latency: dict, verdicts: list[dict]) -> str:
    by_group = {v["group"]: v for v in verdicts}
    rows = []
    for group, models in latency.items():
        backend, _, threads = group.partition("@")
        rows.append([backend, threads] + [
            f"{models[n]['median']:.1f} ({models[n]['min']:.1f}-{models[n]['max']:.1f})"
            for n in MODELS] + [f"{by_group[group]['twin_over_wbmm']:.2f}x"])
    return markdown_table(["backend", "threads"] + [f"{n} ms, median (min-max)" for n in MODELS]
                          + [f"{TWIN} / {WBMM}"], rows)


def run(rounds: int, min_time: float, min_iters: int, threads: list[int]) -> Path:
    started = time.perf_counter()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cases, sizes, graphs = setup(threads, Path(tmp))
        order = sorted(cases, key=lambda k: (BACKENDS.index(k[1]), k[0]))
        samples, loads = run_rounds({k: cases[k] for k in order}, rounds, min_time, min_iters,
                                    before=lambda key: torch.set_num_threads(key[0]))
        ops = op_profile({n: lambda p, n=n: profiled_ops(graphs["paths"][n], graphs["feed"],
                                                         Path(tmp) / f"profile-{n}-{p}")
                          for n in MODELS})
        torch_ops = op_profile({n: lambda p, n=n: torch_profiled_ops(graphs["models"][n],
                                                                     graphs["x"])
                                for n in MODELS})
    latency = summarise(samples)
    verdicts = [verdict(group, models) for group, models in latency.items()]
    sizes_table = markdown_table(
        ["model", "params (training form)", "params (deploy)", "GFLOPs (224 px)"],
        [[n, f"{s['params_train_form'] / 1e6:.2f} M", f"{s['params_deploy'] / 1e6:.2f} M",
          f"{s['gflops']:.2f}"] for n, s in sizes.items()])
    tables = {"sizes": sizes_table, "latency_ms": latency_table(latency, verdicts),
              "ops_ms_1thread": op_table(ops, "ORT"),
              "torch_ops_ms_1thread": op_table(torch_ops, "torch", least_ms=0.2)}
    for title, key in (("sizes", "sizes"), ("latency per image, batch 1", "latency_ms"),
                       ("ONNX Runtime profiler, per operator type", "ops_ms_1thread"),
                       ("torch profiler, per aten operator (>= 0.2 ms)",
                        "torch_ops_ms_1thread")):
        print(f"\n{title}\n\n{tables[key]}")
    print()
    for v in verdicts:
        print(v["text"])
    return write_result("wbmm_backbone", {
        "settings": {"rounds": rounds, "min_time_s": min_time, "min_iters": min_iters,
                     "threads": threads, "batch": 1, "side": SIDE, "form": "deploy (cached)",
                     "weights": "random"},
        "machine": machine(),
        "machine_load": {"loadavg_before": load_before, "loadavg_1min_at_round_start": loads,
                         "loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "models": {n: {"config": MODELS[n], **sizes[n]} for n in MODELS},
        "latency_ms": latency, "verdicts": verdicts, "ops_ms_1thread": ops,
        "torch_ops_ms_1thread": torch_ops, "tables": tables,
    })
