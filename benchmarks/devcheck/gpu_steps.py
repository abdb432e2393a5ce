"""The steps that profile on the GPU: the CLI as a user runs it, the batch sweep, NVML's meter,
ONNX Runtime's CUDA provider and a TensorRT engine; each with how its results read back."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcheck.base import Context, bench, edgekit

SWEEP_BATCHES = (1, 8, 32, 128, 256)  # launch-bound at one end, compute-bound at the other
SWEEP_BUDGET_S = 60.0  # the sweep starts no case after this; its box leaves room to finish


def profile_cli_commands(ctx: Context, folder: Path) -> list[list[str]]:
    """One ``edgekit profile`` through the CLI, as a user runs it: the report rendered and
    written (issue 47: the torch-CUDA report once died rendering), from a CUDA graph."""
    timing = (["--warmup", "0.05", "--iterations", "3"] if ctx.dry
              else ["--warmup", "0.2", "--duration", "1"])
    graph = ["--cuda-graph", "--energy", "nvml"] if ctx.device == "cuda" else ["--energy", "auto"]
    return [edgekit(ctx, "profile", "mlp", "--backend", "torch", "--provider", ctx.device,
                    "--batch", "32", *timing, *graph,
                    "--json", str(folder / f"torch-{ctx.device}.json"))]


def summarise_profile_cli(results: dict[str, Any]) -> list[dict[str, Any]]:
    doc = next(iter(results.values()), None)
    if doc is None:
        return []
    backend = doc["backend"]
    graph = backend.get("cuda_graph", "off")
    return [{"claim": f"edgekit profile mlp, torch on {backend.get('device')}, batch "
                      f"{doc['settings']['batch']}, CUDA graph {graph}",
             "value": f"p50 {doc['latency_ms']['p50']:.4g} ms, "
                      f"{doc['throughput']['samples_per_s']:.4g} samples/s",
             "met": graph == "on" if backend.get("device", "").startswith("cuda") else None,
             "gpu_memory": backend.get("gpu_memory"),
             "energy_per_inference_j": doc["energy"].get("energy_per_inference_j"),
             "energy_source": doc["energy"].get("source")}]


def batch_sweep_commands(ctx: Context, folder: Path) -> list[list[str]]:
    sizes = (["--models", "mlp", "--batches", "1", "2", "--warmup", "0", "--duration", "0.02"]
             if ctx.dry else
             ["--batches", *map(str, SWEEP_BATCHES), "--warmup", "0.1", "--duration", "0.2",
              "--budget-s", str(SWEEP_BUDGET_S)])
    return [bench(ctx, "batch_sweep.py", "--device", ctx.device, *sizes)]


def summarise_sweep(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep's verdicts, and the cases its budget left out (a shorter sweep, not a fault)."""
    out = []
    for doc in results.values():
        out += [dict(v) for v in doc.get("verdicts", [])]
        if doc.get("left_out"):
            out.append({"claim": "batch-sweep cases left out by its time budget",
                        "value": ", ".join(doc["left_out"]), "met": None})
    return out


def summarise_claims(key: str) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    def summarise(results: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for doc in results.values():
            out += [dict(v) for v in doc.get(key, [])]
        return out
    return summarise


def nvml_check_commands(ctx: Context, folder: Path) -> list[list[str]]:
    return [bench(ctx, "nvml_check.py", *(["--busy-s", "1.2"] if ctx.dry else []))]


def ort_cuda_commands(ctx: Context, folder: Path) -> list[list[str]]:
    return [edgekit(ctx, "profile", "ds-cnn", "--backend", "onnxruntime", "--provider", "cuda",
                    "--energy", "nvml", "--batch", "32",
                    "--json", str(folder / "onnxruntime-cuda.json"))]


def tensorrt_commands(ctx: Context, folder: Path) -> list[list[str]]:
    return [edgekit(ctx, "export", "ds-cnn", "--to", "tensorrt", "--precision", "fp16",
                    "-o", str(folder / "ds-cnn-trt")),
            edgekit(ctx, "profile", str(folder / "ds-cnn-trt"), "--backend", "tensorrt",
                    "--energy", "nvml", "--batch", "8",
                    "--json", str(folder / "tensorrt-fp16.json"))]
