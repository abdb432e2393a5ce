"""``edgekit estimate``: FLOPs, bytes and live activations counted by hand for a tiny torch
model and a tiny ONNX graph, the roofline's choice of bound, memory-fit verdicts, bad input,
a Hugging Face model nobody here wrote, and ``--measure`` against a calibrated profile."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnx
import pytest
import torch
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from edgekit.cli import cli
from edgekit.estimate import Analysis, Footprint, Layer, analyse, estimate, roofline
from edgekit.profiles import detect_profile, generic_profile_for, list_profiles, load_profile
from edgekit.profiles.loader import calibration_path
from edgekit.targets import resolve_target
from tests.oneline import one_line_error

DISTILBERT = f"{Path(__file__).parent / 'user_models' / 'hf_models.py'}:distilbert"


class ConvLinear(nn.Module):
    """conv 1 -> 2 channels, 3x3, on 6x6 (out 2x4x4 = 32), ReLU, flatten, linear 32 -> 3."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_conv_linear_counted_by_hand() -> None:
    source = resolve_target(ConvLinear(), inputs=["x:1x1x6x6"])
    layers = {layer.name: layer for layer in analyse(source).layers}
    conv, fc = (next(v for k, v in layers.items() if k.endswith(n)) for n in ("conv", "fc"))
    assert conv.flops == 2 * 32 * 9  # 2 x outputs x (C_in x 3 x 3)
    assert fc.flops == 2 * 32 * 3  # 2 x in x out
    assert conv.weights == Footprint(floats=2 * 9 + 2)  # kernel + bias
    assert conv.activations == Footprint(floats=36 + 32)  # input read + output written
    assert fc.weights == Footprint(floats=32 * 3 + 3)
    assert fc.activations == Footprint(floats=32 + 3)  # flatten is a view: nothing moved
    relu = next(v for v in layers.values() if v not in (conv, fc))  # the model's own op
    assert relu.flops == 0 and relu.activations == Footprint(floats=32 + 32)
    analysis = analyse(source)
    assert analysis.weights == Footprint(floats=20 + 99)
    # live: input (36) and conv output (32) together while the conv runs; nothing larger later
    assert analysis.peak_activations(4) == 68 * 4 and analysis.peak_activations(1) == 68


def test_counted_alike_inside_inference_mode() -> None:
    """torch.inference_mode hides aten ops from dispatch modes: a caller inside it (a benchmark
    timing the same model) must get the same count, not 0."""
    source = resolve_target(ConvLinear(), inputs=["x:1x1x6x6"])
    with torch.inference_mode():
        assert analyse(source).flops == 2 * 32 * 9 + 2 * 32 * 3


def _tiny_onnx(path: Path) -> Path:
    """X[1,4] @ W[4,3] + B[3] -> Relu -> Softmax -> Y[1,3]."""
    w = numpy_helper.from_array(torch.rand(4, 3).numpy(), "W")
    b = numpy_helper.from_array(torch.rand(3).numpy(), "B")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "B"], ["add"], name="add"),
             helper.make_node("Relu", ["add"], ["relu"], name="relu"),
             helper.make_node("Softmax", ["relu"], ["Y"], name="softmax")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, ["batch", 4])], [helper.make_tensor_value_info(
            "Y", TensorProto.FLOAT, ["batch", 3])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_onnx_graph_counted_by_hand(tmp_path: Path) -> None:
    analysis = analyse(resolve_target(str(_tiny_onnx(tmp_path / "tiny.onnx"))))
    rows = {layer.name: layer for layer in analysis.layers}
    assert [rows[n].flops for n in ("mm", "add", "relu", "softmax")] == [2 * 1 * 3 * 4, 3, 3, 0]
    assert analysis.uncounted == {"Softmax": 1}  # said, not silently zero
    assert rows["mm"].weights == Footprint(floats=12) and rows["mm"].activations.floats == 4 + 3
    assert rows["add"].weights == Footprint(floats=3) and rows["add"].activations.floats == 6
    assert analysis.weights == Footprint(floats=15)
    assert analysis.peak_activations(4) == (4 + 3) * 4  # X and mm while the MatMul runs


def _profile(peak: float, bandwidth: float, memory: int | None = None):
    return dataclasses.replace(load_profile("jetson-orin-nano-8gb"), peak_flops={"fp32": peak},
                               memory_bandwidth_bytes_s=bandwidth,
                               memory_bytes=memory or 8 * 2**30)


def test_roofline_picks_the_bound_per_layer() -> None:
    heavy = Layer("matmul", "Linear", flops=10**6, activations=Footprint(floats=250))  # 1 KB
    stream = Layer("copy", "ReLU", flops=0, activations=Footprint(floats=10**6))  # 4 MB
    analysis = Analysis("m", "hand", "hand", (heavy, stream), Footprint(), (Footprint(),))
    row = roofline(analysis, _profile(peak=1e9, bandwidth=1e9), "fp32", per_layer=True)
    # matmul: 1e6 / 1e9 = 1 ms compute > 1e3 B / 1e9 = 1 us memory; copy: 4e6 B / 1e9 = 4 ms
    assert row["layers_bound"] == ["compute", "memory"]
    assert row["latency_ms"] == pytest.approx(1.0 + 4.0)
    assert (row["compute_bound_layers"], row["memory_bound_layers"]) == (1, 1)
    slow_memory = roofline(analysis, _profile(peak=1e9, bandwidth=1e6), "fp32", per_layer=True)
    assert slow_memory["layers_bound"] == ["memory", "memory"]  # 1 ms vs 1e3 / 1e6 = 1 ms: tie
    no_peak = roofline(analysis, _profile(peak=1e9, bandwidth=1e9), "fp16")
    assert no_peak["latency_ms"] is None and "no peak" in no_peak["note"]


def test_memory_fit_for_a_huge_model_on_a_small_device() -> None:
    huge = Analysis("huge", "hand", "hand", (), Footprint(floats=3 * 10**9),  # 3 G weights
                    (Footprint(floats=10**8),))
    nano, h200 = load_profile("jetson-nano"), load_profile("nvidia-h200")  # 4 GiB, 141 GB
    fp32 = roofline(huge, nano, "fp32")  # 12 GB + 0.4 GB > 4.29 GB
    assert fp32["fits"] is False and fp32["memory_share"] == pytest.approx(12.4e9 / 2**32)
    assert "shared by CPU and GPU" in fp32["memory_note"]
    assert roofline(huge, nano, "fp16")["fits"] is False  # 6.2 GB
    assert roofline(huge, nano, "int8")["fits"] is True  # 3.1 GB
    assert roofline(huge, h200, "fp32")["fits"] is True


def _run(*args: str):
    return CliRunner().invoke(cli, ["estimate", *args])


@pytest.mark.parametrize(("args", "fragment"), [
    (("ds-cnn", "--device", "no-such-device"), "unknown device profile 'no-such-device'"),
    (("ds-cnn", "--device", "loihi"), "neuromorphic cost table"),
    (("ds-cnn", "--precision", "fp33"), "unknown precision 'fp33'"),
    (("no/such/model.onnx",), "does not exist"),
    (("ds-cnn", "--batch", "0"), "--batch"),
])
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], fragment: str) -> None:
    result = _run(*args)
    one_line_error(result.exit_code, result.output, 2, fragment)


