"""The HTML page: one file, plotly's script and the style inlined, so it opens with no network.

Sections hand over tables, figures and notes as data; every text goes through Jinja2's
autoescaping, and only plotly's own figure markup is inserted as it is.
"""
from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from edgekit.fileio import register_file_kind
from edgekit.report.blocks import Figure, Note, Section, Table

GENERATOR = "edgekit report"  # the page's <meta name="generator">: how an existing report is known

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="{{ generator }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 1.5em 3em;
       color: #222; }
header { border-bottom: 2px solid #d62728; margin-bottom: 1em; }
nav a { margin-right: 1em; }
section { margin-top: 2.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th { background: #f4f4f4; }
td:first-child, th:first-child, td.text, th.text { text-align: left; }
summary { cursor: pointer; color: #444; }
caption { caption-side: bottom; text-align: left; color: #555; font-size: .85em;
          padding-top: .3em; }
p.note { color: #444; }
p.claim { font-style: italic; }
p[class^="verdict"] { font-weight: 600; padding: .3em .6em; border-left: 4px solid #888; }
p.verdict-met { border-color: #2ca02c; }
p.verdict-not-met { border-color: #d62728; }
.figure { margin: 1em 0; min-height: 300px; }
footer { margin-top: 3em; color: #666; font-size: .85em; }
</style>
<script>{{ plotly_js }}</script>
</head>
<body>
<header>
<h1>{{ title }}</h1>
<p>{{ summary }}</p>
<nav>{% for s in sections %}<a href="#{{ s.key }}">{{ s.title }}</a>{% endfor %}</nav>
</header>
{% for s in sections %}
<section id="{{ s.key }}" class="report-section">
<h2>{{ s.title }}</h2>
{% for b in s.blocks %}
{% if b.kind == "table" %}
{% if b.folded %}<details><summary>{{ b.folded }}</summary>{% endif %}
<table>
{% if b.caption %}<caption>{{ b.caption }}</caption>{% endif %}
<thead><tr>{% for h in b.headers %}
<th{% if b.left[loop.index0] %} class="text"{% endif %}>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in b.rows %}<tr>{% for cell in row %}
<td{% if not cell is numeric_cell %} class="text"{% endif %}>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</tbody>
</table>
{% if b.folded %}</details>{% endif %}
{% elif b.kind == "figure" %}
<div class="figure" data-figure="{{ b.name }}">{{ b.markup }}</div>
{% else %}
<p class="{{ b.role }}">{{ b.text }}</p>
{% endif %}
{% endfor %}
</section>
{% endfor %}
<footer>Written by {{ generator }} from: {{ files | join(", ") }}.</footer>
</body>
</html>
"""


_NUMERIC = re.compile(r"[-+]?[\d,.]+(e[-+]?\d+)?\s*(%|×|x|[a-zA-Zµ/]{0,6})?|–")


def _numeric(cell: str) -> bool:
    """Figures are right-aligned, words left-aligned."""
    return _NUMERIC.fullmatch(cell.strip()) is not None


def _block(block: Table | Figure | Note) -> dict[str, Any]:
    from markupsafe import Markup

    if isinstance(block, Table):
        # a column is left-aligned, header included, when its first cell is words
        left = [not block.rows or not _numeric(str(block.rows[0][i]))
                for i in range(len(block.headers))]
        return {"kind": "table", "headers": block.headers, "rows": block.rows,
                "caption": block.caption, "folded": block.folded, "left": left}
    if isinstance(block, Figure):
        markup = block.figure.to_html(full_html=False, include_plotlyjs=False,
                                      div_id=f"plot-{block.name}",
                                      config={"displaylogo": False, "responsive": True})
        return {"kind": "figure", "name": block.name, "markup": Markup(markup)}
    return {"kind": "note", "text": block.text, "role": block.role}


def render_page(sections: list[Section], files: list[str], summary: str) -> str:
    """The whole page as one string."""
    import jinja2
    from markupsafe import Markup
    from plotly.offline import get_plotlyjs

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.tests["numeric_cell"] = _numeric
    # plotly.js is inserted as it is: it holds no "</script>", which would end the element early
    plotly_js = get_plotlyjs()
    if "</script" in plotly_js.lower():
        raise RuntimeError("plotly.js holds '</script>' and cannot be inlined")

    return env.from_string(_TEMPLATE).render(
        generator=GENERATOR, title="edgekit report", summary=summary, files=files,
        plotly_js=Markup(plotly_js),
        sections=[{"key": s.key, "title": s.title, "blocks": [_block(b) for b in s.blocks]}
                  for s in sections])


def is_report(path: Path) -> bool:
    """Whether ``path`` is a page this module wrote (its generator tag in the first bytes), so
    ``report -o`` may replace it without --force."""
    marker = f'<meta name="generator" content="{html.escape(GENERATOR)}">'
    with open(path, "rb") as handle:
        return marker.encode() in handle.read(4096)


register_file_kind("report page", is_report)
