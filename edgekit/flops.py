"""Parameters and FLOPs of a model, from torch's own flop counter.

``torch.utils.flop_counter.FlopCounterMode`` counts 2 FLOPs per multiply-accumulate for
matmuls and convolutions (grouped and depthwise included); element-wise ops are not counted, as in
fvcore and most papers' tables.
"""
from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from edgekit.errors import MissingDependencyError

if TYPE_CHECKING:
    from edgekit.registry import ModelEntry

COST_CACHE = "model-costs.json"  # under $EDGEKIT_HOME


@dataclass(frozen=True)
class ModelCost:
    params: int
    flops: int  # per forward pass of the given inputs (the whole batch)
    batch: int

    @property
    def flops_per_sample(self) -> float:
        return self.flops / max(1, self.batch)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.inference_mode()
def model_cost(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> ModelCost:
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()
    with FlopCounterMode(display=False) as counter:
        model(*inputs)
    model.train(was_training)
    batch = int(inputs[0].shape[0]) if inputs and inputs[0].dim() else 1
    return ModelCost(count_params(model), int(counter.get_total_flops()), batch)


def _cache_key(entry: ModelEntry, variant: str | None) -> str:
    """Changes with the config, the edgekit version and the builder's source file, so an edited
    model is counted again; the cache is never trusted past what built its figures."""
    from edgekit import __version__
    from edgekit.registry import config_digest

    source = inspect.getsourcefile(entry.builder)
    code = hashlib.sha256(Path(source).read_bytes()).hexdigest()[:12] if source else "unknown"
    return (f"{entry.name}:{variant or ''}:{config_digest(entry.config_for(variant))}:"
            f"{__version__}:{code}:{'x'.join(map(str, entry.task.input_shape))}")


def _read_cache(path: Path) -> dict[str, Any]:
    """The cache's entries; a missing or corrupt file counts as empty and is rewritten."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cached(record: Any) -> ModelCost | None:
    fields = ("params", "flops", "batch")
    if not isinstance(record, dict) or not all(type(record.get(f)) is int for f in fields):
        return None
    return ModelCost(record["params"], record["flops"], record["batch"])


def entry_costs(pairs: list[tuple[ModelEntry, str | None]]
                ) -> list[ModelCost | MissingDependencyError]:
    """Parameters and FLOPs of each (registry entry, variant), from ``$EDGEKIT_HOME``'s cache
    where it holds them; building every model to count them takes seconds. An entry whose
    optional library is absent gets the error in its place, so a listing can still show it."""
    from edgekit.fileio import atomic_write_json
    from edgekit.paths import edgekit_home

    path = edgekit_home() / COST_CACHE
    cache = _read_cache(path)
    costs, changed = [], False
    for entry, variant in pairs:
        key = _cache_key(entry, variant)
        cost = _cached(cache.get(key))
        if cost is None:
            try:
                cost = model_cost(entry.build(variant), entry.example_inputs(batch=1))
            except MissingDependencyError as exc:
                costs.append(exc)
                continue
            cache[key] = {"params": cost.params, "flops": cost.flops, "batch": cost.batch}
            changed = True
        costs.append(cost)
    if changed:
        atomic_write_json(path, cache)
    return costs
