"""``edgekit report``: one self-contained HTML page built from the JSON reports edgekit writes.

Each report kind (``compare``, ``simulate``, ``moe/bench``, ...) has one section module here that
checks its fields and turns it into tables and plotly figures; ``page`` lays the sections out
with plotly's script inlined, so the page opens with no network.
"""
from edgekit.report.build import build_report, load_results, write_report

__all__ = ["build_report", "load_results", "write_report"]
