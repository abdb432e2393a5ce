"""``edgekit tour``: the commands the tour ran, how long each took, and what the short tour cut."""
from __future__ import annotations

from edgekit.report.blocks import Block, Note, Result, SectionKind, Table, fmt
from edgekit.schema import BOOL, NUMBER, STR, ListOf, Object

SCHEMA = Object({"full": BOOL, "seconds": NUMBER, "shortened": ListOf(STR),
                 "steps": ListOf(Object({"step": STR, "command": ListOf(STR), "seconds": NUMBER,
                                         "cached": BOOL}))})


def render(results: list[Result]) -> list[Block]:
    blocks: list[Block] = []
    for result in results:
        doc = result.doc
        load = doc.get("load_average_1min_at_end")
        loaded = f", 1-minute load average {load:.1f} at the end" if load is not None else ""
        cpu = doc.get("cpu_seconds")
        busy = (f" ({cpu:.0f} CPU seconds on {doc.get('cpu_count', '?')} cores)"
                if cpu is not None else "")
        blocks.append(Note(f"The {'full' if doc['full'] else 'short'} tour: {len(doc['steps'])} "
                           f"steps in {doc['seconds']:.0f} s{busy}{loaded} ({result.path})."))
        if doc["shortened"]:
            blocks.append(Note("Shortened: " + "; ".join(doc["shortened"]) + "."))
        blocks.append(Table(["step", "command", "seconds", "CPU seconds"],
                            [[s["step"], " ".join(s["command"]),
                              "cached" if s["cached"] else f"{s['seconds']:.1f}",
                              fmt(s.get("cpu_seconds"), ".1f")]
                             for s in doc["steps"]],
                            folded=f"the {len(doc['steps'])} commands it ran, with their times"))
    return blocks


SECTION = SectionKind(key="tour", title="The tour: what ran", schemas={"tour": SCHEMA},
                      render=render)
