"""The built-in methods, one folder each: models, data, task hooks, runtime and CLI commands.

Importing this package registers every model entry (each method's ``__init__`` registers its
own). Generic code never imports a method by name; it asks this package for what the methods
contribute (``cli_commands``).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click

from edgekit.registry import ModelEntry

# Each name is a subpackage of edgekit.methods; a method with its own CLI verbs has a ``cli``
# module whose ``COMMANDS`` lists click commands or groups, and a method that trains any entry
# its own way (Spik4lite) lists ``TrainMode``s in that module's ``TRAIN_MODES``.
METHODS = ("reference", "ssa", "wbmm", "zipmoe", "astra", "wifi_mamba", "spik4lite")

for _name in METHODS:
    importlib.import_module(f"{__name__}.{_name}")


@dataclass(frozen=True)
class TrainMode:
    """A method's way of training any entry, switched on by its own ``edgekit train`` options:
    ``select(entry, values of those options)`` returns a trainer for ``edgekit.training.train``
    (its ``trainer=``), or None when the options leave it off."""

    options: tuple[click.Option, ...]
    select: Callable[[ModelEntry, Mapping[str, Any]], Callable[..., Any] | None]


def _cli_modules() -> list[Any]:
    modules = []
    for name in METHODS:
        try:
            modules.append(importlib.import_module(f"{__name__}.{name}.cli"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}.cli":
                raise
    return modules


def cli_commands() -> list[click.Command]:
    """Every command or group the methods add to ``edgekit``."""
    return [command for module in _cli_modules() for command in getattr(module, "COMMANDS", ())]


def train_modes() -> list[TrainMode]:
    """Every training mode the methods add to ``edgekit train``."""
    return [mode for module in _cli_modules() for mode in getattr(module, "TRAIN_MODES", ())]
