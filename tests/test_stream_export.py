"""``edgekit export --stream``: WiFi-Mamba's persistent SSM memory carried by the runtime.

The model is made sensitive to its memory first (memory gate near 1, state tokens scaled up):
an untrained one's poses move by less than the tolerance when the memory is zeroed, so a graph
that dropped the memory would pass on poses alone. Each test that relies on this asserts it.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from onnx import helper, numpy_helper

from edgekit.checkpoint import save_checkpoint
from edgekit.cli import cli
from edgekit.exporters.graph_form import graph_form
from edgekit.exporters.onnx import validate_onnx
from edgekit.exporters.reference import load_reference
from edgekit.registry import create_model
from edgekit.targets import load_model_source

pytestmark = pytest.mark.usefixtures("one_compute_thread")

ATOL, RTOL = 1e-4, 1e-3  # the wifi-mamba entry's export tolerance


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    model = create_model("wifi-mamba")
    with torch.no_grad():
        for block in model.blocks:
            block.memory_gate.fill_(4.0)  # σ(4) = 0.98 of the state carried
        model.state_tokens.weight.mul_(100.0)
    return save_checkpoint(model, tmp_path_factory.mktemp("ckpt") / "wm.safetensors")


@pytest.fixture(scope="module")
def artifact(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("stream") / "wm-stream"
    result = CliRunner().invoke(cli, ["export", str(checkpoint), "--stream", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "streaming: feed each call's outputs memory_out to the next call's inputs memory" \
        in result.output
    assert "a stream of 8 frames" in result.output
    return out


def _frames(count: int, batch: int = 1) -> list[np.ndarray]:
    gen = torch.Generator().manual_seed(123)
    return [torch.rand(batch, 2, 270, 20, generator=gen).numpy() for _ in range(count)]


def _ort_stream(path, frames: list[np.ndarray], memory: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    poses = []
    for x in frames:
        p, _, memory = session.run(["poses", "logits", "memory_out"],
                                   {"input": x, "memory": memory})
        poses.append(p)
    return poses


def test_the_runtime_carries_the_memory_as_forward_stream_does(artifact, checkpoint):
    """12 frames (more than the export's own 8-frame check) through ONNX Runtime, each fed the
    previous memory_out, against WiFi-Mamba's own forward_stream in PyTorch."""
    model = load_model_source(str(checkpoint)).model.eval()
    frames = _frames(12)
    got = _ort_stream(artifact / "model.onnx", frames, np.zeros((1, 2, 2, 64, 16), np.float32))
    memory, want, fresh = None, [], []
    with torch.inference_mode():
        for x in frames:
            poses, _, memory = model.forward_stream(torch.from_numpy(x), memory)
            want.append(poses.numpy())
            fresh.append(model(torch.from_numpy(x))[0].numpy())
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL, err_msg=f"frame {k}")
    # The memory matters here: every frame after the first differs from a fresh start by far
    # more than the tolerance, so a graph that ignored it could not pass.
    gaps = [np.abs(w - f).max() for w, f in zip(want[1:], fresh[1:], strict=True)]
    assert min(gaps) > 20 * (ATOL + RTOL * np.abs(want[1]).max()), gaps


def test_the_manifest_and_reference_describe_the_stream(artifact):
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["input", "memory"]
    assert [o["name"] for o in manifest["outputs"]] == ["poses", "logits", "memory_out"]
    assert manifest["inputs"][1]["shape"] == [1, 2, 2, 64, 16]
    assert manifest["stream"]["state"] == [{"input": "memory", "output": "memory_out"}]
    assert "carried through 2 frames" in manifest["reference"]["inputs"]
    reference = load_reference(artifact / "reference.npz")
    assert np.abs(reference.inputs["memory"]).max() > 1e-2  # a carried state, not zeros
    assert manifest["validation"]["passed"]


@pytest.mark.parametrize("against", ["reference", "torch"])
def test_validate_reruns_the_stream_step(artifact, against):
    result = CliRunner().invoke(cli, ["validate", str(artifact), "--against", against])
    assert result.exit_code == 0, result.output
    assert result.output.count("[✓]") == 3, result.output  # poses, logits, memory_out


def _ignore_memory(src, dst) -> None:
    """The graph with its memory input multiplied by zero before any node reads it."""
    graph = onnx.load(str(src))
    for node in graph.graph.node:
        node.input[:] = ["memory_dropped" if i == "memory" else i for i in node.input]
    graph.graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "nil"))
    graph.graph.node.insert(0, helper.make_node("Mul", ["memory", "nil"], ["memory_dropped"]))
    onnx.save(graph, str(dst))


def test_a_graph_that_drops_its_memory_fails_the_stream_validation(artifact, checkpoint,
                                                                   tmp_path):
    form = graph_form(load_model_source(str(checkpoint)), stream=True)
    assert validate_onnx(artifact / "model.onnx", form, (1,), ATOL, RTOL).passed
    broken = tmp_path / "dropped.onnx"
    _ignore_memory(artifact / "model.onnx", broken)
    report = validate_onnx(broken, form, (1,), ATOL, RTOL)
    failed = {o.name for o in report.outputs if not o.passed}
    assert failed == {"poses", "logits", "memory_out"}, report.lines()


def test_a_dynamic_batch_stream_runs_at_another_batch(checkpoint, tmp_path):
    out = tmp_path / "dyn"
    result = CliRunner().invoke(cli, ["export", str(checkpoint), "--stream", "--dynamic-batch",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "batch 1, 3" in result.output
    got = _ort_stream(out / "model.onnx", _frames(3, batch=4),
                      np.zeros((4, 2, 2, 64, 16), np.float32))
    assert got[-1].shape == (4, 10, 14, 3)


@pytest.mark.parametrize(("args", "fragment"), [
    (["wifi-petr", "--stream"], "wifi-petr carries no state between calls"),
    (["wifi-mamba", "--stream", "--to", "nir"], "--stream applies to ONNX, TensorRT"),
    (["wifi-mamba", "--stream", "--precision", "fp16"], "--stream exports FP32 ONNX"),
    (["wifi-mamba", "--stream", "--to", "jetson-bundle", "--precision", "int8"],
     "calibration data hold no state inputs"),
])
def test_a_stream_export_that_cannot_be_made_is_refused_in_one_line(args, fragment, tmp_path):
    result = CliRunner().invoke(cli, ["export", *args, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert len(result.output.strip().splitlines()) <= 2, result.output  # error + hint
    assert not (tmp_path / "out").exists()


def test_stream_is_refused_on_an_artifact(artifact, tmp_path):
    result = CliRunner().invoke(cli, ["export", str(artifact), "--to", "jetson-bundle",
                                      "--stream", "-o", str(tmp_path / "b")])
    assert result.exit_code == 2, result.output
    assert "the target is already an ONNX artifact" in result.output


def test_a_bundle_of_a_stream_says_how_to_feed_it(artifact, tmp_path):
    result = CliRunner().invoke(cli, ["export", str(artifact), "--to", "jetson-bundle",
                                      "-o", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    readme = (tmp_path / "b" / "README.md").read_text()
    assert "This is a **streaming** model: feed each call's outputs memory_out" in readme
    assert "`memory`: fixed shape 1x2x2x64x16" in readme
