"""Checkpoints: one safetensors file holding the weights and, in its metadata, the entry,
variant, config, metrics and the weights' SHA-256.

The metadata is enough to rebuild the module without the command line that trained it (its
``shapes`` record the width of every layer, so a net whose channels were removed rebuilds narrow:
``edgekit/shapes.py``), and the checksum catches a corrupt or swapped file before it is loaded.
Being one file, a checkpoint is written in one atomic step and never touches a neighbour (an
earlier layout kept a ``NAME.json`` sidecar beside the weights; such checkpoints are still read).
Nothing is ever unpickled.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.fileio import atomic_write_bytes, read_json_object, register_file_kind
from edgekit.registry import VARIANT_SEPARATOR, ModelEntry, split_name
from edgekit.shapes import apply_shapes, check_shapes, layer_shapes

CHECKPOINT_FORMAT = "edgekit-checkpoint/2"  # the record lives in the safetensors metadata
METADATA_KEY = "edgekit"  # metadata key whose value is the record as JSON
LEGACY_FORMAT = "edgekit-checkpoint/1"  # NAME.safetensors + NAME.json sidecar
# The record's fields and their JSON types (``variant`` may also be null).
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": str, "entry": str, "variant": (str, type(None)), "config": dict, "metrics": dict,
    "weights_sha256": str,
}


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


def _legacy_sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def weights_digest(state: dict[str, Any]) -> str:
    """SHA-256 of the tensors serialised as safetensors without metadata (deterministic: names
    sorted), so the checksum can travel inside the file it checks."""
    from safetensors.torch import save

    return hashlib.sha256(save(state)).hexdigest()


def save_checkpoint(model: nn.Module, path: str | Path, metrics: dict[str, Any] | None = None,
                    extra: dict[str, Any] | None = None) -> Path:
    """Write ``path`` (.safetensors), weights and record in one atomic step; the model must come
    from the registry (it carries ``edgekit_cfg``) and its weights must be finite."""
    from safetensors.torch import save

    cfg = getattr(model, "edgekit_cfg", None)
    if cfg is None:
        raise UsageError("only models built from the edgekit registry can be checkpointed")
    path = Path(path)
    if path.suffix != ".safetensors":
        raise UsageError(f"checkpoint path {path} must end in .safetensors")
    found = _non_finite(model)
    if found:  # every load would refuse it, so it is not written (nor is an older file replaced)
        raise UsageError(f"not writing {path}: the weights hold nan or inf ({found}); the "
                         "training diverged", hint="lower the learning rate or train fewer "
                         "epochs, then train again")
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    record = {
        "format": CHECKPOINT_FORMAT,
        "entry": cfg["entry"],
        "variant": cfg["variant"],
        "config": dict(cfg["config"]),
        "metrics": metrics or {},
        "weights_sha256": weights_digest(state),
        "shapes": layer_shapes(model),  # a pruned net's widths differ from its config's
        **(extra or {}),
    }
    blob = save(state, metadata={"format": "pt", METADATA_KEY: json.dumps(record)})
    atomic_write_bytes(path, blob)
    return path


def _metadata(path: Path) -> dict[str, str]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return handle.metadata() or {}
    except (SafetensorError, OSError) as exc:
        raise UsageError(f"checkpoint {path}: unreadable safetensors ({exc})") from exc


def _is_checkpoint(path: Path) -> bool:
    """A checkpoint ``save_checkpoint`` wrote (its record in the metadata), so ``train -o`` may
    replace it without --force; a legacy one has its format in the metadata."""
    metadata = _metadata(path)
    if METADATA_KEY in metadata:
        return json.loads(metadata[METADATA_KEY]).get("format") == CHECKPOINT_FORMAT
    return metadata.get("format") == LEGACY_FORMAT


register_file_kind("checkpoint", _is_checkpoint)


def _check_record(info: dict[str, Any], where: str) -> None:
    for field, kind in _FIELDS.items():
        if field not in info:
            raise UsageError(f"{where}: field '{field}' is missing",
                             hint="checkpoints are written by 'edgekit train'")
        if not isinstance(info[field], kind) or isinstance(info[field], bool):
            names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise UsageError(f"{where}: field '{field}' must be {names}, "
                             f"not {type(info[field]).__name__}")


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read and check the record (not the weights)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"checkpoint {path} does not exist")
    metadata = _metadata(path)
    if METADATA_KEY in metadata:
        where = f"{path} (metadata '{METADATA_KEY}')"
        try:
            info = json.loads(metadata[METADATA_KEY])
        except ValueError as exc:
            raise UsageError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(info, dict):
            raise UsageError(f"{where}: expected a JSON object")
        expected = CHECKPOINT_FORMAT
    else:
        side = _legacy_sidecar(path)
        if not side.is_file():
            raise UsageError(f"{path} is not an edgekit checkpoint (no '{METADATA_KEY}' metadata)",
                             hint="checkpoints are written by 'edgekit train'")
        where, info, expected = str(side), read_json_object(side), LEGACY_FORMAT
    if info.get("format") != expected:
        raise UsageError(f"{where}: not an edgekit checkpoint record (format "
                         f"{info.get('format')!r}, expected {expected!r})")
    _check_record(info, where)
    if "shapes" in info:
        check_shapes(info["shapes"], where)
    name = info["entry"] + (f"{VARIANT_SEPARATOR}{info['variant']}" if info["variant"] else "")
    entry, variant = split_name(name)
    return Checkpoint(path, entry, variant, dict(info["config"]), info["metrics"], info)


def load_checkpoint(path: str | Path,
                    expect_entry: str | None = None) -> tuple[nn.Module, Checkpoint]:
    """Rebuild the module from the record and load its weights (checksum verified first)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    ckpt = read_checkpoint(path)
    if expect_entry is not None and ckpt.entry.name != expect_entry:
        raise UsageError(f"checkpoint {ckpt.path} holds '{ckpt.entry.name}', not '{expect_entry}'")
    try:
        blob = ckpt.path.read_bytes()
    except OSError as exc:
        raise UsageError(f"checkpoint {ckpt.path}: cannot read: {exc.strerror}") from exc
    legacy = ckpt.info["format"] == LEGACY_FORMAT  # the sidecar hashed the whole file
    if legacy and hashlib.sha256(blob).hexdigest() != ckpt.info["weights_sha256"]:
        raise UsageError(f"checkpoint {ckpt.path} does not match the checksum in its sidecar",
                         hint="the file is corrupt or was replaced; retrain or restore it")
    try:
        state = load(blob)
    except SafetensorError as exc:
        raise UsageError(f"checkpoint {ckpt.path}: unreadable safetensors ({exc})") from exc
    if not legacy and weights_digest(state) != ckpt.info["weights_sha256"]:
        raise UsageError(f"checkpoint {ckpt.path} does not match the checksum in its metadata",
                         hint="the file is corrupt or was replaced; retrain or restore it")
    overrides = _config_overrides(ckpt)
    try:
        model = ckpt.entry.build(ckpt.variant, **overrides)
    except (RuntimeError, TypeError, ValueError) as exc:  # the builder's own refusal
        raise UsageError(f"checkpoint {ckpt.path}: its config does not build "
                         f"'{ckpt.model_name}' ({' '.join(str(exc).split())[:200]})") from exc
    if "shapes" in ckpt.info:
        try:
            apply_shapes(model, ckpt.info["shapes"])
        except UsageError as exc:
            raise UsageError(f"checkpoint {ckpt.path}: {exc}") from exc
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
    _check_finite(model, ckpt.path)
    return model.eval(), ckpt


