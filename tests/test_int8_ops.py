"""Which operators static int8 quantizes (``--int8-ops``). On a Hugging Face ViT (a model nobody
here wrote) the default, ``weights``, quantizes every layer with weights and keeps Softmax,
LayerNorm, GELU and the attention matmuls in float, as ONNX Runtime's recipe for transformers
does; ``all`` quantizes the Softmax too; a graph without a weight layer is refused for
``weights`` in one line, and ``all`` quantizes what it has."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from oneline import one_line_error

from edgekit.cli import cli
from edgekit.exporters import load_artifact
from edgekit.exporters.calibration import CalibrationSamples, samples_for_artifact
from edgekit.exporters.onnx import export_onnx
from edgekit.exporters.quantize import (
    PrecisionConfig,
    PrecisionRefused,
    convert,
    export_precision,
    quantized_operators,
)
from edgekit.methods.astra.paper import build_paper_model
from edgekit.suites.run import agreement_data
from edgekit.targets import resolve_target

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_compute_thread")


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    """The edge-tiny ViT exported to FP32, and its calibration samples."""
    work = tmp_path_factory.mktemp("vit")
    source = resolve_target("edgekit.suites.hf:tiny_vit")
    fp32 = load_artifact(export_onnx(source, work / "fp32").folder)
    data = agreement_data(source, 8, work / "data.npz")
    return fp32, samples_for_artifact(fp32.folder, fp32.manifest, data, 8), work


def _int8(vit, ops: str):
    fp32, samples, work = vit
    made = export_precision(fp32, work / f"int8-{ops}",
                            PrecisionConfig(name="int8", int8_ops=ops, calib_samples=8),
                            samples=samples, check=False, score=False)
    return made, onnx.load(str(made.folder / "model.onnx")).graph


def _int8_nodes(graph) -> Counter:
    """Operator types ONNX Runtime runs in int8: an activation input dequantized, an output
    quantized again (a float node after a quantized one reads a dequantized tensor too)."""
    constants = {t.name for t in graph.initializer}
    dequantized = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    quantized = {i for n in graph.node if n.op_type == "QuantizeLinear" for i in n.input[:1]}
    return Counter(n.op_type for n in graph.node
                   if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
                   and any(i in dequantized and i not in constants for i in n.input)
                   and any(o in quantized for o in n.output))


def _weight_layers(graph) -> int:
    constants = {t.name for t in graph.initializer}
    return sum(n.op_type in ("Gemm", "MatMul", "Conv") and any(i in constants for i in n.input[1:])
               for n in graph.node)


def test_the_default_quantizes_a_vits_weight_layers_and_keeps_attention_float(vit) -> None:
    assert PrecisionConfig(name="int8").int8_ops == "weights"
    made, graph = _int8(vit, "weights")
    assert made.manifest["quantization"]["int8_ops"] == "weights"
    assert "QDQ, the weight layers:" in made.manifest["quantization"]["method"]
    fed = _int8_nodes(graph)
    assert set(fed) <= {"Gemm", "MatMul", "Conv"}, fed  # no Softmax, Add, LayerNorm, Mul
    fp32_graph = onnx.load(str(vit[0].model_path)).graph
    assert sum(fed.values()) == _weight_layers(fp32_graph) > 0  # every layer with weights


def test_all_quantizes_the_softmax_too(vit) -> None:
    made, graph = _int8(vit, "all")
    assert made.manifest["quantization"]["int8_ops"] == "all"
    assert _int8_nodes(graph)["Softmax"] > 0


def test_weights_on_a_graph_without_a_weight_layer_is_refused(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                               helper.make_node("Add", ["r", "x"], ["y"])], "g", [x], [y])
    path = tmp_path / "no-weights.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    samples = CalibrationSamples({"x": np.random.default_rng(0).random((4, 4), np.float32)},
                                 "generated")
    how = convert(path, tmp_path / "all.onnx", PrecisionConfig(name="int8", int8_ops="all"),
                  [{"name": "x", "shape": [1, 4]}], samples)
    assert how["int8_ops"] == "all" and quantized_operators(tmp_path / "all.onnx")["Add"] == 1
    with pytest.raises(PrecisionRefused, match="no weight layer"):
        convert(path, tmp_path / "w.onnx", PrecisionConfig(name="int8", int8_ops="weights"),
                [{"name": "x", "shape": [1, 4]}], samples)


def test_weights_shared_by_layers_are_quantized_for_each(tmp_path: Path) -> None:
    """ASTRA runs each block on four token shards: four Gemms read one weight and one bias, and
    ONNX Runtime's quantizer wrote an unloadable model ("Duplicate definition of name") until
    each layer got its own copy."""
    torch.manual_seed(0)
    astra = build_paper_model("vit-s", image_size=32, patch_size=8, dim=32, depth=2, heads=2,
                              codes=16, groups=4, num_classes=10).eval()
    source = resolve_target(astra, inputs=["images:1x3x32x32"])
    fp32 = load_artifact(export_onnx(source, tmp_path / "fp32").folder)
    data = agreement_data(source, 4, tmp_path / "data.npz")
    made = export_precision(fp32, tmp_path / "int8", PrecisionConfig(name="int8", calib_samples=4),
                            samples=samples_for_artifact(fp32.folder, fp32.manifest, data, 4),
                            score=False)
    assert made.validation.passed and made.manifest["quantization"]["int8_ops"] == "weights"


def test_cli_int8_ops_is_checked_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["export", "mlp", "--precision", "int8", "--int8-ops",
                                      "some", "-o", str(tmp_path / "x")])
    one_line_error(result.exit_code, result.output, 2, "some")
    result = CliRunner().invoke(cli, ["export", "mlp", "--precision", "fp16", "--int8-ops",
                                      "weights", "-o", str(tmp_path / "y")])
    one_line_error(result.exit_code, result.output, 2, "--int8-ops apply to --precision int8")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
