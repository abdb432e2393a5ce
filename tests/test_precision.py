"""fp16 / int8 ONNX artifacts (issue 22): ONNX Runtime's conversion, validated against the one
FP32 reference at a tolerance that follows from the precision, scored on the test split, and every
bad input one line with exit code 2. Real sessions on mlp:small (trained once per session)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper

from edgekit.cli import cli
from edgekit.compare.precision import parse_precisions
from edgekit.errors import UsageError
from edgekit.exporters import load_artifact
from edgekit.exporters.artifact import manifest_digest
from edgekit.exporters.calibration import CalibrationSamples, samples_from_dataset
from edgekit.exporters.onnx import export_onnx
from edgekit.exporters.quantize import (
    TOLERANCE_HEADROOM,
    PrecisionConfig,
    PrecisionRefused,
    convert,
    export_precision,
    open_session,
    quantized_operators,
    refuse_if_nothing_quantized,
    validate_precision,
)
from edgekit.exporters.reference import load_reference
from edgekit.exporters.run import validate
from edgekit.precisions import get_precision, onnx_names
from edgekit.targets import load_model_source


@pytest.fixture(scope="module")
def fp32(trained_home, tmp_path_factory):
    """A trained mlp:small exported to an FP32 ONNX artifact."""
    checkpoint = next(trained_home.rglob("*.safetensors"))
    out = tmp_path_factory.mktemp("fp32") / "mlp-onnx"
    return load_artifact(export_onnx(load_model_source(str(checkpoint)), out).folder)


@pytest.fixture(scope="module")
def int8(fp32, tmp_path_factory):
    samples = samples_from_dataset(load_model_source(fp32.manifest["source"]["checkpoint"])
                                   .entry.task, count=64)
    return export_precision(fp32, tmp_path_factory.mktemp("int8") / "mlp-int8",
                            PrecisionConfig(name="int8", calib_samples=64), samples=samples)


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _one_line(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgekit: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_int8_static_manifest_records_method_calibration_and_test_accuracy(fp32, int8):
    m = int8.manifest
    assert m["precision"] == "int8" and int8.validation.passed
    q = m["quantization"]
    assert "QDQ" in q["method"] and q["tool"] == "onnxruntime.quantization.quantize_static"
    assert q["operators"]["QuantizeLinear"] > 0 and q["operators"]["DequantizeLinear"] > 0
    cal = q["calibration"]
    assert cal["samples"] == 64 and cal["seed"] == 0 and cal["calibrator"] == "entropy"
    assert cal["origin"].startswith("digits (train split, 64 of")
    acc = m["accuracy"]
    assert (acc["dataset"], acc["split"], acc["samples"]) == ("digits", "test", 360)
    assert acc["fp32_value"] > 0.8 and abs(acc["change"]) < 0.05  # trained: int8 keeps it
    # one reference for every precision: the FP32 artifact's file, byte for byte
    assert (int8.folder / "reference.npz").read_bytes() == \
        (fp32.folder / "reference.npz").read_bytes()
    assert m["files"]["model.onnx"]["bytes"] < fp32.size_bytes
    assert load_artifact(int8.folder).manifest["precision"] == "int8"  # reads back
    checked = validate(str(int8.folder))  # edgekit validate: the same per-output tolerance
    assert checked.report.passed and checked.tolerance_basis == "default for int8, per output"
    assert checked.report.outputs[0].atol == int8.validation.outputs[0].atol


def test_tolerance_follows_the_precision_and_a_broken_int8_graph_fails(fp32, int8, tmp_path):
    reference = load_reference(fp32.folder / "reference.npz")
    scale = float(np.abs(reference.outputs["logits"]).max())
    (out,) = int8.validation.outputs
    assert out.atol == pytest.approx(max(1e-4, TOLERANCE_HEADROOM * 2**-7 * scale))
    # break the quantized graph on purpose: negate the first int8 weight tensor
    model = onnx.load(str(int8.folder / "model.onnx"))
    weight = next(i for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8
                  and numpy_helper.to_array(i).ndim == 2)
    broken = -numpy_helper.to_array(weight).astype(np.int16)
    weight.CopyFrom(numpy_helper.from_array(np.clip(broken, -127, 127).astype(np.int8),
                                            weight.name))
    onnx.save(model, str(tmp_path / "broken.onnx"))
    runner = open_session(tmp_path / "broken.onnx")
    report = validate_precision(runner, reference, "int8", 1e-4, 1e-3)
    runner.deactivate()
    assert not report.passed and report.outputs[0].mismatched > 0


def test_fp16_and_dynamic_int8(fp32, tmp_path):
    fp16 = export_precision(fp32, tmp_path / "fp16", PrecisionConfig(name="fp16"),
                            score=False)
    assert fp16.validation.passed and "fp16" in fp16.manifest["quantization"]["method"]
    assert fp16.validation.outputs[0].max_abs <= 16 * get_precision("fp16").roundoff * 20
    dynamic = export_precision(fp32, tmp_path / "dyn",
                               PrecisionConfig(name="int8", quantization="dynamic"),
                               score=False)
    q = dynamic.manifest["quantization"]
    assert q["calibration"] is None and "DynamicQuantizeLinear" in q["operators"]


def test_int8_of_a_graph_with_no_quantizable_operator_is_refused_naming_them(tmp_path):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Sin", ["x"], ["s"]),
                               helper.make_node("Cos", ["s"], ["y"])], "g", [x], [y])
    path = tmp_path / "trig.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    config = PrecisionConfig(name="int8", quantization="dynamic")
    convert(path, tmp_path / "q.onnx", config, [{"name": "x", "shape": [1, 4]}])
    with pytest.raises(PrecisionRefused, match=r"trig-net has no operator .* Cos, Sin"):
        refuse_if_nothing_quantized(quantized_operators(tmp_path / "q.onnx"),
                                    quantized_operators(path), "trig-net", "int8")


def test_wrong_shape_calibration_and_unknown_names_are_usage_errors(fp32, tmp_path):
    bad = CalibrationSamples({"input": np.zeros((8, 3, 3), np.float32)}, "bad")
    with pytest.raises(UsageError, match="calibration samples of 'input' have shape 3x3"):
        export_precision(fp32, tmp_path / "x", PrecisionConfig(name="int8"), samples=bad)
    assert not (tmp_path / "x").exists()  # nothing half-written
    with pytest.raises(UsageError, match="needs calibration samples"):
        export_precision(fp32, tmp_path / "x", PrecisionConfig(name="int8"))
    with pytest.raises(UsageError, match="unknown ONNX precision 'int4'"):
        PrecisionConfig(name="int4")
    assert parse_precisions("fp32,int8") == ("fp32", "int8") and set(onnx_names()) == {
        "fp32", "fp16", "int8"}
    for text, message in (("fp32,fp8", "unknown precision 'fp8'"), ("fp32,", "comma-separated"),
                          ("int8,int8", "twice")):
        with pytest.raises(UsageError, match=message):
            parse_precisions(text)


def test_cli_bad_precision_input_is_one_line(fp32, tmp_path):
    _one_line(_run("export", "mlp:small", "--precision", "int4"), "int4")
    _one_line(_run("export", "mlp:small", "--precision", "fp16", "--quantization", "static"),
              "--quantization applies to --precision int8")
    _one_line(_run("export", "mlp:small", "--precision", "int8", "--quantization", "dynamic",
                   "--calib-samples", "8"), "apply to --quantization static")
    _one_line(_run("export", "mlp:small", "--precision", "int8", "--calib-cache", "c.cache"),
              "--calib-cache apply to --to tensorrt")
    _one_line(_run("compare", "mlp:small", "--backend", "onnxruntime", "--precision", "fp32,bf16"),
              "unknown precision 'bf16'")
    _one_line(_run("compare", "mlp:small", "--backend", "torch", "--precision", "int8"),
              "--backend onnxruntime")
    data = tmp_path / "wrong.npz"
    np.savez(data, x=np.zeros((20, 5), np.float32), y=np.zeros(20, np.int64))
    _one_line(_run("export", str(fp32.folder), "--precision", "int8", "--calib-data", str(data),
                   "-o", str(tmp_path / "o")), "x has samples of shape (5,)")
    # an artifact of a model this edgekit does not know has no dataset to calibrate with
    orphan = tmp_path / "orphan"
    orphan.mkdir()
    for f in ("model.onnx", "reference.npz"):
        (orphan / f).write_bytes((fp32.folder / f).read_bytes())
    manifest = {**fp32.manifest, "source": {**fp32.manifest["source"], "entry": "gone-net"}}
    manifest["manifest_sha256"] = manifest_digest(manifest)
    (orphan / "manifest.json").write_text(json.dumps(manifest))
    _one_line(_run("export", str(orphan), "--precision", "int8", "-o", str(tmp_path / "o2")),
              "no dataset to calibrate with")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


def test_compare_gives_one_row_per_model_and_precision(trained_mlp, tmp_path):
    from edgekit.cli.compare import to_csv
    from edgekit.compare import compare, plot_compare
    from edgekit.profiler.run import ProfileSettings
    from edgekit.profiler.timing import TimingPlan

    settings = ProfileSettings(backend="onnxruntime", threads=1, energy="none",
                               plan=TimingPlan(warmup_s=0.02, duration_s=0.05))
    result = compare(["mlp:small"], settings, precisions="fp32,int8")
    rows = result["rows"]
    assert [r["precision"] for r in rows] == ["fp32", "int8"] and result["refused"] == []
    fp32, int8 = rows
    assert int8["profile"]["settings"]["precision"] == "int8" and int8["validated"]
    assert int8["size_bytes"] < fp32["size_bytes"]
    assert abs(int8["accuracy"] - fp32["accuracy"]) < 0.05
    assert any(r["pareto_latency"] for r in rows)  # the front is drawn across both rows
    header = to_csv(result).splitlines()[0].split(",")
    assert header[:4] == ["name", "family", "accuracy", "precision"] and "validated" in header
    plot_compare(result, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
