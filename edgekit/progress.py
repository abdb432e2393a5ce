"""Progress of long library calls, reported to a callback the caller passes.

Layers point down (docs/architecture.md): the library never draws on a terminal nor imports
the CLI, as zeus's monitors and Polygraphy's runners report to their callers. ``edgekit``
commands pass a callback that draws rich progress bars; a library caller passes its own, or
nothing for quiet.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressUpdate:
    label: str  # the work running, e.g. "training mlp"; one bar per label
    done: float  # units finished
    total: float  # units in all (1.0 where ``done`` is a fraction)
    note: str = ""  # what else to show beside the bar, e.g. "loss 0.1234"


Progress = Callable[[ProgressUpdate], None]
