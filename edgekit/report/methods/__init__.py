"""One section per method: its paper's claim, the verdict measured against its own baseline on
the axis the paper claims, and the figure behind it. Each story reads every result it needs
(a compare row, a simulate report, a bench), so it is judged across report kinds."""
from __future__ import annotations

from edgekit.report.blocks import Result, Section
from edgekit.report.methods import astra, spik4lite, ssa, wbmm, wifi, zipmoe
from edgekit.report.methods.story import Story

STORIES: tuple[Story, ...] = (wbmm.STORY, ssa.STORY, spik4lite.STORY, zipmoe.STORY,
                              astra.STORY, wifi.STORY)


def method_sections(results: list[Result]) -> list[Section]:
    """A section per method the inputs measure; every method's after a tour (which runs them
    all, so a missing one is a finding)."""
    tour = any(r.kind == "tour" for r in results)
    return [s for story in STORIES if (s := story.section(results, always=tour)) is not None]
