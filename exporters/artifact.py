"""The artifact: one export on disk, a folder with the model file and ``manifest.json``.

The manifest records the source model and config, inputs and outputs, SHA-256 of every file,
the validation result, the target device and library versions, and its own SHA-256.
``load_artifact`` refuses a folder whose files do not match their hashes, a manifest edited
after export, and one whose inputs, outputs or batch are not those of its ONNX graph (the README
of a Jetson bundle, the profile's input shapes and the validation all read them), so a corrupt or
mislabelled model is never run silently.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from edgekit.errors import UsageError
from edgekit.fileio import (
    atomic_write_json,
    read_json_object,
    register_output_kind,
    sha256_file,
)
from edgekit.schema import (
    ANY_OBJECT,
    BOOL,
    INT,
    INT_OR_STR,
    NUMBER,
    STR,
    ListOf,
    MapOf,
    Object,
    Optional,
    check,
)

MANIFEST = "manifest.json"
ONNX_FILE = "model.onnx"  # the ONNX graph an artifact (and a bundle, an engine's source) holds
MANIFEST_SCHEMA = 2  # 2: the manifest carries its own digest (``manifest_sha256``)

_TENSOR = Object({"name": STR, "shape": ListOf(INT_OR_STR), "dtype": STR})
_VALIDATION = Object({"passed": Optional(BOOL), "outputs": Optional(ListOf(Object({
    "name": Optional(STR), "atol": Optional(NUMBER), "rtol": Optional(NUMBER),
    "max_abs": Optional(NUMBER)})))})
_RANGE = Object({"name": STR, "min": ListOf(INT), "opt": ListOf(INT), "max": ListOf(INT)})
# Every field edgekit reads from an artifact's (or a Jetson bundle's) manifest.json; the others
# (provenance, simplifier, nodes, ...) are records for people and are not read back.
MANIFEST_FIELDS = Object({
    "schema_version": INT,
    "manifest_sha256": Optional(STR),  # required from schema 2 on
    "format": STR,
    "model_file": STR,
    "files": MapOf(Object({"sha256": STR, "bytes": INT})),
    "source": Object({"name": STR, "entry": Optional(STR), "checkpoint": Optional(STR),
                      "checkpoint_sha256": Optional(STR)}),
    "inputs": ListOf(_TENSOR),
    "outputs": ListOf(_TENSOR),
    "batch": Optional(INT_OR_STR),
    "opset": Optional(INT),
    "params": Optional(INT),
    "flops_per_sample": Optional(NUMBER),
    "task": Optional(ANY_OBJECT),
    "validation": Optional(_VALIDATION),
    "precision": Optional(STR),  # an ONNX artifact converted to fp16 / int8 (exporters/quantize)
    "accuracy": Optional(Object({"value": Optional(NUMBER), "fp32_value": Optional(NUMBER)})),
    "reference": Optional(Object({"batch": Optional(INT)})),
    "onnx": Optional(Object({"file": Optional(STR), "sha256": Optional(STR),
                             "validation": Optional(_VALIDATION)})),
    "tensorrt": Optional(Object({"precision": Optional(STR), "dynamic": Optional(BOOL),
                                 "profile": Optional(ListOf(_RANGE))})),
    "jetson_bundle": Optional(Object({"build": Optional(ANY_OBJECT),
                                      "dynamic": Optional(BOOL),
                                      "profile": Optional(ListOf(_RANGE))})),
})


def task_record(task: Any) -> dict[str, Any]:
    """The manifest's ``task`` block: what the model is scored on and its input contract."""
    return {"dataset": task.dataset, "metric": task.metric,
            "input_shape": list(task.input_shape), "num_classes": task.num_classes}


