"""What a command acts on, resolved once at the edge into a typed target.

``resolve_target`` turns what the user gave (a registry name, a checkpoint, an artifact folder,
an ``.onnx`` file, a ``.pt2`` file, ``file.py:callable``, ``package.module:callable``, or in
Python an ``nn.Module``) into one of three types, as Polygraphy's loaders turn a script, an ONNX
path or an engine into one runner type before anything runs:

- ``ModelSource``: a torch module with its input spec, output names and provenance;
- ``ArtifactTarget``: an export on disk (ONNX artifact, TensorRT engine, Jetson bundle);
- ``OnnxFileTarget``: a plain ONNX file (external data included) with its input spec.

Code downstream takes these types and never parses the string again.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgekit.checkpoint import Checkpoint, load_checkpoint
from edgekit.errors import UnknownNameError, UsageError
from edgekit.inputs import InputField, InputOverride, InputSpec, parse_input, spec_from_onnx
from edgekit.registry import (
    VARIANT_SEPARATOR,
    ExportSettings,
    ModelEntry,
    StreamSpec,
    TaskSpec,
    all_names,
    split_name,
)

# What TARGET may be, for error messages.
TARGET_FORMS = ("a registry name (edgekit models)", "a .safetensors checkpoint",
                "an artifact folder", "an .onnx file", "a .pt2 file (torch.export.save)",
                "path/to/file.py:callable", "package.module:callable")
_MODULE_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


@dataclass(frozen=True)
class UserOrigin:
    """Where a user's model came from: what they wrote, the files read and the weights' hash."""

    origin: str  # "my_model.py:build", "model.pt2", "nn.Module MyNet"
    kind: str  # callable | pt2 | module
    files: tuple[Path, ...]
    weights_sha256: str

    def record(self) -> dict[str, Any]:
        from edgekit.fileio import sha256_file

        return {"origin": self.origin, "kind": self.kind,
                "files": [{"path": str(p), "sha256": sha256_file(p)} for p in self.files
                          if p.is_file()],
                "weights": "the user's own (as the callable or file gave them)",
                "weights_sha256": self.weights_sha256}


@dataclass
class ModelSource:
    """A torch module together with its inputs, outputs and where it came from.

    ``model`` takes the inputs of ``inputs`` positionally, in order, and returns a tensor or a
    tuple of tensors named ``output_names``. A registry model carries its ``entry`` (task,
    export settings, streaming form); a user's model carries its ``user`` origin instead."""

    model: nn.Module
    inputs: InputSpec
    output_names: tuple[str, ...]
    entry: ModelEntry | None = None
    variant: str | None = None
    checkpoint: Checkpoint | None = None
    user: UserOrigin | None = None

    @property
    def files(self) -> list[Path]:
        """What this source was read from on disk, for output overlap checks."""
        if self.checkpoint is not None:
            return [self.checkpoint.path]
        return list(self.user.files) if self.user is not None else []

    @property
    def name(self) -> str:
        if self.entry is not None:
            return self.entry.name + (f"{VARIANT_SEPARATOR}{self.variant}" if self.variant
                                      else "")
        return _user_name(self.user.origin if self.user else type(self.model).__name__)

    @property
    def config(self) -> dict[str, Any]:
        cfg = getattr(self.model, "edgekit_cfg", None)
        return dict(cfg["config"]) if cfg else {}

    @property
    def task(self) -> TaskSpec | None:
        return self.entry.task if self.entry is not None else None

    @property
    def export_settings(self) -> ExportSettings:
        return self.entry.export if self.entry is not None else ExportSettings()

    @property
    def spiking(self) -> bool:
        """A registry entry says so; a user's module is spiking when it is a ``MultiStepNet``
        with spiking neurons (what NIR export and ``simulate`` run)."""
        if self.entry is not None:
            return self.entry.spiking
        if not hasattr(self.model, "forward_seq"):
            return False
        from edgekit.spiking.layers import MultiStepNet, is_spiking

        return isinstance(self.model, MultiStepNet) and is_spiking(self.model)

    @property
    def stream(self) -> StreamSpec | None:
        return self.entry.stream if self.entry is not None else None

    @property
    def family(self) -> str:
        return self.entry.family if self.entry is not None else "user"

    def example_inputs(self, batch: int = 1, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Deterministic inputs in the model's contract, the same for every use."""
        return self.inputs.example(batch, seed)

    def record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"name": self.name, "entry": self.entry.name if self.entry else None,
                               "variant": self.variant, "family": self.family,
                               "config": _jsonable(self.config)}
        if self.checkpoint is not None:
            rec["checkpoint"] = str(self.checkpoint.path)
            rec["checkpoint_sha256"] = self.checkpoint.info.get("weights_sha256")
            rec["metrics"] = self.checkpoint.metrics
        elif self.user is not None:
            rec.update(self.user.record())
            rec["inputs"] = self.inputs.records()
        else:
            rec["weights"] = "untrained (random initialisation)"
        return rec


@dataclass(frozen=True)
class ArtifactTarget:
    """An export on disk: an ONNX artifact, a TensorRT engine or a Jetson bundle."""

    folder: Path

    @property
    def name(self) -> str:
        return str(self.folder)


