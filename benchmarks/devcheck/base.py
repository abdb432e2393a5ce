"""What every part of the device check shares: the run's context, a step, a step's outcome, and
the command lines of edgekit's CLI and of the benchmark scripts."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
NO_GPU = "no CUDA GPU"


@dataclass(frozen=True)
class Context:
    python: str
    out: Path  # where the three result files go
    work: Path  # per-step folders
    device: str  # "cuda", or "cpu" with --cpu-stand-in
    dry: bool
    max_box_s: float  # caps every step's time box
    wheels: Path
    site: Path


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    needs: tuple[str, ...]
    commands: Callable[[Context, Path], list[list[str]]]  # (context, step folder) -> argv list
    timeout_s: float
    dry_timeout_s: float = 60.0
    summarise: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None

    def box_s(self, dry: bool, max_box_s: float) -> float:
        """The step's time box: the dry run's or the full run's, capped by ``--max-box-s``."""
        return min(self.dry_timeout_s if dry else self.timeout_s, max_box_s)


@dataclass
class Outcome:
    name: str
    what: str
    status: str  # ran | failed | timed-out | skipped
    reason: str = ""
    seconds: float = 0.0
    exit_code: int | None = None
    results: dict[str, Any] = field(default_factory=dict)
    verdicts: list[dict[str, Any]] = field(default_factory=list)


def bench(ctx: Context, script: str, *args: str) -> list[str]:
    return [ctx.python, str(ROOT / "benchmarks" / script), *args]


def edgekit(ctx: Context, *args: str) -> list[str]:
    """``python -P -m edgekit ...``: the steps run from the repository root, where ``-m`` would
    put the bare source folder ``./edgekit`` (without the ``exporters/``, ``kernels/`` and
    ``profiles/`` that setuptools maps into it) ahead of the installed package; -P (Python
    >= 3.11; the device has 3.12) keeps the working directory off ``sys.path``. edgekit's own
    children do the same (``edgekit.interpreter``)."""
    return [ctx.python, "-P", "-m", "edgekit", *args]
