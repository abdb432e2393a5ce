"""No module of the package or of benchmarks/ is over 500 lines unless its top says why, and no
function of the package takes more than 8 parameters unless the comment above it says why.

A module past that size usually holds more than one job (issue 46: one class of three
strategies, one exporter doing five things); one that must stay whole says so in a line starting
``# Over 500 lines:`` within its first 10 lines, followed by the reason. A long parameter list
usually wants an options object; a click command (one parameter per option) or a builder the
registry calls with a stored config says so in a comment starting ``# Over 8 parameters:`` in
the comment block right above the function (or its decorators)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# the package's folders (setup.py maps exporters/ and kernels/ into it) and the benchmarks
FOLDERS = ("edgekit", "exporters", "kernels", "benchmarks")
MAX_LINES = 500
REASON_PREFIX = "# Over 500 lines:"
HEADER_LINES = 10
MAX_PARAMETERS = 8
PARAMETERS_PREFIX = "# Over 8 parameters:"


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


def _parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return len([n for n in names if n not in ("self", "cls")])


def _comment_above(lines: list[str], first: int) -> list[str]:
    """The contiguous comment lines right above line ``first`` (1-based)."""
    block, i = [], first - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        block.insert(0, lines[i].strip())
        i -= 1
    return block


def long_parameter_lists(paths: list[Path], root: Path) -> list[str]:
    """``path:line name (N parameters)`` for each function over ``MAX_PARAMETERS`` parameters
    whose comment block above gives no reason."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            count = _parameter_count(node)
            if count <= MAX_PARAMETERS:
                continue
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            reasons = [c[len(PARAMETERS_PREFIX):].strip() for c in _comment_above(lines, first)
                       if c.startswith(PARAMETERS_PREFIX)]
            if not any(reasons):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({count} "
                             "parameters)")
    return found


def test_no_function_takes_more_than_8_parameters_without_a_reason_above_it():
    modules = [p for p in _modules() if not p.is_relative_to(REPO / "benchmarks")]
    found = long_parameter_lists(modules, REPO)
    assert not found, ("group these parameters (an options dataclass), or say why above the "
                       f"function in a comment starting {PARAMETERS_PREFIX!r}: "
                       + "; ".join(found))


@pytest.mark.parametrize("above, flagged", [
    ("", True),
    ("# a comment that gives no reason\n", True),
    ("# Over 8 parameters:\n", True),  # a reason must follow the colon
    ("# Over 8 parameters: a click command, one per option\n# (the options are documented)\n",
     False),
    ("# Over 8 parameters: the reason\n\n", True),  # a blank line ends the block
])
def test_the_check_flags_a_long_parameter_list_unless_a_reason_is_above(tmp_path, above,
                                                                         flagged):
    module = tmp_path / "mod.py"
    module.write_text(f"import click\n\n\n{above}@click.command()\n"
                      "def many(a, b, c, d, e, f, g, h, i):\n    pass\n\n\n"
                      "def eight(self, a, b, c, d, e, f, g, h):\n    pass\n")
    line = 5 + above.count("\n")
    assert long_parameter_lists([module], tmp_path) == (
        [f"mod.py:{line} many (9 parameters)"] if flagged else [])
