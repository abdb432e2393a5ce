"""The edge suite's plumbing at toy sizes: its members name callables that exist, the tiny twins
resolve through the bring-your-own-model path, ``compare --suite`` gives one row per member and
precision scored by agreement with FP32, and refuses what does not apply in one line. Real sizes
and speed live in ``benchmarks/edge_suite.py``."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from oneline import one_line_error

from edgekit.cli import cli
from edgekit.suites import SUITES, get_suite
from edgekit.suites.run import agreement_data
from edgekit.targets import resolve_target

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_compute_thread")


def _run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("suite", list(SUITES))
def test_every_member_names_a_callable_that_exists(suite: str) -> None:
    members = get_suite(suite).models
    assert len({m.name for m in members}) == len(members)
    for member in members:
        module, _, attr = member.target.rpartition(":")
        assert callable(getattr(importlib.import_module(module), attr)), member.target


def test_the_tiny_members_resolve_with_their_inputs() -> None:
    specs = {m.name: resolve_target(m.target, inputs=m.inputs).inputs
             for m in get_suite("edge-tiny").models}
    assert specs["vit-tiny"].describe() == "pixel_values:1x3x32x32:float32"
    bert = specs["distilbert-tiny"]
    assert bert.names == ["input_ids", "attention_mask"]
    assert (bert["attention_mask"].low, bert["attention_mask"].high) == (1.0, 2.0)  # unpadded


def test_agreement_labels_are_the_fp32_models_own_top1(tmp_path: Path) -> None:
    member = get_suite("edge-tiny").select(["vit-tiny"])[0]
    source = resolve_target(member.target)
    data = np.load(agreement_data(source, 4, tmp_path / "a.npz"))
    with torch.inference_mode():
        logits = source.model(torch.from_numpy(data["pixel_values"]))[0]  # (logits,)
    assert data["pixel_values"].shape == (4, 3, 32, 32)
    assert data["labels"].tolist() == logits.argmax(dim=1).tolist()


def test_compare_suite_gives_a_row_per_member_and_precision(tmp_path: Path) -> None:
    out = tmp_path / "suite.json"
    result = _run("compare", "--suite", "edge-tiny", "vit-tiny", "--precision", "fp32,int8",
                  "--suite-samples", "4", "--threads", "1", "--duration", "0.05",
                  "--energy", "none", "--json", out)
    assert result.exit_code == 0, result.output
    assert "not accuracy" in result.output
    report = json.loads(out.read_text())
    assert report["suite"] == "edge-tiny" and report["metric"] == "agreement"
    rows = report["rows"]
    assert [(r["name"], r["precision"]) for r in rows] == [("vit-tiny", "fp32"),
                                                           ("vit-tiny", "int8")]
    assert rows[0]["agreement"] == 1.0  # ONNX Runtime FP32 against PyTorch FP32's labels
    assert 0.0 <= rows[1]["agreement"] <= 1.0
    assert all(r["weights"] == "random" and "agreement, not accuracy" in r["dataset"]
               for r in rows)
    assert any(r["pareto_latency"] for r in rows)


@pytest.mark.parametrize(("args", "fragments"), [
    (("--suite", "nope"), ("nope", "edge-tiny")),
    (("--suite", "edge", "mlp"), ("unknown model of suite 'edge' 'mlp'", "mobilenet-v2")),
    (("--suite", "edge", "--data", "x.npz"), ("--data does not apply",)),
    (("--suite", "edge", "--input", "x:1x3"), ("--input does not apply",)),
    (("--suite", "edge", "--backend", "torch"), ("not --backend torch",)),
    (("--suite", "edge", "--from", "r.json"), ("--from does not apply",)),
    (("--suite", "edge", "--precision", "fp32,fp32"), ("names a precision twice",)),
])
def test_compare_suite_refuses_what_does_not_apply_in_one_line(args: tuple[str, ...],
                                                               fragments: tuple[str, ...]) -> None:
    result = _run("compare", *args)
    one_line_error(result.exit_code, result.output, 2, *fragments)
