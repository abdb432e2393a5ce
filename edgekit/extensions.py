"""One registry type for every kind of extension: models, datasets, backends, meters, precisions.

Each kind keeps its own spec dataclass and ``register_*`` function (style.md: one file per
extension, timm's ``@register_model``); what they share, registering a name once, finding it with
an error that lists the valid names, listing in a stable order, lives here once. ``load`` imports
the modules that register the built-in entries the first time anything asks; then the plugins
load (``edgekit.plugins``), so every listing and look-up sees what they registered.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from edgekit.errors import UnknownNameError
from edgekit.plugins import load_plugins

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind (``kind`` names it in messages: "backend", "energy meter")."""

    def __init__(self, kind: str, load: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._load = load

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        self._entries[name] = entry
        return entry

    def _loaded(self) -> dict[str, T]:
        if self._load is not None:
            self._load()
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
