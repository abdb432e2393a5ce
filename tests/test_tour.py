"""The demo tour's plan (issue 20): every method is in it, Spik4lite joins once registered, and it
never writes into a folder it did not write. (Running it is `make demo`; it takes minutes.)"""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from edgekit import tour
from edgekit.cli import cli


def _commands(planned: tour.Tour) -> list[str]:
    return [" ".join(step.args) for step in planned.steps]


def test_the_tour_touches_every_method(tmp_path: Path) -> None:
    for full in (False, True):
        commands = _commands(tour.plan(tmp_path, full=full))
        digits = next(c for c in commands if c.startswith("compare") and "compare.json" in c)
        for model in ("mlp", "ds-cnn", "wbmm", "spikingresformer", "resformer-ann"):
            assert model in digits, (model, digits)
        assert any(c.startswith("simulate spikingresformer") for c in commands)
        assert any(c.startswith("moe bench") for c in commands)
        assert any(c.startswith("astra run --world-size 2") and "--bandwidth" in c
                   for c in commands)
        wifi = next(c for c in commands if "wifi-compare.json" in c)
        assert "wifi-mamba" in wifi and "wifi-petr" in wifi
        assert any(c.startswith("validate") for c in commands)
    short, full = tour.plan(tmp_path), tour.plan(tmp_path, full=True)
    assert short.shortened and not full.shortened
    assert any(c.startswith("train spikingresformer --epochs=3") for c in _commands(short))
    for step in short.steps:  # a brief training is cached where it writes its checkpoint
        if step.args[0] == "train":
            assert step.cached == Path(step.args[-1])
    # the full tour trains through compare's cache, but for Spik4lite's own training mode
    assert [c for c in _commands(full) if c.startswith("train")] == [
        c for c in _commands(full) if "--spik4lite" in c]


def test_spik4lite_is_trained_pruned_and_compared(tmp_path: Path) -> None:
    for plan in (tour.plan(tmp_path), tour.plan(tmp_path, full=True)):
        train = next(s for s in plan.steps if "--spik4lite" in s.args)
        assert train.args[:2] == ("train", tour.SPIK4LITE_MODEL)
        assert "--target-keep=0.5" in train.args
        compare = next(s for s in plan.steps if s.args[0] == "compare")
        assert compare.cwd == Path(train.args[-1]).parent  # the pruned net is one of the rows
        assert Path(train.args[-1]).name in compare.args


def test_a_folder_the_tour_did_not_write_is_refused(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("mine")
    result = CliRunner().invoke(cli, ["tour", "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "did not write" in result.output and "--force" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.tex"]
