"""The profiler end to end on real backends (torch eager, ONNX Runtime) with short runs."""
from __future__ import annotations

import pytest
import torch

from edgekit.backends import torch_backend
from edgekit.errors import UsageError
from edgekit.exporters import OnnxOptions, export_onnx
from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiler.timing import TimingPlan
from edgekit.targets import load_model_source

QUICK = TimingPlan(warmup_s=0.0, min_warmup_iterations=2, iterations=25)


def _check_report(report, iterations=25, batch=1):
    lat = report["latency_ms"]
    assert report["iterations"] == lat["count"] == iterations
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert report["throughput"]["inferences_per_s"] == pytest.approx(iterations / report["timed_s"])
    assert report["timed_s"] >= lat["mean"] * iterations / 1e3 * 0.999
    assert report["throughput"]["samples_per_s"] == pytest.approx(
        batch * report["throughput"]["inferences_per_s"])
    assert report["creation_s"] > 0 and report["first_inference_ms"] > 0
    assert report["memory"]["peak_rss_mib"] >= report["memory"]["baseline_rss_mib"] > 0
    assert report["model_size"]["bytes"] > 0


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_profile_registry_model(backend):
    report = profile("mlp:small", ProfileSettings(backend=backend, threads=1, plan=QUICK,
                                                  energy="none"))
    _check_report(report)
    assert report["backend"]["backend"] == backend and report["settings"]["threads"] == 1
    comp = report["compute"]
    assert comp["flops_per_sample"] == 2 * (64 * 32 + 32 * 10)
    assert comp["achieved_flops_per_s"] == pytest.approx(
        comp["flops_per_sample"] / (report["latency_ms"]["p50"] / 1e3))
    assert report["energy"]["measured"] is False and report["energy"]["energy_j"] is None


def test_estimated_energy_is_labelled_and_consistent(tmp_path):
    (tmp_path / "proc/device-tree").mkdir(parents=True)  # an Orin Nano's device tree: its peaks
    (tmp_path / "proc/device-tree/model").write_text("NVIDIA Jetson Orin Nano Developer Kit\x00")
    report = profile("mlp:small", ProfileSettings(device="jetson-orin-nano-8gb", threads=1,
                                                  plan=QUICK, energy="estimate",
                                                  sysfs_root=str(tmp_path)))
    en = report["energy"]
    assert en["measured"] is False and en["source"].startswith("estimated")
    assert en["energy_per_inference_j"] == pytest.approx(en["energy_j"] / 25)
    assert en["avg_power_w"] == pytest.approx(en["energy_j"] / en["duration_s"])
    assert en["duration_s"] >= report["timed_s"]  # the window encloses the timed phase
    share = report["compute"]["share_of_peak"]
    assert share == pytest.approx(report["compute"]["achieved_flops_per_s"]
                                  / report["compute"]["peak_flops_per_s"])


def test_profile_artifact_and_onnx_file(tmp_path):
    export_onnx(load_model_source("ds-cnn:tiny"), tmp_path / "art", OnnxOptions(dynamic_batch=True))
    settings = ProfileSettings(backend="onnxruntime", batch=4, threads=1, plan=QUICK, energy="none")
    report = profile(str(tmp_path / "art"), settings)
    _check_report(report, batch=4)
    assert report["target"] == "ds-cnn:tiny" and report["compute"]["flops_per_sample"] > 0
    bare = profile(str(tmp_path / "art" / "model.onnx"), settings)
    _check_report(bare, batch=4)
    assert bare["compute"]["flops_per_sample"] is None


