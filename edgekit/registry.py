"""The model registry: one entry per model, one factory, named variants (as timm's registry).

Adding a model is adding an entry with ``@register_model``; neither the factory nor the CLI
special-cases a model by name. A name is ``ENTRY`` or ``ENTRY:VARIANT``.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from edgekit.errors import UnknownNameError, UsageError
from edgekit.extensions import Registry

VARIANT_SEPARATOR = ":"


@dataclass(frozen=True)
class TaskSpec:
    """The input contract and what the model is scored on."""

    dataset: str  # a dataset name known to edgekit.data ("digits")
    metric: str  # "accuracy"
    input_shape: tuple[int, ...]  # one sample, without the batch dimension
    num_classes: int
    input_dtype: str = "float32"
    input_name: str = "input"
    output_names: tuple[str, ...] = ("logits",)
    higher_is_better: bool = True  # False for error metrics (MPJPE), so Pareto fronts flip


@dataclass(frozen=True)
class ExportSettings:
    """Per-model export settings are data (as optimum's OnnxConfig)."""

    opset: int = 18
    atol: float = 1e-4
    rtol: float = 1e-3
    dynamo: bool = True  # torch.export-based exporter; False uses the TorchScript exporter


@dataclass(frozen=True)
class StreamSpec:
    """A model's streaming form (``edgekit export --stream``): one step that takes the state the
    model carries between calls as extra inputs and returns the next state as extra outputs, so
    a deployed graph keeps its memory across calls as the model does in PyTorch.

    ``step(model)`` is a module ``(*inputs, *state) -> (*outputs, *next_state)``;
    ``initial_state(model, batch)`` the state a fresh stream starts from; ``state_names`` the
    graph inputs that carry it (the outputs are ``<name>_out``)."""

    step: Callable[[nn.Module], nn.Module]
    initial_state: Callable[[nn.Module, int], tuple[torch.Tensor, ...]]
    state_names: tuple[str, ...]
    description: str  # what the state is, for the manifest and --help

    @property
    def next_names(self) -> tuple[str, ...]:
        return tuple(f"{name}_out" for name in self.state_names)


@dataclass(frozen=True)
class TrainSettings:
    epochs: int = 30
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    builder: Callable[..., nn.Module]
    config: Mapping[str, Any]
    task: TaskSpec
    description: str
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    paper: str | None = None
    export: ExportSettings = ExportSettings()
    train: TrainSettings = TrainSettings()
    spiking: bool = False
    # The inference form of a trained model (reparameterisation, BN folding), applied before
    # export and profiling so users measure what they would deploy; outputs must not change.
    deploy: Callable[[nn.Module], nn.Module] | None = None
    # Task-specific training and scoring; None means classification (cross-entropy, accuracy).
    # trainer(entry, dataset, variant=, epochs=, seed=, progress=, model=, seconds=)
    # -> TrainResult (seconds: a time budget or None);
    # evaluator(model, x_test, y_test) -> the task metric.
    trainer: Callable[..., Any] | None = None
    evaluator: Callable[[nn.Module, Any, Any], float] | None = None
    stream: StreamSpec | None = None  # a state-carrying step to export (``--stream``)

    def config_for(self, variant: str | None = None, **overrides: Any) -> dict[str, Any]:
        """The full config of a variant, with explicit overrides applied last."""
        cfg = dict(self.config)
        if variant is not None:
            if variant not in self.variants:
                raise UnknownNameError(f"variant of '{self.name}'", variant, self.variants)
            cfg.update(self.variants[variant])
        unknown = set(overrides) - set(cfg)
        if unknown:
            raise UsageError(f"unknown config keys for '{self.name}': {', '.join(sorted(unknown))}",
                             hint=f"valid: {', '.join(sorted(cfg))}")
        cfg.update(overrides)
        return cfg

    def build(self, variant: str | None = None, **overrides: Any) -> nn.Module:
        """Build the module and attach its provenance as ``model.edgekit_cfg``."""
        cfg = self.config_for(variant, **overrides)
        model = self.builder(**cfg)
        model.edgekit_cfg = {  # type: ignore[assignment]
            "entry": self.name, "variant": variant, "config": cfg, "task": self.task,
            "paper": self.paper, "export": self.export,
        }
        return model

    def example_inputs(self, batch: int = 1, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Inputs in the model's contract; deterministic so validations are reproducible."""
        gen = torch.Generator().manual_seed(seed)
        dtype = getattr(torch, self.task.input_dtype)
        return (torch.rand((batch, *self.task.input_shape), generator=gen, dtype=dtype),)


# Each method's package registers its entries.
_REGISTRY: Registry[ModelEntry] = Registry("model", builtins=("edgekit.methods",))


def register_model(entry: ModelEntry) -> ModelEntry:
    if VARIANT_SEPARATOR in entry.name:
        raise ValueError(f"model name '{entry.name}' may not contain '{VARIANT_SEPARATOR}'")
    return _REGISTRY.add(entry.name, entry)


def list_models(family: str | None = None) -> list[ModelEntry]:
    """Every entry, or those of one method family; an unknown family lists the valid ones."""
    entries = _REGISTRY.entries(sort=True)
    if family is None:
        return entries
    families = {e.family for e in entries}
    if family not in families:
        raise UnknownNameError("model family", family, families)
    return [e for e in entries if e.family == family]


def all_names() -> list[str]:
    """Every entry and every ``entry:variant``, for listings and error messages."""
    names = []
    for entry in list_models():
        names.append(entry.name)
        names.extend(f"{entry.name}{VARIANT_SEPARATOR}{v}" for v in entry.variants)
    return names


def get_entry(name: str) -> ModelEntry:
    return _REGISTRY.get(name)


def split_name(name: str) -> tuple[ModelEntry, str | None]:
    """``"ds-cnn:wide"`` -> (entry, "wide"); unknown entries and variants list the valid names."""
    base, separator, variant = name.partition(VARIANT_SEPARATOR)
    if base not in _REGISTRY:
        raise UnknownNameError("model", name, all_names())
    entry = _REGISTRY.get(base)
    if separator and variant not in entry.variants:  # "ds-cnn:" names no variant either
        raise UnknownNameError("model", name, all_names())
    return entry, variant or None


def create_model(name: str, **overrides: Any) -> nn.Module:
    """The one factory: ``create_model("ds-cnn:wide")``."""
    entry, variant = split_name(name)
    return entry.build(variant, **overrides)


def config_digest(config: Mapping[str, Any]) -> str:
    """A short stable hash of a config, for cache keys."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