@dataclass(frozen=True)
class OnnxFileTarget:
    """A plain ONNX file (not an edgekit artifact), with the inputs its graph declares."""

    path: Path
    inputs: InputSpec
    overrides: tuple[InputOverride, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.path.stem

    def at_batch(self, batch: int) -> OnnxFileTarget:
        """The same file with a symbolic batch dimension taken at ``batch``."""
        return OnnxFileTarget(self.path, spec_from_onnx(self.path, self.overrides, batch),
                              self.overrides)


Target = ModelSource | ArtifactTarget | OnnxFileTarget


def _user_name(origin: str) -> str:
    """A short name for a user's model: ``path/to/my_model.py:build`` -> ``my_model:build``."""
    where, sep, attr = origin.rpartition(":")
    if sep and where.endswith(".py"):
        return f"{Path(where).stem}:{attr}"
    if origin.endswith(".pt2"):
        return Path(origin).stem
    return origin.removeprefix("nn.Module ")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value


def path_exists(target: str, kind: str = "any") -> bool:
    """Whether ``target`` names a file (or any path); False for what cannot be a path at all
    (an empty string, a name too long for the file system)."""
    if not target.strip():
        return False
    try:
        path = Path(target)
        return path.is_file() if kind == "file" else path.exists()
    except (OSError, ValueError):
        return False


def registry_source(entry: ModelEntry, variant: str | None, model: nn.Module,
                    checkpoint: Checkpoint | None = None) -> ModelSource:
    """A registry model (or a checkpoint of one) as a source: one input, the task's."""
    task = entry.task
    spec = InputSpec((InputField(task.input_name, (1, *task.input_shape), task.input_dtype),))
    return ModelSource(model, spec, tuple(task.output_names), entry, variant, checkpoint)


def _user_source(loaded: Any, kind: str, overrides: tuple[InputOverride, ...]) -> ModelSource:
    from edgekit.user_model import adapt, weights_sha256

    module, spec, outputs = adapt(loaded, overrides)
    origin = UserOrigin(loaded.origin, kind, loaded.files, weights_sha256(loaded.module))
    return ModelSource(module, spec, outputs, user=origin)


def is_registry_name(target: str) -> bool:
    base = target.partition(VARIANT_SEPARATOR)[0]
    return base in {n.partition(VARIANT_SEPARATOR)[0] for n in all_names()}


def resolve_target(target: Any, *, inputs: Sequence[InputOverride | str] = (),
                   deploy: bool = True, batch: int = 1) -> Target:
    """``target`` as a typed target (see the module's docstring); already typed, as it is.

    ``inputs`` (``--input``, as ``InputOverride`` or the CLI's ``NAME:DIMS[:DTYPE]`` text) set
    or change a user model's or ONNX file's input spec; ``batch`` sizes an ONNX file's symbolic
    batch dimension. With ``deploy`` a registry entry's inference form is applied
    (``ModelEntry.deploy``), so exports and profiles measure what would be deployed."""
    overrides = tuple(parse_input(o) if isinstance(o, str) else o for o in inputs)
    if isinstance(target, (ModelSource, ArtifactTarget, OnnxFileTarget)):
        return target
    if not isinstance(target, (str, Path)):
        from edgekit.user_model import from_object

        return _user_source(from_object(target, f"nn.Module {type(target).__name__}"),
                            "module", overrides)
    text = str(target)
    path = Path(text) if text.strip() else None
    if path is not None and path_exists(text) and path.is_dir():
        _refuse_overrides(overrides, "an artifact folder")
        from edgekit.exporters.artifact import is_artifact

        if not is_artifact(path):
            raise UsageError(f"{path} is a folder but not an edgekit artifact (no manifest.json)")
        return ArtifactTarget(path)
    if text.endswith(".onnx"):
        if not path_exists(text, "file"):
            raise UsageError(f"ONNX file {text} does not exist")
        return OnnxFileTarget(Path(text), spec_from_onnx(text, overrides, batch), overrides)
    if text.endswith(".pt2"):
        from edgekit.user_model import load_pt2

        return _user_source(load_pt2(Path(text)), "pt2", overrides)
    where, sep, _ = text.rpartition(":")
    if sep and where.endswith(".py"):
        from edgekit.user_model import load_callable

        return _user_source(load_callable(text), "callable", overrides)
    if text.endswith(".safetensors") or (path_exists(text, "file") and not text.endswith(".py")):
        _refuse_overrides(overrides, "a checkpoint")
        model, ckpt = load_checkpoint(text)
        source = registry_source(ckpt.entry, ckpt.variant, model, ckpt)
    elif is_registry_name(text):
        _refuse_overrides(overrides, "a registry model")
        entry, variant = split_name(text)
        source = registry_source(entry, variant, entry.build(variant).eval())
    elif sep and _MODULE_PATH.match(where):
        from edgekit.user_model import load_callable

        return _user_source(load_callable(text), "callable", overrides)
    elif "/" in text or text.endswith((".py", ".safetensors")) or path_exists(text):
        raise UsageError(f"{text} does not exist" if not path_exists(text) else
                         f"{text} is not a model edgekit can read",
                         hint="give " + ", ".join(TARGET_FORMS))
    else:
        raise UnknownNameError("model", text, all_names())
    if deploy and source.entry is not None and source.entry.deploy is not None:
        source.model = source.entry.deploy(source.model.eval()).eval()
    return source


def _refuse_overrides(overrides: tuple[InputOverride, ...], what: str) -> None:
    if overrides:
        raise UsageError(f"--input applies to your own models and ONNX files; this target is "
                         f"{what}, whose inputs are fixed")


def load_model_source(target: Any, deploy: bool = True,
                      inputs: Sequence[InputOverride | str] = ()) -> ModelSource:
    """A target that must be a torch module (a registry name, checkpoint, user callable,
    ``.pt2`` or module object)."""
    resolved = resolve_target(target, inputs=inputs, deploy=deploy)
    if not isinstance(resolved, ModelSource):
        raise UsageError(f"{resolved.name} is an exported model, not a PyTorch module",
                         hint="give the model it came from")
    return resolved
