"""What every CLI command shares: the console, JSON output, name completion in errors."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from edgekit.fileio import atomic_write_json

# Piped output (files, CI logs, the README's examples) gets a wide console instead of 80 columns,
# so tables are not truncated.
console = Console() if sys.stdout.isatty() else Console(width=160)
err_console = Console(stderr=True)

# Option types for bounded numbers: click rejects a value outside with exit code 2 and one line.
COUNT = click.IntRange(min=1)
NON_NEGATIVE = click.FloatRange(min=0)
POSITIVE = click.FloatRange(min=0, min_open=True)


def write_json(path: str | Path | None, document: dict[str, Any]) -> None:
    """Write a report atomically when ``--json FILE`` was given, and say where it went."""
    if path is None:
        return
    atomic_write_json(path, document)
    err_console.print(f"[dim]wrote {path}[/dim]")