def test_hf_distilbert_counted_and_estimated_on_every_device(tmp_path: Path) -> None:
    """DistilBERT (dim 64, 2 layers, 2 heads, FFN 128) at 128 tokens: per layer 4 projections
    2 x 128 x 64 x 64, an FFN 2 x 2 x 128 x 64 x 128 and attention (QK^T and AV) 2 x 2 x 128 x
    128 x 64; then the classifier head on the first token, 2 x 64 x 64 + 2 x 64 x 3."""
    out = tmp_path / "estimate.json"
    result = _run(DISTILBERT, "--device", "all", "--json", str(out))
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    per_layer = 4 * 2 * 128 * 64 * 64 + 2 * 2 * 128 * 64 * 128 + 2 * 2 * 128 * 128 * 64
    assert report["flops"] == 2 * per_layer + 2 * 64 * 64 + 2 * 64 * 3
    assert sum(layer["flops"] for layer in report["layers"]) == report["flops"]
    embedding = next(r for r in report["layers"] if r["name"].endswith("word_embeddings"))
    assert embedding["weight_bytes"]["fp32"] == 128 * 64 * 4  # the rows read, not 1000 x 64
    runs_models = {p.name for p in list_profiles() if p.kind != "neuromorphic"}
    assert {row["device"] for row in report["estimates"]} == runs_models
    assert all(row["estimate"] is True for row in report["estimates"])
    assert set(report["formulas"]) == {"latency", "bytes", "peak_activations", "fits"}
    orin = {row["precision"]: row for row in report["estimates"]
            if row["device"] == "jetson-orin-nano-8gb"}
    assert orin["fp32"]["latency_ms"] > orin["fp16"]["latency_ms"] > orin["int8"]["latency_ms"]
    weights = report["weights"]  # floating-point weights scale; int64 position ids do not
    assert weights["other_bytes"] == 512 * 8
    for precision, width in (("fp32", 4), ("int8", 1)):
        assert orin[precision]["weights_bytes"] == (weights["floating_point_elements"] * width
                                                    + weights["other_bytes"])
    assert "latency (est.)" in result.output and "roofline lower bound" in result.output


def test_measure_sets_the_measurement_beside_the_calibrated_estimate() -> None:
    here = detect_profile()
    if here.kind != "cpu":
        pytest.skip(f"--measure on {here.name} profiles on its GPU; this test calibrates a CPU")
    name = generic_profile_for(here).name
    calibration_path().parent.mkdir(parents=True, exist_ok=True)
    calibration_path().write_text(json.dumps({"schema_version": 1, "profiles": {name: {
        "date": "2026-01-01", "machine": {}, "peak_flops": {"fp32": 1e11},
        "memory_bandwidth_bytes_s": 1e10}}}))
    result = _run("ds-cnn", "--measure", "--duration", "0.2", "--precision", "fp32")
    assert result.exit_code == 0, result.output
    report = estimate("ds-cnn", precisions=("fp32",))
    assert report["estimates"][0]["peak_flops_per_s"] == 1e11  # the calibrated figure
    assert "measured / estimated =" in result.output and f"measured here on {name}" in result.output


def test_compare_adds_marked_estimated_rows(tmp_path: Path) -> None:
    model = str(_tiny_onnx(tmp_path / "tiny.onnx"))
    out = tmp_path / "compare.json"
    result = CliRunner().invoke(cli, ["compare", model, "--duration", "0.1", "--estimate-device",
                                      "jetson-nano", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    measured, estimated = rows
    assert "estimated" not in measured and estimated["estimated"] is True
    assert estimated["backend"] == "estimated: jetson-nano"
    assert estimated["energy_source"] == "not measured (estimated row)"
    assert estimated["pareto_latency"] is estimated["pareto_energy"] is False
    assert estimated["latency_p50_ms"] == estimated["estimate"]["latency_ms"] > 0
    assert "~ estimated: latency is the roofline lower bound" in result.output
    bad = CliRunner().invoke(cli, ["compare", model, "--estimate-device", "nope"])
    one_line_error(bad.exit_code, bad.output, 2, "unknown device profile 'nope'")
