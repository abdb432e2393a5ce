"""The Python API takes what the CLI's TARGET takes: a registry name, a checkpoint or an artifact
folder, for export, validate, profile and compare alike."""
from __future__ import annotations

import pytest

import edgekit
from edgekit.errors import UsageError

QUICK = edgekit.ProfileSettings(backend="onnxruntime", threads=1, energy="none",
                                plan=edgekit.TimingPlan(warmup_s=0, iterations=5))


def test_export_takes_a_name_a_checkpoint_and_an_artifact(tmp_path, trained_mlp):
    lines = []
    untrained = edgekit.export("mlp:small", tmp_path / "a", echo=lines.append)
    assert untrained.validation.passed and lines[0].startswith("exporting mlp:small to onnx")
    assert untrained.manifest["source"]["weights"] == "untrained (random initialisation)"
    trained = edgekit.export(str(trained_mlp), tmp_path / "b")
    assert trained.manifest["source"]["checkpoint"] == str(trained_mlp)
    bundle = edgekit.export(str(tmp_path / "b"), tmp_path / "c", to="jetson-bundle")
    assert bundle.manifest["source"]["checkpoint"] == str(trained_mlp)


def test_validate_takes_a_name_a_checkpoint_and_an_artifact(tmp_path, trained_mlp):
    assert edgekit.validate("mlp:small").report.passed
    from_checkpoint = edgekit.validate(str(trained_mlp))
    assert from_checkpoint.report.passed
    assert from_checkpoint.artifact.manifest["source"]["checkpoint"] == str(trained_mlp)
    edgekit.export(str(trained_mlp), tmp_path / "art")
    checked = edgekit.validate(str(tmp_path / "art"), against="torch")
    assert checked.report.passed and "run now" in checked.report.against
    with pytest.raises(UsageError, match="does not exist"):
        edgekit.validate(str(tmp_path / "missing.safetensors"))


def test_profile_takes_a_name_a_checkpoint_and_an_artifact(tmp_path, trained_mlp):
    edgekit.export(str(trained_mlp), tmp_path / "art")
    sources = []
    for target in ("mlp:small", str(trained_mlp), str(tmp_path / "art")):
        report = edgekit.profile(target, QUICK)
        assert report["iterations"] == 5 and report["compute"]["params"] > 0, target
        sources.append(report["source"])
    assert sources[0]["weights"] == "untrained (random initialisation)"
    assert sources[1]["checkpoint"] == sources[2]["checkpoint"] == str(trained_mlp)
    assert sources[2]["artifact"] == str(tmp_path / "art")


def test_compare_takes_a_name_a_checkpoint_and_an_artifact(tmp_path, trained_mlp):
    edgekit.export(str(trained_mlp), tmp_path / "art")
    edgekit.export("mlp:small", tmp_path / "untrained")
    names = ["mlp:small", str(trained_mlp), str(tmp_path / "art")]
    result = edgekit.compare(names, QUICK)
    # the name finds the same cached checkpoint, and the artifact is scored with its source
    assert [r["name"] for r in result["rows"]] == names
    scores = {r["accuracy"] for r in result["rows"]}
    assert len(scores) == 1 and scores.pop() > 0.5
    assert {r["checkpoint"] for r in result["rows"]} == {str(trained_mlp)}
    profiled = [r["profile"]["source"].get("artifact") for r in result["rows"]]
    assert profiled == [None, None, str(tmp_path / "art")]  # the artifact itself was profiled
    with pytest.raises(UsageError, match="exported from untrained weights"):
        edgekit.compare([str(tmp_path / "untrained")], QUICK)
