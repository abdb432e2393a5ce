"""A small schema checker for the JSON files edgekit reads (manifests, configs, indexes).

A schema is data: ``Object({"a": INT, "b": Optional(ListOf(STR))})``. ``check(doc, schema,
where)`` walks the document and raises one ``UsageError`` line naming the file and the field's
path, for example ``manifest.json: field 'tensors["w"].shape[1]' must be an integer, got str``.
Fields not in an ``Object`` are allowed (files carry provenance and later additions); a field
declared ``Optional`` may be absent or ``null``. Only types and shapes are checked here; what the
values mean is checked by the code that reads them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edgekit.errors import UsageError


class Schema(ABC):
    """Base: ``problem(value, path)`` returns ``(path, what it must be, the value)`` or None."""

    @abstractmethod
    def problem(self, value: Any, path: str) -> tuple[str, str, Any] | None:
        """The first place ``value`` breaks this schema, or None."""


@dataclass(frozen=True)
class Type(Schema):
    """One of the JSON scalar kinds. ``bool`` is never an integer here, and ``number`` takes
    integers and floats."""

    kinds: tuple[type, ...]
    name: str

    def problem(self, value: Any, path: str) -> tuple[str, str, Any] | None:
        if isinstance(value, bool) and bool not in self.kinds:
            return path, self.name, value
        return None if isinstance(value, self.kinds) else (path, self.name, value)


INT = Type((int,), "an integer")
NUMBER = Type((int, float), "a number")
STR = Type((str,), "a string")
BOOL = Type((bool,), "true or false")
ANY_OBJECT = Type((dict,), "an object")
INT_OR_STR = Type((int, str), "an integer or a string")


@dataclass(frozen=True)
class Optional(Schema):
    """The inner schema, or null (an absent field is fine too, see ``Object``)."""

    inner: Schema

    def problem(self, value: Any, path: str) -> tuple[str, str, Any] | None:
        return None if value is None else self.inner.problem(value, path)


@dataclass(frozen=True)
class ListOf(Schema):
    item: Schema

    def problem(self, value: Any, path: str) -> tuple[str, str, Any] | None:
        if not isinstance(value, list):
            return path, "a list", value
        for i, item in enumerate(value):
            found = self.item.problem(item, f"{path}[{i}]")
            if found:
                return found
        return None


@dataclass(frozen=True)
class MapOf(Schema):
    """An object whose keys are names (tensor names, file names) and values one schema."""

    value: Schema

    def problem(self, value: Any, path: str) -> tuple[str, str, Any] | None:
        if not isinstance(value, dict):
            return path, "an object", value
        for key, item in value.items():
            found = self.value.problem(item, f'{path}["{key}"]')
            if found:
                return found
        return None


@dataclass(frozen=True)
class Object(Schema):
    """Named fields; those wrapped in ``Optional`` may be missing, the others are required."""

    fields: Mapping[str, Schema] = field(default_factory=dict)

    def problem(self, value: Any, path: str) -> tuple[str, str, Any] | None:
        if not isinstance(value, dict):
            return path, "an object", value
        for name, schema in self.fields.items():
            sub = f"{path}.{name}" if path else name
            if name not in value:
                if isinstance(schema, Optional):
                    continue
                return sub, "present", _MISSING
            found = schema.problem(value[name], sub)
            if found:
                return found
        return None


_MISSING = object()


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list",
            dict: "object"}.get(type(value), type(value).__name__)


def check(document: Any, schema: Schema, where: str, hint: str | None = None,
          error: type[UsageError] = UsageError) -> Any:
    """``document`` unchanged when it fits ``schema``, else one ``error`` line naming ``where``
    (the file) and the field."""
    found = schema.problem(document, "")
    if found is None:
        return document
    path, what, value = found
    if value is _MISSING:
        raise error(f"{where}: field '{path}' is missing", hint=hint)
    subject = f"field '{path}'" if path else "the document"
    raise error(f"{where}: {subject} must be {what}, got {_kind(value)}", hint=hint)
