"""What a method's section says: the paper's claim in one line, the verdict measured here (met,
not met, or not measurable here and why), and the figures and table behind it."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from edgekit.report.blocks import Block, Figure, Note, Result, Section, model_label, number

MET, NOT_MET, UNMEASURABLE = "met", "not met", "not measurable here"
_ROLE = {MET: "verdict-met", NOT_MET: "verdict-not-met", UNMEASURABLE: "verdict-unmeasurable"}


@dataclass(frozen=True)
class Verdict:
    status: str  # MET, NOT_MET or UNMEASURABLE
    why: str  # the measured figures the status rests on, or what was missing
    blocks: list[Block] = field(default_factory=list)
    found: bool = True  # False: the inputs hold nothing of this method


@dataclass(frozen=True)
class Story:
    """One method's section: ``judge`` reads every result and returns its verdict."""

    key: str
    method: str  # the heading and the navigation entry
    claim: str  # the paper's claim, one line
    judge: Callable[[list[Result]], Verdict]

    def section(self, results: list[Result], always: bool = False) -> Section | None:
        """The section; None where the inputs hold nothing of the method, unless ``always``."""
        verdict = self.judge(results)
        if not (verdict.found or always):
            return None
        return Section(f"method-{self.key}", self.method, [
            Note(f"Claim: {self.claim}", role="claim"),
            Note(f"Verdict: {verdict.status}. {verdict.why}", role=_ROLE[verdict.status]),
            *verdict.blocks])


def missing(what: str) -> Verdict:
    return Verdict(UNMEASURABLE, f"The inputs hold no {what}.", found=False)


def compare_docs(results: Sequence[Result], metric: str | None = None) -> list[dict[str, Any]]:
    return [r.doc for r in results if r.kind == "compare"
            and (metric is None or r.doc["metric"] == metric)]


def find_row(results: Sequence[Result], label: str,
             metric: str | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The first compare row named ``label`` (by model, ``model_label``), with its document."""
    for doc in compare_docs(results, metric):
        for row in doc["rows"]:
            if model_label(row) == label and not row.get("estimated"):
                return row, doc
    return None


def ratio(a: float, b: float) -> str:
    """``a`` against ``b`` as a relative change: "-23.4 %"."""
    return f"{(a / b - 1) * 100:+.1f} %" if b else "n/a"


def bars(name: str, title: str, panels: Sequence[tuple[str, str, Sequence[tuple[str, Any, str]]]],
         height: int = 360) -> Figure:
    """Side-by-side bar panels that start at zero, so a 2 % gap looks like 2 %: each panel is
    (title, unit, [(label, value, hover)]); the first bar of a panel is the method, coloured."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[0] for p in panels],
                        horizontal_spacing=0.12)
    for col, (_, unit, items) in enumerate(panels, start=1):
        shown = [(label, number(value), hover) for label, value, hover in items
                 if number(value) is not None]
        fig.add_trace(go.Bar(
            x=[s[0] for s in shown], y=[s[1] for s in shown], showlegend=False,
            text=[f"{s[1]:.4g}" for s in shown], textposition="outside", cliponaxis=False,
            marker_color=["#d62728" if i == 0 else "#1f77b4" for i in range(len(shown))],
            hovertext=[escape(s[2]) for s in shown], hoverinfo="text"), row=1, col=col)
        top = max((s[1] for s in shown), default=1.0) or 1.0
        fig.update_yaxes(title_text=unit, range=[0, top * 1.2], rangemode="tozero",
                         row=1, col=col)
    fig.update_layout(title=title, height=height, margin={"t": 80, "b": 60},
                      hoverlabel={"align": "left"})
    return Figure(name, fig)
