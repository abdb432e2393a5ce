"""Spik4lite's pruned nets on the edge path (issue 18): compare (SOPs, torch beside ONNX Runtime),
ONNX export that refuses a silent graph, NIR export read back by independent simulators, and a
Jetson bundle built with the ordinary command."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from oneline import one_line_error

import edgekit
from edgekit.checkpoint import load_checkpoint, save_checkpoint
from edgekit.cli import cli
from edgekit.compare.spiking import spiking_fields
from edgekit.data import DIGITS, load_dataset
from edgekit.errors import UsageError
from edgekit.exporters import load_artifact
from edgekit.exporters.artifact_validation import validate_artifact
from edgekit.exporters.graph_form import graph_form
from edgekit.exporters.onnx import validate_onnx
from edgekit.methods import spik4lite as s4
from edgekit.profiler.run import ProfileSettings
from edgekit.profiler.timing import TimingPlan
from edgekit.registry import create_model, get_entry
from edgekit.spiking.layers import calibrate_batchnorm
from edgekit.spiking.simulate import SimulateSettings, load_spiking_source, simulate
from edgekit.targets import registry_source

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = {"T": 2, "dim": 32, "heads": 2, "mlp_ratio": 2}
QUICK = ProfileSettings(threads=1, plan=TimingPlan(warmup_s=0.0, min_warmup_iterations=1,
                                                   duration_s=0.02, min_iterations=2))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A tiny Spikingformer dense and pruned to keep 0.5 (BatchNorm set on digits: it fires)."""
    folder = tmp_path_factory.mktemp("s4l")
    x = torch.from_numpy(load_dataset(DIGITS.task).x_train[:64])
    paths = {}
    for keep in (1.0, 0.5):
        torch.manual_seed(0)
        model = create_model("spikingformer", **TINY)
        calibrate_batchnorm(model, [x])
        if keep < 1.0:
            s4.wrap(model, x)
            s4.prune(model, x, target_keep=keep)
            s4.unwrap(model)
        paths[keep] = save_checkpoint(model.eval(), folder / f"keep{keep}.safetensors")
    return paths


@pytest.fixture(scope="module")
def artifact(checkpoints, tmp_path_factory):
    """The pruned checkpoint exported to ONNX the ordinary way (validated against torch)."""
    return edgekit.export(str(checkpoints[0.5]), tmp_path_factory.mktemp("s4l") / "art")


def test_compare_shows_sops_and_both_backends_for_a_pruned_checkpoint(checkpoints):
    name = str(checkpoints[0.5])
    result = edgekit.compare([name], QUICK, backends=("onnxruntime", "torch"))
    ort, eager = result["rows"]
    assert (ort["backend"], eager["backend"]) == ("onnxruntime", "torch")
    assert ort["latency_p50_ms"] > 0 and eager["latency_p50_ms"] > 0
    assert ort["sops_per_sample"] == eager["sops_per_sample"] > 0  # one count per model
    # the same counts edgekit simulate reports for that checkpoint on the same samples
    report = simulate(load_spiking_source(name), SimulateSettings(profile_device=False))
    assert ort["sops_per_sample"] == pytest.approx(report["totals"]["sops"])
    horowitz = next(e for e in report["energy"] if e["model"] == "horowitz-45nm")
    assert ort["energy_45nm_j"] == pytest.approx(horowitz["energy_j"])
    dense = spiking_fields(load_checkpoint(checkpoints[1.0])[0], load_dataset(DIGITS.task).x_test)
    assert ort["sops_per_sample"] < dense["sops_per_sample"]
    assert ort["energy_45nm_j"] < dense["energy_45nm_j"]


@pytest.mark.parametrize(("backend", "fragment"), [
    ("onnxruntime,onnxruntime", "names a backend twice"),
    ("onnxruntime,tpu", "'tpu' is not one of"),
])
def test_compare_refuses_bad_backend_lists(backend, fragment):
    result = CliRunner().invoke(cli, ["compare", "mlp", "--backend", backend])
    one_line_error(result.exit_code, result.output, 2, fragment)


def test_compare_refuses_several_backends_with_precision():
    with pytest.raises(UsageError, match="give one --backend"):
        edgekit.compare(["mlp"], QUICK, precisions="fp32", backends=("onnxruntime", "torch"))


def test_pruned_export_validates_on_inputs_where_it_fires(artifact):
    assert artifact.validation.passed
    assert artifact.manifest["spiking"]["firing_rate"] > 0.001  # the reference inputs fire it