def _check_finite(model: nn.Module, path: Path) -> None:
    """Weights that hold NaN or infinity (a diverged training) are refused here, where every
    use of a checkpoint passes (export, profile, a teacher, a start to prune): a net of them
    computes nothing, and a spiking one fails silently, its neurons never firing."""
    found = _non_finite(model)
    if found:
        raise UsageError(f"checkpoint {path} holds non-finite weights (nan or inf): {found}",
                         hint="retrain it; the training that wrote it diverged")


def _non_finite(model: nn.Module) -> str:
    """'' if every parameter is finite, else how many values in how many tensors are not.
    Buffers may hold infinities on purpose (masks), so only parameters are checked."""
    bad = [(name, int((~torch.isfinite(p)).sum())) for name, p in model.named_parameters()
           if not torch.isfinite(p).all()]
    if not bad:
        return ""
    return (f"{sum(n for _, n in bad)} value(s) in {len(bad)} tensor(s), e.g. "
            f"'{bad[0][0]}'")


def _config_overrides(ckpt: Checkpoint) -> dict[str, Any]:
    """Recorded config keys that differ from the variant's defaults (JSON turns tuples into
    lists), each checked against its default, so a forged record is one line, not a builder's
    crash."""
    base = ckpt.entry.config_for(ckpt.variant)
    out = {k: v for k, v in ckpt.config.items() if k in base and _norm(base[k]) != _norm(v)}
    for key, value in out.items():
        if not _like(base[key], value):
            raise UsageError(f"checkpoint {ckpt.path} (metadata '{METADATA_KEY}'): field "
                             f"'config.{key}' is {json.dumps(value)[:80]}, not like the "
                             f"default {json.dumps(_norm(base[key]))[:80]}",
                             hint="checkpoints are written by 'edgekit train'")
    return out


def _like(default: Any, value: Any) -> bool:
    """``value`` has ``default``'s JSON type (element by element in a list); an integer that is
    positive by default (a width, a count) stays positive."""
    if default is None or isinstance(default, dict):
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return (isinstance(value, int) and not isinstance(value, bool)
                and (default <= 0 or value > 0))
    if isinstance(default, float):
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    if isinstance(default, str):
        return isinstance(value, str)
    if not isinstance(value, list):
        return False
    if not default:
        return True
    if all(isinstance(d, (tuple, list)) for d in default):  # rows of a pattern, any length
        return all(isinstance(v, list) for v in value)
    if len({type(d) for d in default}) == 1:  # widths, names: any number of them
        return all(_like(default[0], v) for v in value)
    return len(value) == len(default) and all(
        _like(d, v) for d, v in zip(default, value, strict=True))


def _norm(value: Any) -> Any:
    """``value`` as JSON gives it back: tuples, at any depth, as lists."""
    return [_norm(v) for v in value] if isinstance(value, (tuple, list)) else value


def _state_mismatch(model: nn.Module, state: dict[str, Any]) -> tuple[list[str], list[str]]:
    own = set(model.state_dict())
    return sorted(own - set(state)), sorted(set(state) - own)
