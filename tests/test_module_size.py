"""No module of the package or of benchmarks/ is over 500 lines unless its top says why.

A module past that size usually holds more than one job (issue 46: one class of three
strategies, one exporter doing five things); one that must stay whole says so in a line starting
``# Over 500 lines:`` within its first 10 lines, followed by the reason."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# the package's folders (setup.py maps exporters/ and kernels/ into it) and the benchmarks
FOLDERS = ("edgekit", "exporters", "kernels", "benchmarks")
MAX_LINES = 500
REASON_PREFIX = "# Over 500 lines:"
HEADER_LINES = 10


def oversized(paths: list[Path], root: Path) -> list[str]:
    """``path: N lines`` (from ``root``) for each module over ``MAX_LINES`` whose top gives no
    reason."""
    found = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) <= MAX_LINES:
            continue
        reasons = [line[len(REASON_PREFIX):].strip() for line in lines[:HEADER_LINES]
                   if line.startswith(REASON_PREFIX)]
        if not any(reasons):
            found.append(f"{path.relative_to(root)}: {len(lines)} lines")
    return found


def _modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))


def test_no_module_is_over_500_lines_without_a_reason_at_its_top():
    modules = _modules()
    assert len(modules) > 100  # the folders were found
    found = oversized(modules, REPO)
    assert not found, ("split these modules, or give the reason in a line starting "
                       f"{REASON_PREFIX!r} within their first {HEADER_LINES} lines: "
                       + "; ".join(found))


@pytest.mark.parametrize("header, flagged", [
    ("", True),
    ("# Over 500 lines:\n", True),  # a reason must follow the colon
    ("#!/usr/bin/env python3\n# Over 500 lines: one generated table, split it reads worse\n",
     False),
    ("\n" * HEADER_LINES + "# Over 500 lines: too late, below the top\n", True),
])
def test_the_check_flags_a_long_module_unless_its_top_gives_a_reason(tmp_path, header,
                                                                       flagged):
    module = tmp_path / "pkg" / "long.py"
    module.parent.mkdir()
    module.write_text(header + "x = 1\n" * (MAX_LINES + 1))
    short = tmp_path / "pkg" / "short.py"
    short.write_text("x = 1\n" * MAX_LINES)
    lines = len(module.read_text().splitlines())
    assert oversized([module, short], tmp_path) == ([f"pkg/long.py: {lines} lines"] if flagged
                                                    else [])