def test_validation_refuses_a_graph_that_outputs_zeros(checkpoints, artifact, tmp_path):
    """The pruned graph with its output multiplied by 0, against the same net with a dead
    classifier: every element agrees, and still validation fails (a constant proves nothing)."""
    import onnx
    from onnx import helper, numpy_helper

    graph = onnx.load(artifact.folder / "model.onnx")
    out = graph.graph.output[0].name
    for node in graph.graph.node:
        node.output[:] = ["pre_zero" if o == out else o for o in node.output]
    graph.graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "zero"))
    graph.graph.node.append(helper.make_node("Mul", ["pre_zero", "zero"], [out]))
    path = tmp_path / "zero.onnx"
    onnx.save(graph, path)
    model, _ = load_checkpoint(checkpoints[0.5])
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
    form = graph_form(registry_source(get_entry("spikingformer"), None, model))
    report = validate_onnx(path, form, (1,), 1e-4, 1e-3)
    (output,) = report.outputs
    assert output.mismatched == 0 and output.constant_reference and not report.passed


def test_pruned_checkpoint_builds_a_jetson_bundle(artifact, tmp_path):
    out = tmp_path / "bundle"
    result = CliRunner().invoke(cli, ["export", str(artifact.folder), "--to", "jetson-bundle",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    bundle = load_artifact(out)  # every file's SHA-256 checked
    assert {"model.onnx", "reference.npz", "README.md"} <= set(bundle.manifest["files"])
    assert bundle.manifest["jetson_bundle"]["build"]["precision"] == "fp32"
    assert bundle.manifest["params"] == artifact.manifest["params"]  # the pruned net
    assert validate_artifact(out)[1].passed


@pytest.fixture(scope="module")
def pruned_cnn_nir(tmp_path_factory):
    """spiking-cnn (NIR primitives only) pruned to keep 0.5 (its hidden layer, the one layer fed
    by 0/1 spikes besides the readout, loses half its units) and exported to NIR."""
    from edgekit.exporters.nir import export_nir

    torch.manual_seed(0)
    model = create_model("spiking-cnn")
    x = torch.from_numpy(load_dataset(DIGITS.task).x_train[:64])
    s4.wrap(model, x)
    report = s4.prune(model, x, target_keep=0.5)
    s4.unwrap(model)
    assert model.body[7].out_features == 32 and report.channels_after < report.channels_before
    result = export_nir(registry_source(get_entry("spiking-cnn"), None, model.eval()),
                        tmp_path_factory.mktemp("s4l") / "nir")
    assert result.validation.passed
    return model, result, model.encode(x[:32])


@pytest.mark.skipif(importlib.util.find_spec("snntorch") is None
                    or importlib.util.find_spec("norse") is None,
                    reason="NIR readers not installed (pip install edgekit[nir-readers])")
@pytest.mark.parametrize("reader", ["snntorch", "norse"])
def test_pruned_spiking_cnn_nir_runs_the_same_in_an_independent_simulator(pruned_cnn_nir,
                                                                          reader):
    """Every spike of the pruned net's model.nir in snnTorch and Norse equals SpikingJelly's,
    threshold ties aside (the comparison of tests/test_nir_interop.py)."""
    import test_nir_interop as interop

    from edgekit.exporters.nir import MODEL_FILE

    model, result, x_seq = pruned_cnn_nir
    ref_out, ref_spikes, membranes = interop._spikingjelly(model, x_seq)
    assert min(s.mean().item() for s in ref_spikes) > 0.005  # it fires
    path = result.folder / MODEL_FILE
    out, spikes = (interop._snntorch(path, x_seq) if reader == "snntorch"
                   else interop._norse(path, x_seq, 1e-4))
    assert [s.shape for s in spikes] == [s.shape for s in ref_spikes]
    assert interop._untied_roots(ref_spikes, membranes, spikes) == []


def test_nir_refuses_pruned_transformers_naming_the_operation(checkpoints, tmp_path):
    result = CliRunner().invoke(cli, ["export", str(checkpoints[0.5]), "--to", "nir", "-o",
                                      str(tmp_path / "nir")])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("edgekit: error:")]
    assert len(errors) == 1 and "Traceback" not in result.output
    assert all(f in errors[0] for f in ("cannot be exported to NIR", "matmul", "BatchNorm2d"))


@pytest.mark.parametrize("value", ["0", "-0.5", "1.01"])
def test_bad_target_keep_is_one_line_exit_2(value, tmp_path):
    result = CliRunner().invoke(cli, ["train", "spikingformer", "--spik4lite",
                                      f"--target-keep={value}", "-o",
                                      str(tmp_path / "m.safetensors")])
    one_line_error(result.exit_code, result.output, 2, "--target-keep", value)
    assert not list(tmp_path.iterdir())
