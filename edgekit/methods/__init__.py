"""The built-in methods, one folder each: models, data, task hooks, runtime and CLI commands.

Importing this package registers every model entry (each method's ``__init__`` registers its
own). Generic code never imports a method by name; it asks this package for what the methods
contribute (``cli_commands``).
"""
from __future__ import annotations

import importlib

import click

# Each name is a subpackage of edgekit.methods; a method with its own CLI verbs has a ``cli``
# module whose ``COMMANDS`` lists click commands or groups.
METHODS = ("reference", "ssa", "wbmm", "zipmoe", "astra", "wifi_mamba", "spik4lite")

for _name in METHODS:
    importlib.import_module(f"{__name__}.{_name}")


def cli_commands() -> list[click.Command]:
    """Every command or group the methods add to ``edgekit``."""
    commands: list[click.Command] = []
    for name in METHODS:
        try:
            module = importlib.import_module(f"{__name__}.{name}.cli")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}.cli":
                raise
            continue
        commands.extend(module.COMMANDS)
    return commands
