"""Shared by the benchmark scripts: machine description, JSON output, markdown tables."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from edgekit.fileio import atomic_write_json
from edgekit.provenance import report_document

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(name: str, body: dict[str, Any]) -> Path:
    path = atomic_write_json(RESULTS / f"{name}.json", report_document(f"benchmark/{name}", body))
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return path


def median(values: list[float]) -> float:
    return statistics.median(values)


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
