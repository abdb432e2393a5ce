"""The demo tour's plan (issues 20, 43): every method is measured against its own baseline, the
short tour uses the shipped trained checkpoints, the page is given no absolute path, and the tour
never writes into a folder it did not write. (Running it is `make demo`; it takes minutes.)"""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from edgekit import tour
from edgekit.cli import cli
from edgekit.paths import edgekit_home


def _commands(planned: tour.Tour) -> list[str]:
    return [" ".join(step.args) for step in planned.steps]


def test_each_method_meets_its_baseline(tmp_path: Path) -> None:
    for full in (False, True):
        commands = _commands(tour.plan(tmp_path, full=full))
        digits = next(c for c in commands if c.startswith("compare") and "compare.json" in c)
        for model in ("mlp", "ds-cnn", "wbmm", "wbmm-dw13", "spikingresformer", "resformer-ann",
                      "spikingformer", "spikingformer-spik4lite"):
            assert model in digits, (model, digits)
        assert any(c.startswith("simulate spikingresformer") for c in commands)
        benches = [c for c in commands if c.startswith("moe bench")]
        assert len(benches) == 2 and sum("--storage-profile" in c for c in benches) == 1
        single = next(c for c in commands if c.startswith("astra run --world-size 1"))
        assert "--mode single" in single and "--model vit-s" in single
        astra = next(c for c in commands if c.startswith("astra run --world-size 2"))
        for mode in ("sp", "astra"):
            assert f"--mode {mode}" in astra
        for link in ("10Mbps", "100Mbps", "1Gbps"):
            assert f"--bandwidth {link}" in astra
        wifi = next(c for c in commands if "wifi-compare.json" in c)
        assert "wifi-mamba" in wifi and "wifi-petr" in wifi
        assert "--data wifi-pose-sim:station" in wifi
        assert any(c.startswith("validate") for c in commands)
    short, full = tour.plan(tmp_path), tour.plan(tmp_path, full=True)
    assert short.shortened and not full.shortened
    assert not [c for c in _commands(short) if c.startswith("train")]  # shipped weights
    # the full tour trains through compare's cache, but for Spik4lite's own training mode
    assert [c for c in _commands(full) if c.startswith("train")] == [
        c for c in _commands(full) if "--spik4lite" in c]


def test_the_short_tour_compares_the_shipped_checkpoints(tmp_path: Path) -> None:
    planned = tour.plan(tmp_path)
    compare = next(s for s in planned.steps if s.args[0] == "compare")
    for name, dest in planned.weights.items():
        assert dest.parent == compare.cwd == edgekit_home() / "tour"
        if not name.startswith("wifi"):
            assert dest.name in compare.args, name


def test_commands_reach_the_page_without_absolute_paths(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    for step in tour.plan(out).steps:
        for arg in step.args:
            shown = tour.shown(arg, out)
            assert not shown.startswith("/"), (arg, shown)
    assert tour.shown(str(out.resolve() / "compare.json"), out) == "demo/compare.json"
    assert tour.shown(str(edgekit_home() / "tour" / "x"), out) == "$EDGEKIT_HOME/tour/x"


def test_a_folder_the_tour_did_not_write_is_refused(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("mine")
    result = CliRunner().invoke(cli, ["tour", "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "did not write" in result.output and "--force" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.tex"]
