"""``edgekit simulate``: firing rates and op counts that add up, communication counts as the
SSA paper defines them, energies computed from the cost tables they name, the profiler's
figure beside them, and one-line errors with exit code 2 for bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from oneline import one_line_error

from edgekit.checkpoint import save_checkpoint
from edgekit.cli import cli
from edgekit.data import load_dataset
from edgekit.errors import UsageError
from edgekit.profiles import load_profile
from edgekit.registry import create_model, get_entry
from edgekit.spiking.layers import calibrate_batchnorm
from edgekit.spiking.simulate import SimulateSettings, load_spiking_source, simulate

pytestmark = pytest.mark.usefixtures("single_thread")

QUICK = dict(samples=24, batch_size=12, profile_device=False)


@pytest.fixture(scope="module")
def digits():
    return load_dataset(get_entry("spikingresformer").task)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, digits):
    """Calibrated (firing) checkpoints of the three attention variants and of a non-spiking net."""
    folder = tmp_path_factory.mktemp("ckpt")
    paths = {}
    for name in ("spikingresformer", "spikingresformer:reference", "spikingresformer:ussa",
                 "ds-cnn"):
        torch.manual_seed(0)
        model = create_model(name)
        calibrate_batchnorm(model, [torch.from_numpy(digits.x_train[:256])])
        if name.endswith("ussa"):  # open some gates, so Q sends spikes
            for block in (model.stages[0][0].attn, model.stages[1][1].attn):
                block.bn1.bias.data.copy_(torch.linspace(-1, 4, block.D))
        paths[name] = save_checkpoint(model, folder / f"{name.replace(':', '-')}.safetensors")
    return paths


@pytest.fixture(scope="module")
def reports(checkpoints):
    """One simulation per variant, shared by the tests that only read it."""
    cache = {}

    def get(name):
        if name not in cache:
            source = load_spiking_source(name, str(checkpoints[name]))
            cache[name] = simulate(source, SimulateSettings(**QUICK))
        return cache[name]
    return get


def test_counts_add_up_and_match_spikes(reports):
    report = reports("spikingresformer")
    layers = {r["name"]: r for r in report["layers"]}
    totals = report["totals"]
    assert report["samples"] == 24 and report["T"] == 4
    assert sum(r["sops"] for r in layers.values()) == pytest.approx(totals["sops"])
    assert sum(r["macs"] for r in layers.values()) == pytest.approx(totals["macs"])
    assert sum(r.get("spikes", 0) for r in layers.values()) == pytest.approx(totals["spikes"])
    assert 0.005 < totals["firing_rate"] < 0.5
    # a 1x1 convolution fed spikes: SOPs = input spikes x output channels, exactly
    proj = layers["stages.0.0.attn.proj"]
    n_in = 4 * 32 * 8 * 8  # T x C x H x W entering the projection, per sample
    assert proj["sops"] == pytest.approx(proj["input_rate"] * n_in * 32)
    # the first (real-valued) layer costs MACs: T x 9 x C_out x H x W, no SOPs
    assert layers["prologue.0"]["macs"] == 4 * 9 * 32 * 64 and layers["prologue.0"]["sops"] == 0
    # neuron updates: every neuron, every step
    assert layers["stages.0.0.attn.act_in"]["neuron_updates"] == 4 * 32 * 64
    assert report["totals"]["dense_flops"] > 2 * report["totals"]["sops"]


def test_energy_figures_follow_their_cost_tables(reports):
    report = reports("spikingresformer")
    t = report["totals"]
    energy = {e["model"]: e for e in report["energy"]}
    h = energy["horowitz-45nm"]
    assert "Horowitz, ISSCC 2014" in h["cost_table"] and "4.6 pJ" in h["cost_table"]
    assert h["energy_j"] == pytest.approx(4.6e-12 * t["macs"] + 0.9e-12 * t["sops"])
    loihi = energy["loihi"]
    assert "Davies et al." in loihi["cost_table"] and "Table 2" in loihi["cost_table"]
    moved = sum(a["spikes_moved"] for a in report["attention"])
    inactive = t["neuron_updates"] - t["spikes"]
    expected = 23.6e-12 * t["sops"] + 81e-12 * t["spikes"] + 52e-12 * inactive + 3.5e-12 * moved
    assert loihi["energy_j"] == pytest.approx(expected)
    assert "not priced" in loihi["note"]
    simple = energy["spikingjelly-simple"]
    assert simple["energy_j"] > simple["components_j"]["mac"] > 0  # adds memory traffic


@pytest.mark.parametrize(("name", "formula"), [("spikingresformer", "T·N·D"),
                                               ("spikingresformer:reference", "T·N·(N−1)·D"),
                                               ("spikingresformer:ussa", "T·D")])
def test_attention_communication(reports, name, formula):
    report = reports(name)
    first, second = report["attention"]
    assert (first["N"], first["D"], second["N"], second["D"]) == (64, 32, 16, 64)
    assert first["formula"] == formula
    T, N, D = 4, 64, 32
    values = {"T·N·D": T * N * D, "T·N·(N−1)·D": T * N * (N - 1) * D, "T·D": T * D}[formula]
    assert first["values_moved"] == values
    layers = {r["name"]: r for r in report["layers"]}
    source_layer = {"T·N·D": "act_a", "T·N·(N−1)·D": "act_in", "T·D": "act_q"}[formula]
    spikes = layers[f"stages.0.0.attn.{source_layer}"]["spikes"]
    fanout = N - 1 if formula.startswith("T·N·(") else 1
    assert first["spikes_moved"] == pytest.approx(spikes * fanout) and spikes > 0
    if formula.startswith("T·N·("):  # the N x N matmuls are the attention block's own SOPs
        assert layers["stages.0.0.attn"]["sops"] > 0


def test_profiler_energy_beside_it(checkpoints):
    source = load_spiking_source("spiking-cnn")
    report = simulate(source, SimulateSettings(samples=8, profile_device=True,
                                               device="generic-x86-64-cpu", duration_s=0.2))
    device = report["device_energy"]
    assert device["profile"] == "generic-x86-64-cpu" and device["backend"] == "torch"
    assert device["source"].startswith(("measured:", "estimated:", "unavailable"))
    assert device["latency_p50_ms"] > 0


def test_timesteps_override_rebuilds_the_net(checkpoints):
    source = load_spiking_source("spikingresformer", str(checkpoints["spikingresformer"]), 8)
    assert source.model.T == 8
    report = simulate(source, SimulateSettings(**QUICK))
    layers = {r["name"]: r for r in report["layers"]}
    assert report["T"] == 8 and layers["stages.0.0.attn.act_in"]["neuron_updates"] == 8 * 32 * 64


def test_cli_simulate_writes_table_json_and_plot(checkpoints, tmp_path):
    out, plot = tmp_path / "sim.json", tmp_path / "sim.png"
    result = CliRunner().invoke(cli, [
        "simulate", "spikingresformer", "--checkpoint", str(checkpoints["spikingresformer"]),
        "--samples", "12", "--no-profile", "--json", str(out), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    for text in ("fire %", "SOPs", "T·N·D", "horowitz-45nm", "loihi", "Davies et al.",
                 "accuracy on these samples"):
        assert text in result.output, text
    document = json.loads(out.read_text())
    assert document["kind"] == "simulate" and document["model"] == "spikingresformer"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _cli(*args):
    return CliRunner().invoke(cli, ["simulate", *args])


def _one_line_error(result, *fragments):
    one_line_error(result.exit_code, result.output, 2, *fragments)


def test_non_spiking_model_is_refused():
    _one_line_error(_cli("ds-cnn", "--no-profile"), "ds-cnn is not a spiking model",
                    "spiking models:", "spikingresformer")
    _one_line_error(_cli("resformer-ann", "--no-profile"), "resformer-ann is not a spiking model")


def test_checkpoint_of_another_model_is_refused(checkpoints):
    _one_line_error(_cli("spikingresformer", "--checkpoint", str(checkpoints["ds-cnn"])),
                    "holds 'ds-cnn', not 'spikingresformer'")
    _one_line_error(_cli("spikingresformer", "--checkpoint",
                         str(checkpoints["spikingresformer:ussa"])),
                    "holds 'spikingresformer:ussa', not 'spikingresformer'")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--timesteps", "0"],
     "Invalid value for '-T' / '--timesteps': 0 is not in the range 1<=x<=10000"),
    (["-T", "-3"], "Invalid value for '-T' / '--timesteps': -3 is not in the range 1<=x<=10000"),
    (["--samples", "0"], "Invalid value for '--samples': 0 is not in the range 1<=x<=1048576"),
    (["--device", "loihi"], "is a neuromorphic cost table, not a machine"),
    (["--chip", "generic-x86-64-cpu"], "is a cpu profile, not a neuromorphic cost table"),
    (["--chip", "loihi2"], "unknown device profile 'loihi2'"),
])
def test_bad_options_are_one_line_errors(args, fragment):
    _one_line_error(_cli("spikingresformer", *args), fragment)


def test_wrong_input_shape_is_refused(tmp_path):
    data = tmp_path / "big.npz"
    np.savez(data, x=np.zeros((20, 1, 16, 16), np.float32), y=np.zeros(20, np.int64))
    _one_line_error(_cli("spikingresformer", "--no-profile", "--data", str(data)),
                    "samples of shape (1, 16, 16)", "the model expects (1, 8, 8)")


def test_api_errors():
    with pytest.raises(UsageError, match="not a spiking model"):
        load_spiking_source("mlp")
    with pytest.raises(UsageError, match="unknown model 'spikingresformer:huge'"):
        load_spiking_source("spikingresformer:huge")
    assert load_profile("loihi").kind == "neuromorphic"