def test_profile_errors(tmp_path):
    export_onnx(load_model_source("mlp:small"), tmp_path / "art", OnnxOptions(batch=2))
    art = str(tmp_path / "art")
    with pytest.raises(UsageError, match="--backend onnxruntime"):
        profile(art, ProfileSettings(backend="torch", plan=QUICK))
    with pytest.raises(UsageError, match="exported for batch 2, not 1"):
        profile(art, ProfileSettings(backend="onnxruntime", plan=QUICK))
    with pytest.raises(UsageError, match="does not exist"):
        profile(str(tmp_path / "nope.onnx"), ProfileSettings(backend="onnxruntime", plan=QUICK))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00garbage")
    with pytest.raises(UsageError, match="not a valid ONNX model"):
        profile(str(junk), ProfileSettings(backend="onnxruntime", plan=QUICK))
    with pytest.raises(UsageError, match="not an edgekit artifact"):
        profile(str(tmp_path), ProfileSettings(backend="onnxruntime", plan=QUICK))
    with pytest.raises(UsageError, match="--batch"):
        ProfileSettings(batch=0)
    with pytest.raises(UsageError, match="--iterations"):
        TimingPlan(iterations=0)


def test_duration_mode_respects_minimum_iterations():
    plan = TimingPlan(warmup_s=0.0, duration_s=0.05, min_iterations=7)
    report = profile("mlp:small", ProfileSettings(threads=1, plan=plan, energy="none"))
    assert report["iterations"] >= 7 and report["timed_s"] >= 0.05 - 1e-3


@pytest.mark.parametrize("gpu_memory", [
    pytest.param(lambda: torch_backend.gpu_memory_figures(
        {"allocated_bytes.all.peak": 3 * 2**20, "reserved_bytes.all.peak": 20 * 2**20},
        allocated=2 * 2**20 + 512, allocated_before=512, free=130 * 2**30, total=141 * 2**30),
        id="torch-cuda"),
    pytest.param(lambda: {"engine_device_memory_bytes": 3 * 2**20, "io_buffers_bytes": 4096,
                          "device_used_increase_bytes": 2 * 2**20,
                          "device_total_bytes": 141 * 2**30, "method": "cudaMemGetInfo"},
                 id="tensorrt"),
])
def test_a_gpu_report_renders_whatever_memory_figures_its_backend_wrote(gpu_memory):
    """`profile --backend torch --provider cuda` measured, then died rendering: the table read
    TensorRT's keys from every GPU report (issue 47). A CPU report, with the backend's record
    as each GPU backend writes it (torch's from its own function of the CUDA readings)."""
    from rich.console import Console

    from edgekit.cli.profile_table import render_profile

    report = profile("mlp:small", ProfileSettings(threads=1, plan=QUICK, energy="none"))
    report["backend"] = {**report["backend"], "device": "cuda:0", "gpu_memory": gpu_memory()}
    console = Console(width=300, record=True)
    console.print(render_profile(report))
    row = next(line for line in console.export_text().splitlines() if "GPU memory" in line)
    shown = [key.removesuffix("_bytes").replace("_", " ")
             for key in report["backend"]["gpu_memory"] if key.endswith("_bytes")]
    assert shown and all(name in row for name in shown), row
    assert "device total 141.0 GiB" in row


def test_a_cuda_graph_of_the_torch_backend_needs_the_gpu():
    with pytest.raises(UsageError, match="--cuda-graph with --backend torch needs --provider cuda"):
        profile("mlp:small", ProfileSettings(backend="torch", cuda_graph=True, plan=QUICK,
                                             energy="none"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("model", ["mlp", "ds-cnn"])
def test_a_captured_cuda_graph_replays_the_eager_forward(model):
    import numpy as np

    from edgekit.registry import split_name

    entry, variant = split_name(model)
    module = entry.build(variant).eval()
    (x,) = entry.example_inputs(batch=8)
    outs = []
    for graph in (False, True):
        runner = torch_backend.TorchRunner(module, ["x"], ["y"], device="cuda", cuda_graph=graph)
        with runner:
            prepared = runner.prepare({"x": x.numpy()})
            for _ in range(3):
                out = runner.run(prepared)
            runner.synchronize()
            outs.append(out.detach().cpu().numpy().copy())
            assert runner.describe()["cuda_graph"] == ("on" if graph else "off")
    np.testing.assert_array_equal(outs[0], outs[1])
