"""Optional dependencies, imported where they are used and named by the extra that installs them.

edgekit's core installs neither ONNX Runtime (its CPU and GPU builds share one package folder, so
the build is the user's choice: the ``cpu`` or ``gpu`` extra) nor SpikingJelly (the ``spiking``
extra). Code that needs one asks for it here, and its absence is one MissingDependencyError line
that names the extra, not an ImportError from deep inside a call.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from edgekit.errors import MissingDependencyError


@dataclass(frozen=True)
class Extra:
    """A pyproject extra: its name and the line of advice that installs it."""

    name: str
    hint: str


ONNXRUNTIME = Extra("cpu", "pip install 'edgekit[cpu]' ('edgekit[gpu]' on an NVIDIA GPU)")
FLEET = Extra("fleet", "pip install 'edgekit[fleet]' on the client and on every device")
SPIKING = Extra("spiking", "pip install 'edgekit[spiking]', or `make install` on a CPU-only "
                           "machine: it skips the CUDA torch that SpikingJelly's metadata pulls")


def require(module: str, extra: Extra, feature: str) -> ModuleType:
    """``module`` imported, or a MissingDependencyError naming ``extra``.

    Any missing module on the way counts (SpikingJelly without loguru is as unusable as no
    SpikingJelly), and the message names the one that is missing.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        raise MissingDependencyError(
            f"{feature} needs '{missing}' (the '{extra.name}' extra), which is not installed",
            hint=extra.hint) from None


class LazyModule:
    """A stand-in for a module that is imported on first attribute access.

    Model files refer to ``layer.Conv2d`` and the like at import time only inside functions, so
    registering a model never imports its library; building one does, through ``require``.
    """

    def __init__(self, module: str, extra: Extra, feature: str,
                 prepare: Callable[[ModuleType], None] | None = None) -> None:
        self._args = (module, extra, feature)
        self._prepare = prepare  # run once, on the first import through this stand-in

    def __getattr__(self, name: str) -> Any:
        module = require(*self._args)
        if self._prepare is not None:
            prepare, self._prepare = self._prepare, None
            prepare(module)
        return getattr(module, name)

    def __repr__(self) -> str:
        return f"<lazy module {self._args[0]!r}>"
