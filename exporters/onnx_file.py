"""A plain ONNX file (a user's, from any exporter) made into an edgekit artifact.

Every later step (fp16 / int8 conversion, a TensorRT engine, a Jetson bundle, validation, the
fleet) works on artifacts, so an ONNX file is first copied into one, as trtexec or Polygraphy
take any ONNX file. With no PyTorch source to judge it against, the reference is the graph as
written, run by ONNX Runtime on the CPU in FP32 with every graph rewrite off; the artifact's own
check runs it with ONNX Runtime's full optimisations against that, so a rewrite that changes the
numbers fails here. External data files travel with the model (hashed like every file).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from edgekit.errors import CheckFailed, UsageError
from edgekit.exporters.artifact import (
    MANIFEST_SCHEMA,
    ArtifactOptions,
    ExportResult,
    file_record,
    io_records,
    write_manifest,
)
from edgekit.exporters.reference import (
    DYNAMIC_VALIDATION_BATCHES,
    REFERENCE_FILE,
    REFERENCE_SEED,
    Reference,
    save_reference,
    validation_seeds,
)
from edgekit.exporters.validate import ValidationFailed, compare_outputs
from edgekit.fileio import atomic_directory, sha256_file
from edgekit.provenance import provenance
from edgekit.registry import ExportSettings
from edgekit.targets import OnnxFileTarget

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
# Protobuf cannot hold a model of 2 GiB or more in one file; larger ones keep external data.
INLINE_LIMIT_BYTES = 1_800_000_000
REFERENCE_RUNTIME = "ONNX Runtime FP32 on CPU, graph optimisations off"


def _copy_model(source: Path, staging: Path) -> tuple[list[str], bool]:
    """``source`` (with its external data) written as ``model.onnx`` in ``staging``; returns
    the files written and whether the weights are external."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    try:
        onnx.checker.check_model(str(source), full_check=False)
        model = onnx.load(str(source), load_external_data=False)
        external = any(uses_external_data(t) for t in model.graph.initializer)
        load_external_data_for_model(model, str(source.parent))
    except Exception as exc:  # protobuf, missing data files, checker errors
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise UsageError(f"{source} is not a valid ONNX model: {first}") from exc
    external = external or model.ByteSize() > INLINE_LIMIT_BYTES
    target = staging / MODEL_FILE
    if external:
        onnx.save_model(model, str(target), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=DATA_FILE, size_threshold=1024)
        return [MODEL_FILE, DATA_FILE], True
    onnx.save_model(model, str(target))
    return [MODEL_FILE], False


def _run(path: Path, feed: dict[str, np.ndarray], optimize: bool) -> dict[str, np.ndarray]:
    from edgekit.backends.onnxruntime_backend import make_session

    session = make_session(path, threads=1, optimize=optimize)
    names = [o.name for o in session.get_outputs()]
    try:
        outs = session.run(names, feed)
    except Exception as exc:  # ORT's own error types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise UsageError(f"ONNX Runtime cannot run {path.name} on inputs of the given shapes: "
                         f"{first}", hint="check --input against what the graph takes") from exc
    return dict(zip(names, outs, strict=True))


def import_onnx(target: OnnxFileTarget, out_dir: str | Path,
                options: ArtifactOptions | None = None) -> ExportResult:
    """Copy ``target`` into an artifact folder with its reference and check; raises
    ValidationFailed where ONNX Runtime's optimised run departs from the graph as written."""
    options = options if options is not None else ArtifactOptions()
    started = time.perf_counter()
    defaults = ExportSettings()
    atol = defaults.atol if options.atol is None else options.atol
    rtol = defaults.rtol if options.rtol is None else options.rtol
    force, device = options.force, options.device
    spec = target.inputs
    dynamic = any(axis == 0 for f in spec.fields for axis, _ in f.dynamic)
    batches = tuple(sorted({spec.batch, *DYNAMIC_VALIDATION_BATCHES})) if dynamic else (spec.batch,)
    with atomic_directory(out_dir, inputs=[target.path], force=force) as staging:
        files, external = _copy_model(target.path, staging)
        model_path = staging / MODEL_FILE
        actual: dict[str, list[np.ndarray]] = {}
        expected: dict[str, list[np.ndarray]] = {}
        for size in batches:
            for seed in validation_seeds(size):
                feed = spec.feed(size, seed)
                for into, optimize in ((actual, True), (expected, False)):
                    for name, value in _run(model_path, feed, optimize).items():
                        into.setdefault(name, []).append(value)
        bad = [n for n, v in expected.items() if not all(np.isfinite(a).all() for a in v
                                                         if a.dtype.kind == "f")]
        if bad:
            raise CheckFailed(f"{target.path.name} gives NaN or infinity at output '{bad[0]}' on "
                              f"example inputs ({spec.describe()})",
                              hint="check --input ranges against what the model expects")
        report = compare_outputs({n: np.concatenate([a.ravel() for a in v])
                                  for n, v in actual.items()},
                                 {n: np.concatenate([a.ravel() for a in v])
                                  for n, v in expected.items()},
                                 atol, rtol, against=REFERENCE_RUNTIME,
                                 inputs=f"example inputs ({spec.describe()}), batch "
                                        f"{', '.join(map(str, batches))}")
        if not report.passed:
            raise ValidationFailed(report, f"import of {target.path}")
        feed = spec.feed(spec.batch, REFERENCE_SEED)
        reference = Reference(feed, _run(model_path, feed, optimize=False))
        save_reference(staging / REFERENCE_FILE, reference)
        in_rec, out_rec = io_records(model_path)
        manifest = {
            "schema_version": MANIFEST_SCHEMA,
            "format": "onnx",
            "model_file": MODEL_FILE,
            "source": {"name": target.name, "entry": None, "kind": "onnx-file",
                       "onnx_file": str(target.path.resolve()),
                       "onnx_sha256": sha256_file(target.path),
                       "weights": "the user's own (as the ONNX file holds them)",
                       "external_data": external},
            "task": None,
            "input_spec": spec.records(),
            "inputs": in_rec,
            "outputs": out_rec,
            "opset": _opset(model_path),
            "batch": "dynamic" if dynamic else spec.batch,
            "params": _params(model_path),
            "flops_per_sample": None,
            "validation": report.to_dict(),
            "reference": {"file": REFERENCE_FILE, "batch": reference.batch,
                          "inputs": f"example inputs ({spec.describe()}; seed {REFERENCE_SEED})",
                          "outputs": REFERENCE_RUNTIME},
            "target_device": device,
            "files": {**{name: file_record(staging / name) for name in files},
                      REFERENCE_FILE: file_record(staging / REFERENCE_FILE)},
            "export_seconds": round(time.perf_counter() - started, 3),
            "provenance": provenance(),
        }
        write_manifest(staging, manifest)
    return ExportResult(Path(out_dir), manifest, report, time.perf_counter() - started)


def _opset(path: Path) -> int | None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _params(path: Path) -> int:
    """Parameters: the elements of every floating-point initialiser (the weights)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return int(sum(int(np.prod(t.dims)) for t in model.graph.initializer
                   if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                      onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)))
