"""ONNX export: real torch.onnx export, onnxslim, onnx.checker and ONNX Runtime validation."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch

from edgekit.backends import OnnxRuntimeRunner
from edgekit.errors import CheckFailed, UsageError
from edgekit.exporters import (
    OnnxOptions,
    ValidationFailed,
    compare_outputs,
    export_onnx,
    load_artifact,
)
from edgekit.exporters.reference import VALIDATION_DRAWS
from edgekit.registry import ExportSettings, all_names
from edgekit.targets import load_model_source

# Variants that only change the sizes of a graph another entry exports here (widths, depths,
# VQ group counts; the paper-size WiFi models take a minute) run in `make test-all`; every
# variant that changes what the graph computes (attention kind, VQ on or off, partitioning)
# runs in `make test`.
SIZE_ONLY = ("wifi-mamba:full", "wifi-petr:paper", "mlp:small", "mlp:large", "ds-cnn:tiny",
             "ds-cnn:wide", "astra-vit:g1", "astra-vit:g4", "astra-vit:g32")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SIZE_ONLY
                                  else n for n in all_names()])
def test_every_model_exports_and_validates(name, tmp_path):
    source = load_model_source(name)
    result = export_onnx(source, tmp_path / "art")
    art = load_artifact(tmp_path / "art")
    assert result.validation.passed and art.manifest["validation"]["passed"]
    assert art.manifest["source"]["name"] == name
    assert art.manifest["inputs"][0]["shape"] == [1, *source.entry.task.input_shape]
    assert [o["name"] for o in art.manifest["outputs"]] == list(source.entry.task.output_names)
    assert art.manifest["flops_per_sample"] > 0
    assert sorted(os.listdir(tmp_path)) == ["art"]  # no staging folder left behind


def test_dynamic_batch_runs_at_any_batch(tmp_path):
    source = load_model_source("ds-cnn")
    export_onnx(source, tmp_path / "art", OnnxOptions(dynamic_batch=True))
    art = load_artifact(tmp_path / "art")
    assert art.manifest["inputs"][0]["shape"][0] == "batch"
    x = source.entry.example_inputs(batch=7)[0]
    with OnnxRuntimeRunner(art.model_path, threads=1) as runner:
        out = runner.infer({"input": x.numpy()})["logits"]
    with torch.inference_mode():
        ref = source.model(x).numpy()
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-3)


class _ExportDiffers(torch.nn.Module):
    """Adds 1 only while being exported, so the ONNX graph disagrees with eager PyTorch."""

    def forward(self, x):
        y = x.flatten(1)[:, :10]
        return y + 1.0 if torch.onnx.is_in_onnx_export() else y


def _differing_source():
    source = load_model_source("mlp")
    cfg = source.model.edgekit_cfg
    source.model = _ExportDiffers()
    source.model.edgekit_cfg = cfg
    source.entry = dataclasses.replace(source.entry, export=ExportSettings(dynamo=False))
    return source


def test_tolerance_exceeded_leaves_no_artifact(tmp_path):
    source = _differing_source()
    with pytest.raises(ValidationFailed) as info:
        export_onnx(source, tmp_path / "art")
    assert info.value.exit_code == 1
    (out,) = info.value.report.outputs
    assert out.max_abs == pytest.approx(1.0)
    assert out.mismatched == out.elements == 10 * VALIDATION_DRAWS  # 10 logits per draw
    assert os.listdir(tmp_path) == []


def test_failed_reexport_keeps_the_good_artifact(tmp_path):
    export_onnx(load_model_source("mlp:small"), tmp_path / "art")
    before = (tmp_path / "art" / "manifest.json").read_text()
    with pytest.raises(ValidationFailed):
        export_onnx(_differing_source(), tmp_path / "art")
    assert (tmp_path / "art" / "manifest.json").read_text() == before


def test_corrupt_and_missing_model_file(tmp_path):
    export_onnx(load_model_source("mlp:small"), tmp_path / "art")
    model = tmp_path / "art" / "model.onnx"
    model.write_bytes(model.read_bytes()[:-10])
    with pytest.raises(UsageError, match="corrupt"):
        load_artifact(tmp_path / "art")
    model.unlink()
    with pytest.raises(UsageError, match="missing"):
        load_artifact(tmp_path / "art")
    with pytest.raises(UsageError, match="not an edgekit artifact"):
        load_artifact(tmp_path)


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot create folder|not a folder"):
        export_onnx(load_model_source("mlp:small"), blocker / "art")


def test_compare_outputs_statistics_on_known_arrays():
    ref = np.array([1.0, 2.0, 4.0, 0.0])
    act = np.array([1.1, 2.0, 3.0, 0.0])
    rep = compare_outputs({"y": act}, {"y": ref}, atol=0.2, rtol=0.0)
    (o,) = rep.outputs
    assert o.max_abs == pytest.approx(1.0)
    assert o.max_rel == pytest.approx(0.25)
    assert o.median_abs == pytest.approx(0.0)  # nearest rank: 2nd of [0, 0, 0.1, 1]
    assert o.mismatched == 1 and not rep.passed
    assert compare_outputs({"y": act}, {"y": ref}, atol=1.0, rtol=0.0).passed
    shape = compare_outputs({"y": act[:3]}, {"y": ref}, atol=1, rtol=1)
    assert not shape.passed and "shape" in shape.lines()[0]
    with pytest.raises(CheckFailed, match="lacks output"):
        compare_outputs({}, {"y": ref}, 1, 1)


def test_manifest_records_provenance(tmp_path):
    export_onnx(load_model_source("mlp:small"), tmp_path / "art",
                OnnxOptions(device="generic-x86-64-cpu"))
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["target_device"] == "generic-x86-64-cpu"
    assert {"torch", "onnx", "onnxruntime"} <= set(manifest["provenance"]["versions"])
    assert manifest["files"]["model.onnx"]["bytes"] > 0


class _Unlowered(torch.autograd.Function):
    """Emits an edgekit-domain node that no lowering claims."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def symbolic(g, x):
        return g.op("edgekit::NoSuchOp", x)


class _Marked(torch.nn.Module):
    def forward(self, x):
        return _Unlowered.apply(x) + 1


def test_an_edgekit_node_no_lowering_claims_fails_the_export(tmp_path):
    from edgekit.exporters.onnx import export_graph

    with pytest.raises(CheckFailed, match="edgekit::NoSuchOp, which no lowering rewrites"):
        export_graph(_Marked(), (torch.randn(2, 3),), tmp_path / "m.onnx", opset=18,
                     input_names=["x"], output_names=["y"], dynamo=False)


def test_a_batch_below_1_is_the_same_usage_error_everywhere(tmp_path):
    """export, export_onnx, estimate and profile's settings share one check
    (``edgekit.inputs.check_batch``), made before any work."""
    import edgekit
    from edgekit.estimate import estimate
    from edgekit.profiler.run import ProfileSettings

    calls = (lambda: edgekit.export("mlp:small", tmp_path / "a",
                                    options=edgekit.ExportOptions(batch=0)),
             lambda: export_onnx(load_model_source("mlp:small"), tmp_path / "b",
                                 OnnxOptions(batch=0)),
             lambda: estimate("mlp:small", batch=0),
             lambda: ProfileSettings(batch=0))
    for call in calls:
        with pytest.raises(UsageError, match="^--batch must be at least 1, got 0$"):
            call()
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
