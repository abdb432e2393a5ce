"""What a command's TARGET names: a registry model, a checkpoint, an artifact folder, an .onnx
file."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from edgekit.checkpoint import Checkpoint, load_checkpoint
from edgekit.errors import UsageError
from edgekit.registry import VARIANT_SEPARATOR, ModelEntry, all_names, split_name


@dataclass
class ModelSource:
    """A torch module together with where it came from, for manifests and reports."""

    model: nn.Module
    entry: ModelEntry
    variant: str | None
    checkpoint: Checkpoint | None = None

    @property
    def files(self) -> list[Path]:
        """What this source was read from on disk (its checkpoint), for output overlap checks."""
        return [self.checkpoint.path] if self.checkpoint is not None else []

    @property
    def name(self) -> str:
        return self.entry.name + (f"{VARIANT_SEPARATOR}{self.variant}" if self.variant else "")

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.model.edgekit_cfg["config"])

    def record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"name": self.name, "entry": self.entry.name, "variant": self.variant,
                               "family": self.entry.family, "config": _jsonable(self.config)}
        if self.checkpoint is not None:
            rec["checkpoint"] = str(self.checkpoint.path)
            rec["checkpoint_sha256"] = self.checkpoint.info.get("weights_sha256")
            rec["metrics"] = self.checkpoint.metrics
        else:
            rec["weights"] = "untrained (random initialisation)"
        return rec


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value


def _exists(target: str, kind: str = "any") -> bool:
    """Whether ``target`` names a file (or any path); False for what cannot be a path at all
    (an empty string, a name too long for the file system)."""
    if not target.strip():
        return False
    try:
        path = Path(target)
        return path.is_file() if kind == "file" else path.exists()
    except (OSError, ValueError):
        return False


def looks_like_path(target: str) -> bool:
    return target.endswith((".safetensors", ".onnx")) or "/" in target or _exists(target)


def load_model_source(target: str, deploy: bool = True) -> ModelSource:
    """A registry name (untrained weights) or a ``.safetensors`` checkpoint (trained weights).

    With ``deploy`` the entry's inference form is applied (``ModelEntry.deploy``), so exports and
    profiles measure what would be deployed.
    """
    if target.endswith(".safetensors") or (_exists(target, "file")
                                           and not target.endswith(".onnx")):
        model, ckpt = load_checkpoint(target)
        source = ModelSource(model, ckpt.entry, ckpt.variant, ckpt)
    elif looks_like_path(target) and not _exists(target):
        raise UsageError(f"{target} does not exist",
                         hint="give a checkpoint, an artifact folder or a model: "
                              f"{', '.join(all_names())}")
    else:
        entry, variant = split_name(target)
        source = ModelSource(entry.build(variant).eval(), entry, variant)
    if deploy and source.entry.deploy is not None:
        source.model = source.entry.deploy(source.model.eval()).eval()
    return source
