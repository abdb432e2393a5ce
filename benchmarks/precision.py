"""fp32 vs int8 on ONNX Runtime CPU, 1 thread, for every registry model: latency, size, accuracy.

Each model is trained once (compare's checkpoint cache under $EDGEKIT_HOME, so a rerun only
measures), exported to ONNX at fp32 and converted to int8 the way `edgekit export --to onnx
--precision int8` does it (static QDQ, 512 calibration samples from the training split, or
--quantization dynamic). Accuracy is the test split's, both precisions run by ONNX Runtime.
Latency rounds are interleaved (fp32, int8, then int8, fp32, ...) so drift on a shared machine hits
both alike; the table quotes the median of the per-round p50 latencies and their spread.

    python benchmarks/precision.py [--models mlp,ds-cnn] [--rounds 5] [--duration 0.5]
        [--quantization static|dynamic] [--train-seconds S]
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from common import markdown_table, median, write_result

from edgekit.checkpoint import save_checkpoint
from edgekit.compare.cache import cache_path, cached_checkpoint
from edgekit.data import load_dataset
from edgekit.errors import UsageError
from edgekit.exporters import load_artifact
from edgekit.exporters.calibration import DEFAULT_SAMPLES, samples_from_dataset
from edgekit.exporters.onnx import export_onnx
from edgekit.exporters.quantize import PrecisionConfig, PrecisionRefused, export_precision
from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiler.timing import TimingPlan
from edgekit.registry import get_entry, list_models
from edgekit.targets import load_model_source
from edgekit.training import train

# Nodes an int8 QDQ graph adds or runs in integer arithmetic; the rest stayed in float.
_QUANT_NODES = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
                "ConvInteger", "QLinearConv", "QLinearMatMul"}


def _checkpoint(name: str, train_seconds: float | None) -> Path:
    """compare's cached checkpoint; trained within ``train_seconds`` where none is cached."""
    entry = get_entry(name)
    dataset = load_dataset(entry.task)
    path = cache_path(entry, None, dataset)
    if train_seconds is None or path.is_file():
        return cached_checkpoint(entry, None, dataset)
    result = train(entry, dataset, seconds=train_seconds)
    save_checkpoint(result.model, path, metrics=result.metrics(),
                    extra={"dataset": dataset.name, "dataset_digest": dataset.digest})
    return path


def _fused_ops(model: Path, work: Path) -> dict[str, int]:
    """Node counts after ONNX Runtime's graph fusion (QDQ pairs become QLinearConv / QGemm), the
    graph that really runs: what stayed in float shows operator coverage."""
    import collections

    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(work / "fused.onnx")
    ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    nodes = onnx.load(str(work / "fused.onnx")).graph.node
    return dict(sorted(collections.Counter(n.op_type for n in nodes).items()))


def _p50(folder: Path, plan: TimingPlan) -> float:
    settings = ProfileSettings(backend="onnxruntime", threads=1, plan=plan, energy="none")
    return profile(str(folder), settings)["latency_ms"]["p50"]


def _measure(name: str, args: argparse.Namespace, plan: TimingPlan, work: Path) -> dict:
    entry = get_entry(name)
    ckpt = _checkpoint(name, args.train_seconds)
    fp32 = load_artifact(export_onnx(load_model_source(str(ckpt)), work / f"{name}-fp32").folder)
    config = PrecisionConfig(name="int8", quantization=args.quantization)
    samples = (samples_from_dataset(entry.task, None, DEFAULT_SAMPLES)
               if config.calibrated else None)
    try:
        int8 = export_precision(fp32, work / f"{name}-int8", config, samples=samples,
                                check=False)
    except PrecisionRefused as exc:
        return {"model": name, "refused": str(exc)}
    m = int8.manifest
    folders = {"fp32": fp32.folder, "int8": int8.folder}
    p50: dict[str, list[float]] = {"fp32": [], "int8": []}
    for r in range(args.rounds):
        for precision in (("fp32", "int8") if r % 2 == 0 else ("int8", "fp32")):
            p50[precision].append(_p50(folders[precision], plan))
    ops = m["quantization"]["operators"]
    return {
        "model": name, "family": entry.family, "metric": m["accuracy"]["metric"],
        "fp32_score": m["accuracy"]["fp32_value"], "int8_score": m["accuracy"]["value"],
        "score_change": m["accuracy"]["change"], "validated": int8.validation.passed,
        "max_abs_error": max(o.max_abs for o in int8.validation.outputs),
        "fp32_bytes": fp32.size_bytes, "int8_bytes": m["files"][m["model_file"]]["bytes"],
        "fp32_p50_ms": p50["fp32"], "int8_p50_ms": p50["int8"],
        "fp32_median_ms": median(p50["fp32"]), "int8_median_ms": median(p50["int8"]),
        "float_ops": sorted(k for k in ops if k not in _QUANT_NODES),
        "quantize_nodes": ops.get("QuantizeLinear", 0) + ops.get("DynamicQuantizeLinear", 0),
        "method": m["quantization"]["method"],
        "int8_ops_after_fusion": _fused_ops(int8.folder / "model.onnx", work),
    }


def _row(rec: dict) -> list[str]:
    if "refused" in rec:
        return [rec["model"], *["-"] * 6, f"refused: {rec['refused']}"]
    scale = 100 if rec["metric"] == "accuracy" else 1
    f, i = rec["fp32_median_ms"], rec["int8_median_ms"]
    spread = (f"{min(rec['fp32_p50_ms']):.4f}-{max(rec['fp32_p50_ms']):.4f} / "
              f"{min(rec['int8_p50_ms']):.4f}-{max(rec['int8_p50_ms']):.4f}")
    return [rec["model"], f"{f:.4f}", f"{i:.4f}", f"{i / f:.2f}x", spread,
            f"{rec['int8_bytes'] / rec['fp32_bytes']:.2f}x",
            f"{rec['fp32_score'] * scale:.2f} -> {rec['int8_score'] * scale:.2f} "
            f"({(rec['score_change']) * scale:+.2f})",
            "" if rec["validated"] else "outside the int8 tolerance"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated entries (default: every registry model)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=0.5, help="timed seconds per run")
    parser.add_argument("--quantization", choices=("static", "dynamic"), default="static")
    parser.add_argument("--train-seconds", type=float,
                        help="train a model with no cached checkpoint for at most this long")
    args = parser.parse_args()
    names = args.models.split(",") if args.models else [e.name for e in list_models()]
    plan = TimingPlan(warmup_s=0.1, duration_s=args.duration)
    records = []
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-precision-") as tmp:
        for name in names:
            try:
                rec = _measure(name, args, plan, Path(tmp))
            except UsageError as exc:
                rec = {"model": name, "refused": str(exc)}
            records.append(rec)
            print(" | ".join(_row(rec)), flush=True)
    table = markdown_table(["model", "fp32 p50 (ms)", "int8 p50 (ms)", "int8 / fp32",
                            "p50 spread fp32 / int8 (ms)", "size int8 / fp32",
                            "test accuracy % fp32 -> int8", "note"],
                           [_row(r) for r in records])
    print(table)
    write_result("precision", {"settings": vars(args), "load_average": os.getloadavg(),
                               "models": records, "table": table})


if __name__ == "__main__":
    main()
