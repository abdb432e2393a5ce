"""Precision as a compare axis: one trained model at fp32, fp16 and int8 as ONNX Runtime runs them.

Each precision of a model is an artifact made the way ``edgekit export --to onnx --precision``
makes it (FP32 export, ONNX Runtime's conversion, validation against the FP32 reference), scored
by running that artifact on the test split and profiled like any artifact. A precision ONNX
Runtime refuses for a model becomes a note with the reason, not a row; a conversion that misses
the reference's tolerance (a spiking net's thresholds under int8) stays a row marked as failing
validation, with its accuracy: the honest cost of that precision.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import UnknownNameError, UsageError
from edgekit.precisions import onnx_names

# Backends that run the converted ONNX artifacts.
PRECISION_BACKENDS = ("onnxruntime",)


def parse_precisions(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"fp32,int8"`` (or a sequence) as known ONNX precisions, in order, each once."""
    names = [p.strip() for p in (text.split(",") if isinstance(text, str) else text)]
    if not names or any(not n for n in names):
        raise UsageError(f"--precision takes a comma-separated list such as fp32,int8, "
                         f"got {text!r}")
    for name in names:
        if name not in onnx_names():
            raise UnknownNameError("precision", name, onnx_names())
    if len(set(names)) != len(names):
        raise UsageError(f"--precision names a precision twice: {text}")
    return tuple(names)


def check_backend(backend: str) -> None:
    if backend not in PRECISION_BACKENDS:
        raise UsageError(f"--precision compares ONNX artifacts, which --backend {backend} does "
                         f"not run", hint=f"use --backend {' or '.join(PRECISION_BACKENDS)}")


def precision_artifacts(checkpoint: Path, precisions: Sequence[str], entry: Any, dataset: Any,
                        settings: Any, workdir: Path,
                        data: str | Path | None) -> tuple[list[dict[str, Any]], list[str]]:
    """For each precision: its artifact folder, test score and validation verdict; and the
    one-line reasons of the precisions refused for this model."""
    from edgekit.backends import OnnxRuntimeRunner
    from edgekit.exporters import load_artifact
    from edgekit.exporters.calibration import DEFAULT_SAMPLES, samples_from_dataset
    from edgekit.exporters.onnx import OnnxOptions, export_onnx
    from edgekit.exporters.quantize import (
        PrecisionConfig,
        PrecisionRefused,
        export_precision,
        score_onnx,
    )
    from edgekit.targets import load_model_source

    source = load_model_source(str(checkpoint))
    fp32 = load_artifact(export_onnx(
        source, workdir / "fp32", OnnxOptions(batch=settings.batch, device=settings.device)).folder)
    made, refused = [], []
    for precision in precisions:
        folder, passed = fp32.folder, True
        if precision != "fp32":
            samples = (samples_from_dataset(entry.task, data, DEFAULT_SAMPLES)
                       if precision == "int8" else None)
            try:
                result = export_precision(fp32, workdir / precision,
                                          PrecisionConfig(name=precision), samples=samples,
                                          check=False, score=False)
            except PrecisionRefused as exc:
                refused.append(f"{source.name} at {precision}: {exc}")
                continue
            folder, passed = result.folder, result.validation.passed
        artifact = load_artifact(folder)
        with OnnxRuntimeRunner(artifact.model_path, threads=1) as runner:
            score = score_onnx(runner, entry, dataset.x_test, dataset.y_test,
                               artifact.manifest.get("batch", 1))
        made.append({"precision": precision, "folder": folder, "score": score,
                     "validated": passed})
    return made, refused
