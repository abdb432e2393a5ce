"""One registry type for every kind of extension: models, datasets, backends, meters, precisions.

Each kind keeps its own spec dataclass and ``register_*`` function (one file per
extension, as timm's ``@register_model``); what they share, registering a name once, finding it with
an error that lists the valid names, listing in a stable order, lives here once. ``builtins``
names the modules that register the built-in entries; they are imported by name the first time
anything asks (so a registry module never imports the modules that import it), then the plugins
load (``edgekit.plugins``), so every listing and look-up sees what they registered.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Generic, TypeVar

from edgekit.errors import UnknownNameError
from edgekit.plugins import load_plugins

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind (``kind`` names it in messages: "backend", "energy meter")."""

    def __init__(self, kind: str, builtins: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._builtins = builtins  # modules (dotted names) whose import registers the built-ins

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        self._entries[name] = entry
        return entry

    def load_builtins(self) -> None:
        """Import the modules that register the built-in entries (once: Python caches them)."""
        for module in self._builtins:
            importlib.import_module(module)

    def _loaded(self) -> dict[str, T]:
        self.load_builtins()
        load_plugins()
        return self._entries

    def __contains__(self, name: object) -> bool:
        return name in self._loaded()

    def names(self) -> list[str]:
        """In registration order."""
        return list(self._loaded())

    def entries(self, sort: bool = False) -> list[T]:
        """In registration order, or sorted by name."""
        entries = self._loaded()
        return [entries[n] for n in (sorted(entries) if sort else entries)]

    def get(self, name: str, valid: Iterable[str] | None = None) -> T:
        """The entry ``name``; unknown names raise one error listing ``valid`` (default: all)."""
        entries = self._loaded()
        if name not in entries:
            raise UnknownNameError(self.kind, name, list(valid) if valid is not None else entries)
        return entries[name]
