"""``edgekit report`` (issue 20): one self-contained page from every kind of result edgekit writes,
and one error line for anything it cannot read.

The inputs in tests/data/report/ are real outputs of edgekit commands (its README lists them).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgekit.cli import cli
from edgekit.report import build_report, load_results
from edgekit.report.sections import SECTIONS

DATA = Path(__file__).parent / "data" / "report"
RESULTS = sorted(DATA.glob("*.json"))


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _one_line(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert not (result.exception and not isinstance(result.exception, SystemExit)), \
        result.exc_info
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgekit: error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def page() -> str:
    return build_report(load_results(RESULTS))


def test_every_section_kind_has_an_input() -> None:
    kinds = {json.loads(p.read_text())["kind"] for p in RESULTS}
    for section in SECTIONS:
        assert any(section.accepts(k) for k in kinds), f"no input for section {section.key}"


def test_page_is_self_contained(page: str) -> None:
    """plotly.js is inlined once; around it nothing is fetched: no src or href to another host,
    no CSS import (tests/test_report_browser.py checks what the browser loads)."""
    assert "<script src" not in page
    head, plotly_js, rest = re.split(r"<script>|</script>", page, maxsplit=2)
    assert "plotly.js v" in plotly_js[:300] and "Plotly.newPlot(" in rest
    for outside in (head, rest):
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", outside)
        assert "@import" not in outside
    # a figure per method (6); two compares (digits, WiFi): latency and energy each; simulate:
    # layers and energy; two moe benches; two astra runs; validate
    assert page.count("Plotly.newPlot(") == page.count('class="figure"') == 17
    for section in ("machine", "tour", "device", "method-wbmm", "method-ssa", "method-spik4lite",
                    "method-zipmoe", "method-astra", "method-wifi-mamba", "compare", "simulate",
                    "zipmoe", "astra", "validate", "benchmarks"):
        assert f'<section id="{section}"' in page, section


def test_hover_text_carries_figures_and_provenance(page: str) -> None:
    compare = json.loads((DATA / "compare.json").read_text())
    row = compare["rows"][0]
    assert f"{row['accuracy'] * 100:.2f}%" in page
    assert "measured: onnxruntime" in page  # latency's provenance
    assert row["energy_source"] in page  # energy's: measured or estimated


def test_compare_table_has_the_spiking_columns(page: str) -> None:
    """The page's compare table carries what the CLI table does: MSOPs and 45 nm energy on the
    spiking rows, a dash on the others."""
    compare = json.loads((DATA / "compare.json").read_text())
    snn = next(r for r in compare["rows"] if "sops_per_sample" in r)
    assert "<th>MSOPs</th>" in page and "<th>45nm µJ</th>" in page
    assert f"<td>{snn['sops_per_sample'] / 1e6:.3f}</td>" in page
    assert f"<td>{snn['energy_45nm_j'] * 1e6:.3f}</td>" in page
    assert f"{snn['sops_per_sample'] / 1e6:.4g} MSOPs per sample" in page  # the hover


def test_text_is_escaped(tmp_path: Path) -> None:
    doc = json.loads((DATA / "validate.json").read_text())
    doc["outputs"][0]["name"] = "<script>alert(1)</script>"
    path = tmp_path / "validate.json"
    path.write_text(json.dumps(doc))
    page = build_report(load_results([path]))
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


def test_cli_writes_the_page_and_replaces_only_its_own(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    inputs = [str(DATA / "validate.json"), str(DATA / "tour.json")]
    result = _run("report", *inputs, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert _run("report", *inputs, "-o", str(out)).exit_code == 0  # its own page: replaced
    mine = tmp_path / "notes.html"
    mine.write_text("my notes")
    _one_line(_run("report", *inputs, "-o", str(mine)), "notes.html", "--force")
    assert mine.read_text() == "my notes"
    assert _run("report", *inputs, "-o", str(mine), "--force").exit_code == 0
    assert mine.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("content, fragments", [
    ("{not json", ("bad.json", "not valid JSON")),
    ("[1, 2]", ("bad.json", "expected a JSON object")),
    ('{"kind": "compare"}', ("bad.json", "schema_version")),
    ('{"schema_version": 1, "kind": "train", "provenance": {}}',
     ("bad.json", "'train' report has no section")),
    ('{"schema_version": 9, "kind": "compare", "provenance": {}}', ("bad.json", "newer")),
])
def test_malformed_or_unknown_json_is_one_line(tmp_path: Path, content: str,
                                               fragments: tuple[str, ...]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    out = tmp_path / "report.html"
    _one_line(_run("report", str(DATA / "profile.json"), str(bad), "-o", str(out)), *fragments)
    assert not out.exists()


def test_a_wrong_field_names_the_file_and_the_field(tmp_path: Path) -> None:
    doc = json.loads((DATA / "compare.json").read_text())
    doc["rows"][1]["latency_p50_ms"] = "fast"
    bad = tmp_path / "compare.json"
    bad.write_text(json.dumps(doc))
    _one_line(_run("report", str(bad), "-o", str(tmp_path / "r.html")),
              "compare.json", "rows[1].latency_p50_ms")


def test_no_results_a_missing_file_and_an_input_as_output_are_refused(tmp_path: Path) -> None:
    _one_line(_run("report", "-o", str(tmp_path / "r.html")), "no results")
    _one_line(_run("report", str(tmp_path / "gone.json"), "-o", str(tmp_path / "r.html")),
              "gone.json", "does not exist")
    copy = tmp_path / "profile.json"
    shutil.copy(DATA / "profile.json", copy)
    _one_line(_run("report", str(copy), "-o", str(copy)), "overlaps the input")
    assert json.loads(copy.read_text())["kind"] == "profile"
