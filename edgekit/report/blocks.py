"""What a section is made of: tables, figures and notes, as data (the page lays them out)."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgekit.schema import Schema


@dataclass(frozen=True)
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    caption: str = ""
    folded: str = ""  # shown folded under this summary (a long listing), or open when empty


@dataclass(frozen=True)
class Figure:
    """A plotly figure; ``name`` makes its element id unique and readable."""

    name: str
    figure: Any  # plotly.graph_objects.Figure (imported where figures are made)


@dataclass(frozen=True)
class Note:
    """A paragraph; ``role`` marks a method's claim or verdict (the page styles them)."""

    text: str
    role: str = "note"  # note | claim | verdict-met | verdict-not-met | verdict-unmeasurable


Block = Table | Figure | Note


@dataclass(frozen=True)
class Section:
    key: str  # the element id of the section
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass(frozen=True)
class Result:
    """One JSON report: where it was read from, its kind and the document itself."""

    path: str
    kind: str
    doc: dict[str, Any]


@dataclass(frozen=True)
class SectionKind:
    """A section of the page: the report kinds it shows, each with the schema that checks a
    document's own fields before ``render`` reads them (a kind ending in ``/`` is a prefix:
    ``benchmark/`` matches every benchmark)."""

    key: str
    title: str
    schemas: Mapping[str, Schema]
    render: Callable[[list[Result]], list[Block]]

    def schema_for(self, kind: str) -> Schema | None:
        for k, schema in self.schemas.items():
            if kind == k or (k.endswith("/") and kind.startswith(k)):
                return schema
        return None

    def accepts(self, kind: str) -> bool:
        return self.schema_for(kind) is not None


def number(value: Any) -> float | None:
    """A finite figure, or None for a missing one (JSON null, or NaN that Python's json writes)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def fmt(value: Any, spec: str = ".4g", scale: float = 1.0, unit: str = "") -> str:
    """A figure for a table cell; a dash where there is none."""
    x = number(value)
    return "–" if x is None else f"{x * scale:{spec}}{unit}"


def shown_path(path: str) -> str:
    """A result's file as the page names it: its file name, never a (temporary) absolute path."""
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def model_label(row: dict[str, Any]) -> str:
    """A compare row by model: its name without a folder or the checkpoint suffix."""
    return shown_path(str(row["name"])).removesuffix(".safetensors")
