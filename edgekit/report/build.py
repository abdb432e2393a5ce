"""Read the JSON reports, check each against its section's schema, and write the page."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from edgekit.errors import UsageError
from edgekit.fileio import atomic_write_text, check_output, read_json_object
from edgekit.provenance import SCHEMA_VERSION
from edgekit.report.blocks import Result, Section, SectionKind, shown_path
from edgekit.report.machine import machine_blocks
from edgekit.report.methods import method_sections
from edgekit.report.page import render_page
from edgekit.report.sections import METHODS_BEFORE, SECTIONS
from edgekit.schema import ANY_OBJECT, INT, STR, Object, check

ENVELOPE = Object({"schema_version": INT, "kind": STR, "provenance": ANY_OBJECT})


def _section_for(kind: str) -> SectionKind | None:
    return next((s for s in SECTIONS if s.accepts(kind)), None)


def load_result(path: str | os.PathLike[str]) -> Result:
    """One report, checked: valid JSON, edgekit's envelope, a kind the page shows, its fields."""
    where = str(path)
    doc = check(read_json_object(path), ENVELOPE, where,
                hint="edgekit report reads the --json files of edgekit's commands")
    if doc["schema_version"] > SCHEMA_VERSION:
        raise UsageError(f"{where}: schema_version {doc['schema_version']} is newer than this "
                         f"edgekit reads ({SCHEMA_VERSION})", hint="upgrade edgekit")
    kind = doc["kind"]
    section = _section_for(kind)
    if section is None:
        shown = ", ".join(k + ("*" if k.endswith("/") else "") for s in SECTIONS for k in s.schemas)
        raise UsageError(f"{where}: a '{kind}' report has no section in the page",
                         hint=f"the page shows: {shown}")
    check(doc, section.schema_for(kind), where)
    return Result(shown_path(where), kind, doc)


def load_results(paths: Sequence[str | os.PathLike[str]]) -> list[Result]:
    if not paths:
        raise UsageError("no results to report", hint="give the JSON files written by --json")
    return [load_result(p) for p in paths]


def build_report(results: list[Result]) -> str:
    """The page: the machine, the tour, then one section per method (``methods``), then one
    section per kind that has results, in the order of ``SECTIONS``."""
    if not results:
        raise UsageError("no results to report", hint="give the JSON files written by --json")
    sections = [Section("machine", "Machine", machine_blocks(results))]
    for kind in SECTIONS:
        if kind.key == METHODS_BEFORE:
            sections += method_sections(results)
        mine = [r for r in results if kind.accepts(r.kind)]
        if mine:
            sections.append(Section(kind.key, kind.title, kind.render(mine)))
    kinds = sorted({r.kind for r in results})
    summary = (f"{len(results)} result file(s): {', '.join(kinds)}. Hover a point of a plot for "
               "every figure and how it was obtained (measured or estimated).")
    return render_page(sections, [r.path for r in results], summary)


def write_report(paths: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str],
                 force: bool = False) -> Path:
    """Check the output first (never an input, never a file edgekit did not write unless
    ``force``), then build and write the page atomically."""
    out = Path(output)
    if out.is_dir():
        raise UsageError(f"-o {out} is a folder", hint="give a file name such as report.html")
    check_output(out, inputs=paths, force=force)
    page = build_report(load_results(paths))
    return atomic_write_text(out, page)
