"""The edge suite at real size: fp32 / fp16 / int8 on ONNX Runtime (1 and 2 threads) beside torch
eager fp32, with top-1 agreement of each precision with FP32 and the int8/fp32 latency ratio.

Each member of ``edgekit.suites`` (MobileNetV2 and ViT-S/16 at 224 px, DistilBERT-base at 128
tokens, the methods at their papers' sizes; all with random weights) goes through the
bring-your-own-model path: ``export_onnx`` (validated against PyTorch), then ``export_precision``
to fp16 and to static int8 (QDQ, ``quant_pre_process`` first, calibrated on generated inputs).
Every ONNX session gets the same options (``ORT_ENABLE_ALL`` graph optimisations, sequential
execution, the thread count pinned), so fp32 and int8 are optimised alike. Agreement: the share
of ``--samples`` generated inputs whose top-1 class matches ONNX Runtime FP32's (random weights:
agreement, not accuracy). Latency: ``--rounds`` rounds, each timing every case once in an order
that rotates between rounds; the table quotes the median over rounds of each round's median call,
with the min-max spread. A second int8 artifact calibrated by MinMax (edgekit's default is
Entropy) is scored for agreement, to tell a calibration problem from a graph problem;
edgekit's int8 quantizes the layers with weights (``--int8-ops weights``, the default);
``--int8-ops weights|all`` adds an int8 artifact with that operator set, timed and scored like
the others (``--int8-twin``: the set the default did not use). ONNX Runtime's profiler splits
the time of fp32 and each int8 by operator type (1 thread), to show where int8 wins or loses.

    python benchmarks/edge_suite.py [--models mobilenet-v2,vit-s16] [--rounds 5]
        [--samples 512] [--calib-samples 32] [--min-time 0.5] [--int8-ops all | --int8-twin]
        [--no-minmax] [--out edge_suite]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import RESULTS, markdown_table, median, run_rounds, write_result

from edgekit.estimate.roofline import roofline
from edgekit.estimate.run import analyse
from edgekit.exporters import export_onnx, load_artifact
from edgekit.exporters.calibration import samples_for_artifact
from edgekit.exporters.quantize import INT8_OPS, PrecisionConfig, export_precision
from edgekit.profiles import calibrate, detect_profile
from edgekit.suites import SuiteModel, get_suite
from edgekit.suites.run import agreement_data
from edgekit.targets import ModelSource, resolve_target

PRECISIONS = ("fp32", "fp16", "int8")
THREADS = (1, 2)
PROFILE_CALLS = 10
TOP_OPS = 6


def machine() -> dict[str, Any]:
    """The CPU as /proc/cpuinfo names it, and which int8 dot-product extensions it has."""
    text = Path("/proc/cpuinfo").read_text()
    flags = set(next(line for line in text.splitlines() if line.startswith("flags")).split())
    model = next(line for line in text.splitlines() if line.startswith("model name"))
    return {"cpu": model.partition(":")[2].strip(), "cores": os.cpu_count(),
            "platform": platform.platform(),
            "avx512_vnni": "avx512_vnni" in flags, "avx_vnni": "avx_vnni" in flags,
            "avx512f": "avx512f" in flags, "avx2": "avx2" in flags,
            "amx_int8": "amx_int8" in flags}


def session(path: Path, threads: int, profile_prefix: Path | None = None) -> Any:
    """An ONNX Runtime CPU session with every option pinned, the same for every precision."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # idle workers sleep instead of spinning, so a session's threads never steal the core the
    # next case (or another process on this shared machine) is timed on
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def op_breakdown(path: Path, feed: dict[str, np.ndarray], work: Path) -> dict[str, float]:
    """Milliseconds per call by operator type (1 thread, ``PROFILE_CALLS`` calls after one
    warm-up), from ONNX Runtime's own profiler."""
    sess = session(path, 1, work / f"profile-{path.parent.name}")
    sess.run(None, feed)
    for _ in range(PROFILE_CALLS):
        sess.run(None, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    totals: Counter = Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            totals[e["args"]["op_name"]] += e["dur"]
    per_call = {op: us / 1e3 / (PROFILE_CALLS + 1) for op, us in totals.items()}
    return dict(sorted(per_call.items(), key=lambda kv: -kv[1]))


def agreement(sessions: dict[str, Any], arrays: dict[str, np.ndarray],
              torch_labels: np.ndarray) -> dict[str, Any]:
    """Top-1 class of each precision on every sample; agreement with ONNX Runtime FP32."""
    n = len(torch_labels)
    logits = {p: np.stack([s.run(None, {k: v[i:i + 1] for k, v in arrays.items()})[0].reshape(-1)
                           for i in range(n)]) for p, s in sessions.items()}
    top1 = {p: v.argmax(axis=1) for p, v in logits.items()}
    ref, ref_logits = top1["fp32"], logits["fp32"]
    norms = np.linalg.norm(ref_logits, axis=1)
    return {"samples": n, "fp32_vs_torch": float((ref == torch_labels).mean()),
            **{f"{p}_vs_fp32": float((top1[p] == ref).mean()) for p in sessions if p != "fp32"},
            # relative L2 error of the logits: a continuous check where top-1 barely varies
            **{f"{p}_logit_rel_error": float(np.median(
                np.linalg.norm(logits[p] - ref_logits, axis=1) / norms))
               for p in sessions if p != "fp32"},
            "distinct_fp32_classes": int(len(set(ref.tolist())))}


def _other_ops(int8: Path) -> str:
    """The operator set edgekit's default int8 did not use: "weights" after "all" and back."""
    used = load_artifact(int8).manifest["quantization"]["int8_ops"]
    return "all" if used == "weights" else "weights"


def measure(member: SuiteModel, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    source = resolve_target(member.target, inputs=member.inputs)
    assert isinstance(source, ModelSource)
    params = sum(p.numel() for p in source.model.parameters())
    t0 = time.perf_counter()
    fp32 = load_artifact(export_onnx(source, work / "fp32").folder)
    export_s = time.perf_counter() - t0
    # generated inputs (and FP32 top-1 labels): the agreement set, and int8's calibration set
    data = agreement_data(source, args.samples, work / "agreement.npz")
    folders = {"fp32": fp32.folder}
    convert_s: dict[str, float] = {}
    validated: dict[str, bool] = {"fp32": fp32.manifest["validation"]["passed"]}
    for precision in PRECISIONS[1:]:
        samples = (samples_for_artifact(fp32.folder, fp32.manifest, data, args.calib_samples)
                   if precision == "int8" else None)
        t0 = time.perf_counter()
        made = export_precision(fp32, work / precision, PrecisionConfig(name=precision),
                                samples=samples, check=False, score=False)
        convert_s[precision] = time.perf_counter() - t0
        folders[precision] = made.folder
        validated[precision] = made.validation.passed
    if member.classifier and args.minmax:  # the other calibrator: is the range the cause?
        made = export_precision(fp32, work / "int8-minmax",
                                PrecisionConfig(name="int8", calibrator="minmax"),
                                samples=samples_for_artifact(fp32.folder, fp32.manifest, data,
                                                             args.calib_samples),
                                check=False, score=False)
        validated["int8-minmax"] = made.validation.passed
    paths = {p: f / "model.onnx" for p, f in folders.items()}
    twin = args.int8_ops or (args.int8_twin and _other_ops(folders["int8"]))
    if twin:  # the same calibration inputs as int8's, another operator set
        t0 = time.perf_counter()
        made = export_precision(fp32, work / "int8-ops",
                                PrecisionConfig(name="int8", int8_ops=twin),
                                samples=samples_for_artifact(fp32.folder, fp32.manifest, data,
                                                             args.calib_samples),
                                check=False, score=False)
        convert_s["int8-ops"] = time.perf_counter() - t0
        paths["int8-ops"] = made.folder / "model.onnx"
        validated["int8-ops"] = made.validation.passed
    feed = source.inputs.feed()
    record: dict[str, Any] = {
        "model": member.name, "kind": member.kind, "target": member.target,
        "weights": "random (agreement, not accuracy)", "params": params,
        "inputs": source.inputs.describe(), "export_s": round(export_s, 1),
        "convert_s": {k: round(v, 1) for k, v in convert_s.items()},
        "bytes": {p: path.stat().st_size for p, path in paths.items()},
        "validated": validated, "int8_target_applies": member.int8_target,
        "int8_ops_used": {p: load_artifact(paths[p].parent).manifest["quantization"]["int8_ops"]
                          for p in ("int8", "int8-ops") if p in paths}}
    named = np.load(data)
    arrays = {k: named[k] for k in source.inputs.names}
    sessions = {p: session(path, 2) for p, path in paths.items()}
    if member.classifier and args.minmax:  # agreement only: its graph and latency are int8's
        sessions["int8-minmax"] = session(work / "int8-minmax" / "model.onnx", 2)
    found = agreement(sessions, arrays, named["labels"])
    # a pose net's first output is no class score: keep only the relative error of it
    record["agreement"] = found if member.classifier else {
        k: v for k, v in found.items() if k == "samples" or k.endswith("_logit_rel_error")}
    del sessions
    cases: dict[tuple[str, int], Any] = {}
    for p, path in paths.items():
        for t in THREADS:
            sess = session(path, t)
            cases[(f"ort-{p}", t)] = (lambda s=sess: s.run(None, feed))
    example = source.inputs.example()
    for t in THREADS:
        cases[("torch-fp32", t)] = (lambda: source.model(*example))

    def pin(key: tuple[str, int]) -> None:
        torch.set_num_threads(key[1])

    samples_s, loads = run_rounds(cases, args.rounds, args.min_time, args.min_iters, before=pin)
    record["latency_ms"] = {
        f"{case}@{t}": {"median": median(v) * 1e3, "min": min(v) * 1e3, "max": max(v) * 1e3,
                        "rounds": [x * 1e3 for x in v]}
        for (case, t), v in samples_s.items()}
    record["round_loads"] = loads
    lat = record["latency_ms"]
    if "int8-ops" in paths:
        record["int8_ops"] = twin
        record["int8_ops_over_fp32"] = {
            str(t): lat[f"ort-int8-ops@{t}"]["median"] / lat[f"ort-fp32@{t}"]["median"]
            for t in THREADS}
    record["int8_over_fp32"] = {
        str(t): lat[f"ort-int8@{t}"]["median"] / lat[f"ort-fp32@{t}"]["median"]
        for t in THREADS if f"ort-int8@{t}" in lat}
    if "int8" in paths:
        record["ops_ms_1thread"] = {p: op_breakdown(paths[p], feed, work)
                                    for p in ("fp32", "int8", "int8-ops") if p in paths}
    record["estimate"] = beside_measured(source, lat, args.calibration_threads)
    record["total_s"] = round(time.perf_counter() - started, 1)
    return record


def calibrated_here() -> dict[str, Any]:
    """This machine's profile, a generic one calibrated now (at torch's thread count) when it is
    not yet: the estimates' peaks and bandwidth."""
    profile = detect_profile()
    if profile.generic and not profile.calibrated:
        calibrate(profile.name)
        profile = detect_profile()
    return {"device": profile.name, "threads": torch.get_num_threads(),
            "peak_ops_per_s": {p: profile.peak_for(p) for p in PRECISIONS},
            "memory_bandwidth_bytes_s": profile.memory_bandwidth_bytes_s}


def beside_measured(source: ModelSource, lat: dict[str, Any], threads: int) -> dict[str, Any]:
    """``edgekit estimate``'s roofline for this machine's calibrated profile at each precision,
    beside ONNX Runtime's measured median at the thread count the calibration ran with."""
    analysis = analyse(source, 1)
    here = detect_profile()
    rows = {}
    for p in PRECISIONS:
        row = roofline(analysis, here, p)
        measured = lat.get(f"ort-{p}@{threads}", {}).get("median")
        rows[p] = {"estimated_ms": row["latency_ms"], "measured_ms": measured,
                   "measured_over_estimated": (measured / row["latency_ms"]
                                               if measured and row["latency_ms"] else None),
                   "compute_bound_layers": row["compute_bound_layers"],
                   "memory_bound_layers": row["memory_bound_layers"]}
    return {"device": here.name, "threads": threads, "flops": analysis.flops,
            "method": analysis.method, "precisions": rows}


def estimate_table(records: list[dict[str, Any]]) -> str:
    header = ["model", "precision", "estimated ms", "measured ORT ms", "measured / estimated",
              "compute-bound layers"]
    rows = []
    for r in records:
        for p, e in r.get("estimate", {}).get("precisions", {}).items():
            if e["estimated_ms"] is None:
                continue
            ratio = e["measured_over_estimated"]
            rows.append([r["model"], p, f"{e['estimated_ms']:.2f}",
                         f"{e['measured_ms']:.2f}" if e["measured_ms"] else "-",
                         f"{ratio:.2f}x" if ratio else "-",
                         f"{e['compute_bound_layers']} of "
                         f"{e['compute_bound_layers'] + e['memory_bound_layers']}"])
    return markdown_table(header, rows)


def _ratio(ratio: float | None) -> str:
    return f"{ratio:.2f}x ({1 / ratio:.2f}x faster)" if ratio else "-"


def _share(agree: dict[str, Any], precision: str) -> str:
    value = agree.get(f"{precision}_vs_fp32")
    return "-" if value is None else f"{value * 100:.1f}%"


def _classes(agree: dict[str, Any]) -> str:
    seen = agree.get("distinct_fp32_classes")
    return "-" if seen is None else f"{seen}/{agree['samples']}"


def _error(agree: dict[str, Any], precision: str) -> str:
    value = agree.get(f"{precision}_logit_rel_error")
    return "-" if value is None else f"{value:.3f}"


def _ms(lat: dict[str, Any], key: str) -> str:
    if key not in lat:
        return "-"
    m = lat[key]
    return f"{m['median']:.1f} ({m['min']:.1f}-{m['max']:.1f})"


def table(records: list[dict[str, Any]]) -> str:
    header = ["model", "threads", "torch fp32 ms", "ORT fp32 ms", "ORT fp16 ms", "ORT int8 ms",
              "int8/fp32", "int8 agree", "int8 minmax agree", "fp16 agree", "classes seen",
              "int8 output rel. err",
              "weights"]
    rows = []
    for r in records:
        if "error" in r:
            rows.append([r["model"], "-", *["-"] * 10, f"not measured: {r['error']}"])
            continue
        lat, agree = r["latency_ms"], r.get("agreement", {})
        for t in THREADS:
            ratio = r["int8_over_fp32"].get(str(t))  # keys as JSON has them
            used = r.get("int8_ops_used", {}).get("int8")
            rows.append([
                f"{r['model']} (int8 of {used})" if used else r["model"], t,
                _ms(lat, f"torch-fp32@{t}"), _ms(lat, f"ort-fp32@{t}"),
                _ms(lat, f"ort-fp16@{t}"), _ms(lat, f"ort-int8@{t}"), _ratio(ratio),
                _share(agree, "int8"), _share(agree, "int8-minmax"), _share(agree, "fp16"),
                _classes(agree), _error(agree, "int8"), "random: agreement, not accuracy"])
        if "int8_ops" in r:
            for t in THREADS:
                rows.append([f"{r['model']}, int8 ops {r['int8_ops']}", t, "-",
                             _ms(lat, f"ort-fp32@{t}"), "-", _ms(lat, f"ort-int8-ops@{t}"),
                             _ratio(r["int8_ops_over_fp32"][str(t)]), _share(agree, "int8-ops"),
                             "-", "-", _classes(agree), _error(agree, "int8-ops"),
                             "random: agreement, not accuracy"])
    return markdown_table(header, rows)


def plot(records: list[dict[str, Any]], path: Path) -> None:
    """Latency (1 thread) against model size per precision, and against int8/fp16 agreement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    markers = {"fp32": "o", "fp16": "s", "int8": "^"}
    for i, r in enumerate(x for x in records if "latency_ms" in x):
        colour = f"C{i}"
        agree = r.get("agreement", {})
        xs, ys_size, ys_agree = [], [], []
        for p in PRECISIONS:
            key = f"ort-{p}@1"
            if key not in r["latency_ms"]:
                continue
            x = r["latency_ms"][key]["median"]
            xs.append(x)
            ys_size.append(r["bytes"][p] / 2**20)
            ys_agree.append(100.0 if p == "fp32" else agree.get(f"{p}_vs_fp32", np.nan) * 100)
            left.scatter(x, ys_size[-1], color=colour, marker=markers[p])
            if "distinct_fp32_classes" in agree:
                right.scatter(x, ys_agree[-1], color=colour, marker=markers[p])
        left.plot(xs, ys_size, color=colour, alpha=0.4, label=r["model"])
        if "distinct_fp32_classes" in agree:  # a classifier: agreement applies
            right.plot(xs, ys_agree, color=colour, alpha=0.4, label=r["model"])
    for ax, label in ((left, "ONNX file (MiB)"),
                      (right, "top-1 agreement with FP32 (%), random weights")):
        ax.set_xscale("log")
        ax.set_xlabel("median latency, ONNX Runtime, 1 thread (ms)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    left.set_title("o fp32, s fp16, ^ int8: lower-left is better")
    right.set_title("upper-left is better")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def reestimate(path: Path) -> None:
    """The estimates of a results file recomputed for this machine's calibrated profile, beside
    the latencies it holds: the estimate needs no timing, only each member's analysis."""
    body = json.loads(path.read_text())
    here = calibrated_here()
    members = {m.name: m for m in get_suite(body["suite"]).models}
    for record in body["models"]:
        if "latency_ms" in record:
            member = members[record["model"]]
            source = resolve_target(member.target, inputs=member.inputs)
            record["estimate"] = beside_measured(source, record["latency_ms"], here["threads"])
    body["calibrated_profile"] = here
    body["estimates_recomputed"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body.setdefault("measured_provenance", body.get("provenance"))  # the timing run's
    for key in ("provenance", "schema_version", "kind"):  # write_result writes them anew
        body.pop(key, None)
    write_result(path.stem, body)
    print(estimate_table(body["models"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="edge")
    parser.add_argument("--models", help="comma-separated members (default: all)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=512, help="agreement inputs")
    parser.add_argument("--calib-samples", type=int, default=32,
                        help="int8 calibration inputs (ONNX Runtime keeps every activation of "
                             "every sample in memory: ViT-S takes about 150 MB a sample)")
    parser.add_argument("--no-minmax", dest="minmax", action="store_false",
                        help="skip the int8 twin calibrated by MinMax instead of Entropy")
    parser.add_argument("--int8-ops", choices=INT8_OPS,
                        help="also an int8 artifact with this operator set (edgekit's default "
                             "is weights)")
    parser.add_argument("--int8-twin", action="store_true",
                        help="also an int8 artifact with the operator set the default did not "
                             "use")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds per case per round")
    parser.add_argument("--min-iters", type=int, default=5)
    parser.add_argument("--out", default="edge_suite")
    parser.add_argument("--estimates-only", action="store_true",
                        help="recompute the estimates of results/OUT.json beside its measured "
                             "latencies (no export, no timing), and rewrite it")
    args = parser.parse_args()
    if args.estimates_only:
        reestimate(RESULTS / f"{args.out}.json")
        return
    suite = get_suite(args.suite)
    members = suite.select(args.models.split(",") if args.models else None)
    here = calibrated_here()
    args.calibration_threads = here["threads"]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    records = []
    with torch.inference_mode():
        for member in members:
            print(f"== {member.name}", flush=True)
            with tempfile.TemporaryDirectory(prefix="edge-suite-") as tmp:
                try:
                    records.append(measure(member, args, Path(tmp)))
                except Exception as exc:  # a member that fails is a row saying why
                    records.append({"model": member.name, "error": f"{type(exc).__name__}: "
                                                                   f"{str(exc)[:300]}"})
            print(table(records[-1:]), flush=True)
    body = {"machine": machine(), "calibrated_profile": here, "suite": suite.name,
            "settings": vars(args),
            "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0],
            "wall_s": round(time.perf_counter() - started, 1),
            "ort_options": "ORT_ENABLE_ALL, sequential, intra-op threads pinned, inter-op 1, "
                           "CPUExecutionProvider, same for every precision",
            "models": records}
    write_result(args.out, body)
    plot(records, RESULTS / f"{args.out}.png")
    print(table(records))
    print(estimate_table(records))


if __name__ == "__main__":
    main()
