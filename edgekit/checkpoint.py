"""Checkpoints: weights in safetensors, a JSON sidecar with the entry, variant and config.

``model.safetensors`` + ``model.json``: the sidecar is enough to rebuild the module without the
command line that trained it, and it records the weights' SHA-256 so a corrupt or swapped file is
caught before it is loaded. Nothing is ever unpickled.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from edgekit.errors import UsageError
from edgekit.fileio import atomic_write_bytes, atomic_write_json, read_json_object
from edgekit.registry import VARIANT_SEPARATOR, ModelEntry, split_name

SIDECAR_FORMAT = "edgekit-checkpoint/1"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    entry: ModelEntry
    variant: str | None
    config: dict[str, Any]
    metrics: dict[str, Any]
    info: dict[str, Any]

    @property
    def model_name(self) -> str:
        return self.entry.name + (f"{VARIANT_SEPARATOR}{self.variant}" if self.variant else "")


def sidecar_path(path: str | Path) -> Path:
    return Path(path).with_suffix(".json")


def save_checkpoint(model: nn.Module, path: str | Path, metrics: dict[str, Any] | None = None,
                    extra: dict[str, Any] | None = None) -> Path:
    """Write ``path`` (.safetensors) and its sidecar atomically; the model must come from the
    registry (it carries ``edgekit_cfg``)."""
    from safetensors.torch import save

    cfg = getattr(model, "edgekit_cfg", None)
    if cfg is None:
        raise UsageError("only models built from the edgekit registry can be checkpointed")
    path = Path(path)
    if path.suffix != ".safetensors":
        raise UsageError(f"checkpoint path {path} must end in .safetensors")
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    blob = save(state, metadata={"format": SIDECAR_FORMAT, "entry": cfg["entry"]})
    atomic_write_bytes(path, blob)
    sidecar = {
        "format": SIDECAR_FORMAT,
        "entry": cfg["entry"],
        "variant": cfg["variant"],
        "config": dict(cfg["config"]),
        "metrics": metrics or {},
        "weights_sha256": hashlib.sha256(blob).hexdigest(),
        **(extra or {}),
    }
    atomic_write_json(sidecar_path(path), sidecar)
    return path


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read and check the sidecar (not the weights)."""
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise UsageError(f"checkpoint {path} does not exist")
    if not side.is_file():
        raise UsageError(f"checkpoint {path} has no sidecar {side.name}",
                         hint="checkpoints are written by 'edgekit train'")
    info = read_json_object(side)
    if info.get("format") != SIDECAR_FORMAT:
        raise UsageError(f"{side}: not an edgekit checkpoint sidecar")
    name = info["entry"] + (f"{VARIANT_SEPARATOR}{info['variant']}" if info.get("variant") else "")
    entry, variant = split_name(name)
    return Checkpoint(path, entry, variant, dict(info["config"]), info.get("metrics", {}), info)


def load_checkpoint(path: str | Path,
                    expect_entry: str | None = None) -> tuple[nn.Module, Checkpoint]:
    """Rebuild the module from the sidecar and load its weights (checksum verified first)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    ckpt = read_checkpoint(path)
    if expect_entry is not None and ckpt.entry.name != expect_entry:
        raise UsageError(f"checkpoint {ckpt.path} holds '{ckpt.entry.name}', not '{expect_entry}'")
    try:
        blob = ckpt.path.read_bytes()
    except OSError as exc:
        raise UsageError(f"checkpoint {ckpt.path}: cannot read: {exc.strerror}") from exc
    if hashlib.sha256(blob).hexdigest() != ckpt.info.get("weights_sha256"):
        raise UsageError(f"checkpoint {ckpt.path} does not match the checksum in its sidecar",
                         hint="the file is corrupt or was replaced; retrain or restore it")
    try:
        state = load(blob)
    except SafetensorError as exc:
        raise UsageError(f"checkpoint {ckpt.path}: unreadable safetensors ({exc})") from exc
    model = ckpt.entry.build(ckpt.variant, **_config_overrides(ckpt))
    missing, unexpected = _state_mismatch(model, state)
    if missing or unexpected:
        raise UsageError(f"checkpoint {ckpt.path} does not fit model '{ckpt.model_name}': "
                         f"{len(missing)} missing and {len(unexpected)} unexpected tensors"
                         + (f" (e.g. {(missing or unexpected)[0]})" if missing or unexpected
                            else ""))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1].strip()
        raise UsageError(f"checkpoint {ckpt.path} does not fit model '{ckpt.model_name}': "
                         f"{first}") from exc
    return model.eval(), ckpt


def _config_overrides(ckpt: Checkpoint) -> dict[str, Any]:
    """Sidecar config keys that differ from the variant's defaults (JSON turns tuples into
    lists)."""
    base = ckpt.entry.config_for(ckpt.variant)
    return {k: v for k, v in ckpt.config.items() if k in base and _norm(base[k]) != _norm(v)}


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _state_mismatch(model: nn.Module, state: dict[str, Any]) -> tuple[list[str], list[str]]:
    own = set(model.state_dict())
    return sorted(own - set(state)), sorted(set(state) - own)