def file_record(path: Path) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest without its ``manifest_sha256`` field (canonical JSON)."""
    rest = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """``folder/manifest.json`` with its digest (every artifact writer ends with this)."""
    manifest["manifest_sha256"] = manifest_digest(manifest)
    atomic_write_json(folder / MANIFEST, manifest)


@dataclass(frozen=True)
class ArtifactOptions:
    """What every exporter that writes an artifact folder takes; ``None``: the export's own.

    ``OnnxOptions`` and ``edgekit.export``'s ``ExportOptions`` extend it, so one options object
    travels from the command line to whichever exporter writes the folder."""

    device: str | None = None  # device profile name, recorded in the manifest
    atol: float | None = None  # of the artifact's own validation
    rtol: float | None = None
    force: bool = False  # replace an existing output folder that edgekit did not write


Check = TypeVar("Check")  # a format's validation record


@dataclass(frozen=True)
class ExportResult(Generic[Check]):
    """What an export hands back: its folder, manifest and validation (a ValidationReport for
    ONNX and NIR, the fixed-point check for Loihi 2)."""

    folder: Path
    manifest: dict[str, Any]
    validation: Check
    seconds: float


@dataclass(frozen=True)
class Artifact:
    folder: Path
    manifest: dict[str, Any]

    @property
    def model_path(self) -> Path:
        return self.folder / self.manifest["model_file"]

    @property
    def format(self) -> str:
        return self.manifest["format"]

    @property
    def source_name(self) -> str:
        return self.manifest["source"]["name"]

    @property
    def size_bytes(self) -> int:
        """The model file and its external data file (an imported ONNX file's weights)."""
        files, model = self.manifest["files"], self.manifest["model_file"]
        return sum(int(files[n]["bytes"]) for n in (model, f"{model}.data") if n in files)


def is_artifact(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def _artifact_files(folder: Path) -> list[str] | None:
    """An artifact or Jetson bundle edgekit wrote (its manifest has our schema and format keys):
    the manifest and the files it lists."""
    manifest = read_json_object(folder / MANIFEST)
    ours = (isinstance(manifest.get("schema_version"), int)
            and isinstance(manifest.get("format"), str) and isinstance(manifest.get("files"), dict))
    return [MANIFEST, *manifest["files"]] if ours else None


register_output_kind("artifact", _artifact_files)


def load_artifact(folder: str | Path, verify: bool = True) -> Artifact:
    folder = Path(folder)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise UsageError(f"{folder} is not an edgekit artifact (no {MANIFEST})",
                         hint="create one with 'edgekit export MODEL --to onnx -o DIR'")
    manifest = check(read_json_object(manifest_path), MANIFEST_FIELDS, str(manifest_path),
                     hint="export it again")
    if manifest["model_file"] not in manifest["files"]:
        raise UsageError(f"{manifest_path}: field 'model_file' names {manifest['model_file']!r}, "
                         f"which is not in 'files'", hint="export it again")
    if manifest["schema_version"] > MANIFEST_SCHEMA:
        raise UsageError(f"{manifest_path}: schema {manifest['schema_version']} is newer than this "
                         f"edgekit understands ({MANIFEST_SCHEMA})", hint="upgrade edgekit")
    digest = manifest.get("manifest_sha256")
    if digest is None and manifest["schema_version"] >= 2:
        raise UsageError(f"{manifest_path}: field 'manifest_sha256' is missing",
                         hint="export it again")
    if digest is not None and digest != manifest_digest(manifest):
        raise UsageError(f"{manifest_path}: field 'manifest_sha256' does not match the "
                         f"manifest's content (edited after export?)", hint="export it again")
    batch = manifest.get("batch")
    if batch is not None and batch != "dynamic" and (not isinstance(batch, int) or batch < 1):
        raise UsageError(f"{manifest_path}: field 'batch' is {batch!r}, not a positive integer "
                         f"or 'dynamic'", hint="export it again")
    artifact = Artifact(folder, manifest)
    if verify:
        for name, record in manifest["files"].items():
            path = folder / name
            if not path.is_file():
                raise UsageError(f"artifact {folder}: file {name} is missing")
            if file_record(path)["sha256"] != record["sha256"]:
                raise UsageError(f"artifact {folder}: {name} is corrupt (SHA-256 does not match "
                                 f"the manifest)", hint="export it again")
        if ONNX_FILE in manifest["files"]:
            _check_against_onnx(manifest_path, manifest, folder / ONNX_FILE)
    return artifact


def _check_against_onnx(manifest_path: Path, manifest: dict[str, Any], onnx_path: Path) -> None:
    """The manifest's inputs, outputs and batch are those of its ONNX graph."""
    try:
        inputs, outputs = io_records(onnx_path)
    except Exception as exc:  # noqa: BLE001  onnx raises its own (protobuf) error types
        raise UsageError(f"{onnx_path}: not a readable ONNX model ({exc})",
                         hint="export it again") from exc
    for field, graph in (("inputs", inputs), ("outputs", outputs)):
        if manifest[field] != graph:
            said = ", ".join(f"{t['name']} {t['shape']}" for t in manifest[field]) or "none"
            has = ", ".join(f"{t['name']} {t['shape']}" for t in graph) or "none"
            raise UsageError(f"{manifest_path}: field '{field}' says {said}, but "
                             f"{onnx_path.name} has {has}", hint="export it again")
    batch = manifest.get("batch")
    first = inputs[0]["shape"][0] if inputs and inputs[0]["shape"] else None
    symbolic = isinstance(first, str) or first == 0  # a named or an unnamed free dimension
    if batch is not None and (batch == "dynamic") != symbolic or \
            isinstance(batch, int) and batch != first:
        raise UsageError(f"{manifest_path}: field 'batch' is {batch!r}, but {onnx_path.name}'s "
                         f"first input has batch dimension {first!r}", hint="export it again")


def io_records(path: Path) -> tuple[list[dict], list[dict]]:
    """An ONNX file's graph inputs (initializers left out) and outputs, as the manifest records
    them: name, shape (a named dimension as its name), numpy dtype."""
    import onnx
    from onnx import helper

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}

    def record(value: Any) -> dict:
        t = value.type.tensor_type
        dims = [d.dim_param or d.dim_value for d in t.shape.dim]
        return {"name": value.name, "shape": dims,
                "dtype": str(helper.tensor_dtype_to_np_dtype(t.elem_type))}

    inputs = [record(v) for v in graph.input if v.name not in initializers]
    return inputs, [record(v) for v in graph.output]
