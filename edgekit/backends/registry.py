"""The backends edgekit can profile on: each backend's file registers itself here with one call.

A ``BackendSpec`` tells the profiler everything it would otherwise learn by branching on the
backend's name: which ``--provider`` values it takes, which artifact format it loads (or that it
runs the PyTorch module itself), how to open a runner, how to convert an ONNX artifact into its
own format, and how to check in one line that it can run on this machine. Adding a backend is one
file in ``edgekit/backends/`` (the package imports every module in it).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.extensions import Registry

if TYPE_CHECKING:
    from torch import nn

    from edgekit.backends.base import Runner


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What a backend needs from the profile settings to open or build a runner."""

    threads: int
    provider: str | None  # None: the backend's default (cpu)
    precision: str
    batch: int
    cuda_graph: bool = False


@dataclass(frozen=True, kw_only=True)
class BackendSpec:
    name: str  # the --backend name
    providers: tuple[str, ...]  # the --provider values it takes; () takes none
    artifact_format: str | None  # the artifact format it loads; None: it runs the nn.Module
    file_label: str = ""  # artifact backends: how reports name the model file ("ONNX file")
    options: tuple[str, ...] = ()  # backend-only settings it honours: ("cuda_graph",)
    # Fail in one line where it cannot run here: (provider) -> None.
    check: Callable[[str | None], None]
    # (module, input names, output names, options) -> runner; backends with artifact_format=None.
    open_module: (Callable[[nn.Module, Sequence[str], Sequence[str], RunOptions], Runner]
                  | None) = None
    # (model file of its artifact format, options) -> runner.
    open_file: Callable[[Path, RunOptions], Runner] | None = None
    # (ONNX artifact, output folder, options) -> folder of an artifact in its own format.
    build: Callable[[Any, Path, RunOptions], Path] | None = None


# The package imports every backend file, which registers itself.
_BACKENDS: Registry[BackendSpec] = Registry("backend", builtins=("edgekit.backends",))


def register_backend(spec: BackendSpec) -> BackendSpec:
    if (spec.artifact_format is None) != (spec.open_file is None) or \
            (spec.artifact_format is None) == (spec.open_module is None):
        raise ValueError(f"backend '{spec.name}' opens an artifact (artifact_format, open_file) "
                         f"or a module (open_module), one of the two")
    return _BACKENDS.add(spec.name, spec)


def list_backends() -> list[BackendSpec]:
    return _BACKENDS.entries(sort=True)


def backend_names() -> tuple[str, ...]:
    return tuple(s.name for s in list_backends())


def get_backend(name: str) -> BackendSpec:
    return _BACKENDS.get(name)
