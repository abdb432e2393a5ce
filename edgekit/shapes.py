"""The widths of a model's layers, recorded in checkpoints and applied when one is rebuilt.

A net whose channels were removed (Spik4lite's physical pruning) no longer has the shapes its
config builds. Its checkpoint records every conv, linear and BatchNorm layer's shape, and loading
resizes the freshly built layers to match before the weights go in, so a pruned checkpoint
reloads without the command that made it. The new tensors are empty: the checkpoint's weights
fill every one of them (``load_state_dict(strict=True)``).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from edgekit.errors import UsageError

NORMS = nn.modules.batchnorm._BatchNorm
# conv: [in, out, groups, bias]; linear: [in, out, bias]; batchnorm: [features]
_LENGTHS = {"conv": 4, "linear": 3, "norm": 1}


def _kind(module: nn.Module) -> str | None:
    if isinstance(module, nn.Conv2d):
        return "conv"
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, NORMS) and module.affine and module.track_running_stats:
        return "norm"
    return None


def _shape(module: nn.Module) -> list[int]:
    if isinstance(module, nn.Conv2d):
        return [module.in_channels, module.out_channels, module.groups,
                int(module.bias is not None)]
    if isinstance(module, nn.Linear):
        return [module.in_features, module.out_features, int(module.bias is not None)]
    return [module.num_features]


def layer_shapes(model: nn.Module) -> dict[str, dict[str, Any]]:
    """``{name: {"kind": ..., "shape": [...]}}`` for every conv, linear and BatchNorm layer."""
    return {name: {"kind": kind, "shape": _shape(m)} for name, m in model.named_modules()
            if (kind := _kind(m)) is not None}


def check_shapes(shapes: Any, where: str) -> dict[str, dict[str, Any]]:
    """The recorded shapes as read from JSON, checked; one line naming the bad entry."""
    if not isinstance(shapes, dict):
        raise UsageError(f"{where}: field 'shapes' must be an object")
    for name, record in shapes.items():
        ok = (isinstance(record, dict) and record.get("kind") in _LENGTHS
              and isinstance(record.get("shape"), list)
              and len(record["shape"]) == _LENGTHS[record["kind"]]
              and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                      for v in record["shape"]))
        if not ok:
            raise UsageError(f"{where}: shapes['{name}'] is not a conv/linear/norm shape record")
    return shapes


def _empty(module: nn.Module, attr: str, shape: tuple[int, ...], parameter: bool) -> None:
    old = getattr(module, attr)
    tensor = torch.empty(shape, dtype=old.dtype if old is not None else torch.float32)
    setattr(module, attr, nn.Parameter(tensor) if parameter else tensor)


def apply_shapes(model: nn.Module, shapes: dict[str, dict[str, Any]]) -> int:
    """Resize every layer whose recorded shape differs from the built one; returns how many.
    A recorded layer the model lacks (or holds as another kind) is left to the weights' own
    check, which names the model they do not fit."""
    changed = 0
    for name, record in shapes.items():
        try:
            module = model.get_submodule(name)
        except AttributeError:
            continue
        if _kind(module) != record["kind"] or _shape(module) == record["shape"]:
            continue
        changed += 1
        if record["kind"] == "norm":
            (n,) = record["shape"]
            for attr in ("weight", "bias"):
                _empty(module, attr, (n,), parameter=True)
            for attr in ("running_mean", "running_var"):
                _empty(module, attr, (n,), parameter=False)
            module.num_features = n
            continue
        if record["kind"] == "conv":
            cin, cout, groups, bias = record["shape"]
            if groups < 1 or cin % groups or cout % groups:
                raise UsageError(f"recorded conv '{name}': {cin}->{cout} in {groups} groups")
            _empty(module, "weight", (cout, cin // groups, *module.kernel_size), parameter=True)
            module.in_channels, module.out_channels, module.groups = cin, cout, groups
        else:
            cin, cout, bias = record["shape"]
            _empty(module, "weight", (cout, cin), parameter=True)
            module.in_features, module.out_features = cin, cout
        if bias:
            _empty(module, "bias", (cout,), parameter=True)
        else:
            module.bias = None
    return changed
