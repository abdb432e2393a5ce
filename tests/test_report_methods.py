"""The report's method sections (issue 43): each method's claim, its verdict measured against its
own baseline, and its figure; the verdicts follow the figures (each can come out "not met");
rows are named by model, axes keep small gaps small, and a fleet's compare report is read.

The inputs are the short tour's real outputs in tests/data/report/ (their README says how).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgekit.cli import cli
from edgekit.report import build_report, load_results
from edgekit.report.blocks import Result
from edgekit.report.compare import axis_range, positions
from edgekit.report.methods import STORIES, method_sections

DATA = Path(__file__).parent / "data" / "report"
RESULTS = sorted(DATA.glob("*.json"))


@pytest.fixture(scope="module")
def results() -> list[Result]:
    return load_results(RESULTS)


@pytest.fixture(scope="module")
def page(results: list[Result]) -> str:
    return build_report(results)


def _verdicts(results: list[Result]) -> dict[str, str]:
    return {s.key.removeprefix("method-"): next(b.text for b in s.blocks
                                                 if b.role.startswith("verdict"))
            for s in method_sections(results)}


def test_every_method_has_a_claim_a_measured_verdict_and_a_figure(results, page) -> None:
    nav = re.search(r"<nav>(.*?)</nav>", page, re.S).group(1)
    verdicts = _verdicts(results)
    for story in STORIES:
        assert f'<section id="method-{story.key}"' in page and story.method in nav
        assert f'data-figure="method-{story.key}"' in page, story.key
        # the tour measured every method: each verdict rests on figures, not on missing input
        assert verdicts[story.key].startswith(("Verdict: met.", "Verdict: not met.")), \
            verdicts[story.key]
    assert page.index('id="method-wbmm"') < page.index('id="compare"')  # the headline


def _with(results: list[Result], kind: str, change) -> list[Result]:
    """The results with one document of ``kind`` changed by ``change(doc)``."""
    out = []
    for r in results:
        doc = copy.deepcopy(r.doc) if r.kind == kind else r.doc
        if r.kind == kind:
            change(doc)
        out.append(Result(r.path, r.kind, doc))
    return out


def _row(doc: dict, model: str) -> dict:
    return next(r for r in doc["rows"] if r["name"].removesuffix(".safetensors") == model)


def _slower(model: str, key: str = "latency_p50_ms"):
    def change(doc: dict) -> None:
        if any(r["name"].startswith(model) for r in doc["rows"]):
            _row(doc, model)[key] = 1e6
    return change


@pytest.mark.parametrize("story, kind, change", [
    ("wbmm", "compare", _slower("wbmm")),
    ("ssa", "compare", _slower("spikingresformer", "energy_45nm_j")),
    ("spik4lite", "compare", _slower("spikingformer-spik4lite")),
    ("wifi-mamba", "compare", _slower("wifi-mamba", "mpjpe_mm")),
    ("astra", "astra/run",
     lambda doc: [c.update(latency_s=1e6) for c in doc["summary"].get("astra", [])]),
    ("zipmoe", "moe/bench", lambda doc: doc["results"]["zipmoe"].update(tokens_per_s=1e-6)),
])
def test_a_verdict_follows_its_figures(results, story, kind, change) -> None:
    assert _verdicts(_with(results, kind, change))[story].startswith("Verdict: not met."), story


def test_missing_inputs_are_not_measurable_and_only_shown_after_a_tour(results) -> None:
    alone = [r for r in results if r.kind == "validate"]
    assert method_sections(alone) == []  # a validate report alone has no method story
    tour = [r for r in results if r.kind in ("validate", "tour")]
    assert all(v.startswith("Verdict: not measurable here. The inputs hold no")
               for v in _verdicts(tour).values())


def test_rows_are_named_by_model_and_no_absolute_path_reaches_the_page(page) -> None:
    body = re.sub(r"<script>.*?</script>", "", page, flags=re.S)
    assert ">spikingformer-spik4lite</td>" in body and ">wbmm-dw13</td>" in body
    assert ".safetensors</td>" not in body
    assert not re.search(r"(/tmp/|/home/|/root/|/work/)", body), \
        re.search(r".{60}(/tmp/|/home/|/root/|/work/).{60}", body).group(0)


def test_axes_keep_a_small_gap_small_and_labels_take_turns() -> None:
    assert axis_range([0.672, 0.688]) == {"type": "linear", "range": [0, 0.688 * 1.15]}
    assert axis_range([0.007, 0.25]) == {"type": "log"}
    assert axis_range([89.7, 96.9], log_spread=float("inf"))["range"][0] == 0
    placed = positions([1.0, 1.01, 1.02, 5.0], [90.0, 90.1, 90.2, 91.0])
    assert len(set(placed[:3])) == 3  # close neighbours label on different sides


def test_a_fleet_compare_report_is_read(tmp_path: Path) -> None:
    """``compare --from`` writes what ``compare --fleet`` writes: rows that each name their
    device, and a ``devices`` list instead of one ``device``."""
    merged = tmp_path / "fleet.json"
    runner = CliRunner()
    result = runner.invoke(cli, ["compare", "--from", str(DATA / "wifi-compare.json"),
                                 "--json", str(merged)])
    assert result.exit_code == 0, result.output
    doc = json.loads(merged.read_text())
    assert "device" not in doc and doc["devices"] and all("device" in r for r in doc["rows"])
    result = runner.invoke(cli, ["report", str(merged), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text()
    assert 'id="method-wifi-mamba"' in page and ">wifi-mamba</td>" in page
