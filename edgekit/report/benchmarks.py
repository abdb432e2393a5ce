"""``benchmarks/*.py`` results: each script's markdown tables, its verdicts against the targets,
and its top-level figures (benchmarks differ in shape, so the section shows what they share)."""
from __future__ import annotations

from typing import Any

from edgekit.report.blocks import Block, Note, Result, SectionKind, Table
from edgekit.schema import ANY_OBJECT, BOOL, STR, ListOf, MapOf, Object, Optional

SCHEMA = Object({"table": Optional(STR), "tables": Optional(MapOf(STR)),
                 "verdicts": Optional(ListOf(Object({"target": STR, "met": BOOL}))),
                 "settings": Optional(ANY_OBJECT)})
_MAX_FIGURES = 40  # scalar figures listed per benchmark that has no table of its own
_SKIP = {"schema_version", "kind", "provenance", "table", "tables", "verdicts"}


def markdown_table(text: str, caption: str) -> Table | None:
    """A pipe table as ``benchmarks/common.markdown_table`` writes it (header, ``|---|`` rule,
    rows); None when ``text`` is not one."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip().startswith("|")]
    if len(lines) < 2 or set(lines[1].replace("|", "").replace(":", "").strip()) != {"-"}:
        return None

    def cells(line: str) -> list[str]:
        return [c.strip().replace("**", "") for c in line.strip("|").split("|")]

    return Table(cells(lines[0]), [cells(line) for line in lines[2:]], caption=caption)


def _scalars(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, str]]:
    if isinstance(value, dict) and depth < 3:
        return [pair for k, v in value.items() if k not in _SKIP
                for pair in _scalars(v, f"{prefix}{k}" if not prefix else f"{prefix}.{k}",
                                     depth + 1)]
    if isinstance(value, bool | int | str) or value is None:
        return [(prefix, str(value))]
    if isinstance(value, float):
        return [(prefix, f"{value:.4g}")]
    return []


def render(results: list[Result]) -> list[Block]:
    blocks: list[Block] = []
    for result in results:
        doc = result.doc
        name = result.kind.removeprefix("benchmark/")
        prov = doc["provenance"]
        blocks.append(Note(f"{name}: {prov.get('command', '?')} on "
                           f"{(prov.get('machine') or {}).get('hostname', '?')}, "
                           f"{prov.get('created', '?')} ({result.path})"))
        texts = [(k, v) for k, v in doc.items() if isinstance(v, str) and k != "kind"]
        texts += list((doc.get("tables") or {}).items())
        tables = [t for key, text in texts if (t := markdown_table(text, f"{name}: {key}"))]
        blocks.extend(tables)
        if doc.get("verdicts"):
            blocks.append(Table(["target", "value", "met"],
                                [[v["target"], str(v.get("value", "–")),
                                  "yes" if v["met"] else "no"] for v in doc["verdicts"]],
                                caption=f"{name}: verdicts"))
        if not tables:
            figures = [(k, v) for k, v in _scalars(doc) if not markdown_table(v, "")]
            shown = figures[:_MAX_FIGURES]
            more = f"; {len(figures) - len(shown)} more in the file" if len(figures) > len(
                shown) else ""
            blocks.append(Table(["figure", "value"], [list(p) for p in shown],
                                caption=f"{name}: top-level figures{more}"))
    return blocks


SECTION = SectionKind(key="benchmarks", title="Benchmarks", schemas={"benchmark/": SCHEMA},
                      render=render)
