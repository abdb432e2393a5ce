"""An ONNX artifact -> an engine artifact folder: the engine, the ONNX file it came from, the
reference, the calibration cache, and a manifest with the build, its trtexec twin and the
validation."""
from __future__ import annotations

import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.backends.tensorrt_runner import require_cuda_gpu, require_tensorrt
from edgekit.errors import UsageError
from edgekit.exporters.artifact import (
    MANIFEST_SCHEMA,
    Artifact,
    ArtifactOptions,
    file_record,
    write_manifest,
)
from edgekit.exporters.calibration import (
    CALIBRATION_CACHE_FILE,
    CalibrationBatcher,
    CalibrationSamples,
    default_cache_path,
)
from edgekit.exporters.reference import REFERENCE_FILE, default_tolerance
from edgekit.exporters.tensorrt.build import build_engine, check_precision_supported
from edgekit.exporters.tensorrt.config import ENGINE_FILE, ONNX_FILE, EngineBuildConfig
from edgekit.exporters.tensorrt.shapes import calibration_shapes, is_dynamic, resolve_profile
from edgekit.exporters.tensorrt.trtexec import render_command, trtexec_build_args
from edgekit.exporters.tensorrt.validate import validate_engine
from edgekit.exporters.validate import ValidationFailed, ValidationReport
from edgekit.fileio import atomic_directory, atomic_write_bytes
from edgekit.provenance import provenance


@dataclass(frozen=True)
class EngineExportResult:
    folder: Path
    manifest: dict[str, Any]
    validation: ValidationReport | None
    seconds: float
    note: str | None = None  # why validation was skipped



def export_tensorrt(artifact: Artifact, out_dir: str | Path, build: EngineBuildConfig,
                    options: ArtifactOptions | None = None, *,
                    calibration: CalibrationSamples | None = None,
                    onnx_origin: str | None = None) -> EngineExportResult:
    """Build an engine from an ONNX artifact into ``out_dir`` and validate it against the FP32
    reference the artifact carries; raises ValidationFailed beyond tolerance (nothing is left).
    ``onnx_origin``: where the ONNX artifact came from, for the manifest."""
    options = options if options is not None else ArtifactOptions()
    if artifact.format != "onnx":
        raise UsageError(f"{artifact.folder} is a {artifact.format} artifact; TensorRT engines "
                         f"are built from an ONNX artifact or a Jetson bundle")
    trt = require_tensorrt()
    require_cuda_gpu()
    check_precision_supported(trt.__version__, build.precision)
    started = time.perf_counter()
    m = artifact.manifest
    inputs = m["inputs"]
    dynamic = is_dynamic(inputs)
    ranges = resolve_profile(build.shapes, inputs)
    onnx_sha = m["files"][m["model_file"]]["sha256"]
    batcher = calib_shapes = calib_cache = None
    if build.precision == "int8":
        if calibration is None:
            raise UsageError("--precision int8 needs calibration samples")
        batch, calib_shapes = calibration_shapes(ranges, inputs, calibration, build.calib_batch)
        batcher = CalibrationBatcher(calibration, batch)
        calib_cache = build.calib_cache or default_cache_path(onnx_sha, build.calibrator,
                                                               calibration, batch)
    default_atol, default_rtol, _ = default_tolerance(m, build.precision)
    atol = default_atol if options.atol is None else options.atol
    rtol = default_rtol if options.rtol is None else options.rtol
    with atomic_directory(out_dir, inputs=[artifact.folder], force=options.force) as staging:
        shutil.copy2(artifact.model_path, staging / ONNX_FILE)
        files = {ONNX_FILE: file_record(staging / ONNX_FILE)}
        if (artifact.folder / REFERENCE_FILE).is_file():
            shutil.copy2(artifact.folder / REFERENCE_FILE, staging / REFERENCE_FILE)
            files[REFERENCE_FILE] = file_record(staging / REFERENCE_FILE)
        built = build_engine(staging / ONNX_FILE, build, ranges, dynamic, batcher=batcher,
                             calib_shapes=calib_shapes, calib_cache=calib_cache)
        atomic_write_bytes(staging / ENGINE_FILE, built.engine)
        files[ENGINE_FILE] = file_record(staging / ENGINE_FILE)
        if calib_cache is not None and calib_cache.is_file():
            shutil.copy2(calib_cache, staging / CALIBRATION_CACHE_FILE)
            files[CALIBRATION_CACHE_FILE] = file_record(staging / CALIBRATION_CACHE_FILE)
        report, note = validate_engine(staging / ENGINE_FILE, artifact, ranges, atol, rtol)
        if report is not None and not report.passed:
            raise ValidationFailed(report, f"TensorRT {build.precision} engine of "
                                           f"{artifact.source_name}")
        manifest = {
            "schema_version": MANIFEST_SCHEMA,
            "format": "tensorrt",
            "model_file": ENGINE_FILE,
            "source": m["source"],
            "task": m.get("task"),
            "inputs": inputs,
            "outputs": m["outputs"],
            "batch": m.get("batch"),
            "params": m.get("params"),
            "flops_per_sample": m.get("flops_per_sample"),
            "onnx": {"file": ONNX_FILE, "sha256": onnx_sha, "opset": m.get("opset"),
                     "from": onnx_origin or str(artifact.folder),
                     "validation": m.get("validation")},
            "tensorrt": {
                "version": built.tensorrt_version,
                "precision": build.precision,
                "build_config": build.to_dict(),
                "applied": built.applied,
                "dynamic": dynamic,
                "profile": [r.to_dict() for r in ranges],
                "calibration": ({**built.calibration, "samples": calibration.record()}
                                if built.calibration and calibration else None),
                "timing_cache": built.timing_cache,
                "build_s": round(built.seconds, 3),
                "trtexec": render_command(trtexec_build_args(
                    build, ranges, dynamic,
                    calib_cache=CALIBRATION_CACHE_FILE if CALIBRATION_CACHE_FILE in files else None,
                    timing_cache=str(build.timing_cache_path))),
                "warnings": built.warnings,
            },
            "built_on": {**built.gpu, "hostname": platform.node(), "machine": platform.machine(),
                         "portable": False,
                         "note": "a TensorRT engine runs only on the GPU model and TensorRT "
                                 "version that built it"},
            "validation": report.to_dict() if report else {"skipped": note},
            "reference": m.get("reference"),
            **({"stream": m["stream"]} if "stream" in m else {}),
            "target_device": options.device or m.get("target_device"),
            "files": files,
            "export_seconds": round(time.perf_counter() - started, 3),
            "provenance": provenance(),
        }
        write_manifest(staging, manifest)
    return EngineExportResult(Path(out_dir), manifest, report, time.perf_counter() - started, note)
