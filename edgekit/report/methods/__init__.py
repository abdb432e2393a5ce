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
    return [story.section(results) for story in STORIES]
