"""Neuromorphic targets (issue 44 item 2): each chip's published limits, each rule on a net that
breaks it, the nets that fit, the net in the chip's fixed point, and the CLI."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from edgekit.cli import cli
from edgekit.errors import ProfileError
from edgekit.neuromorphic.chip_fit import check_fit, dynapcnn_memory, group_layers
from edgekit.neuromorphic.chip_limits import chip_names, load_chip, read_chip
from edgekit.neuromorphic.fixed_point import Widths, compare
from edgekit.neuromorphic.net_layers import walk
from edgekit.registry import split_name
from edgekit.spiking.layers import MultiStepNet, SumPool2d, iaf, layer, lif, scale_to_fire

DIGIT = torch.rand(4, 1, 8, 8)


def _layers(name: str):
    entry, variant = split_name(name)
    model = entry.build(variant).eval()
    return model, walk(model, DIGIT)


def _failed(report) -> dict[str, str]:
    return {c.rule: c.need for c in report.checks if not c.ok}


class UserSpeckNet(MultiStepNet):
    """A user's own net, as someone outside edgekit would write it: one wide conv layer."""

    def __init__(self, channels: int) -> None:
        super().__init__(2, (1, 8, 8))
        self.body = nn.Sequential(layer.Conv2d(1, channels, 3, padding=1, step_mode="m"), iaf(),
                                  SumPool2d(2), layer.Conv2d(channels, 256, 3, step_mode="m"),
                                  iaf(), layer.Flatten(step_mode="m"),
                                  layer.Linear(1024, 10, step_mode="m"), iaf())

    def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.body(x_seq)


def test_every_chip_limit_is_cited():
    assert {"loihi2", "speck", "xylo-audio2", "xylo-imu"} <= set(chip_names())
    for name in chip_names():
        chip = load_chip(name)
        assert all(chip.source(key) for key in chip.limits)


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace('"limits.inputs"', '"limits.unused"'), "no source"),
    (lambda t: t.replace("inputs = 16", 'inputs = "16"'), "must be a int"),
    (lambda t: t.replace("outputs = 16", "outputs = -1"), "positive integers"),
    (lambda t: t.replace('family = "xylo"', 'family = "xylo"\nspeed = 1'), "unknown keys"),
])
def test_a_broken_chip_file_is_refused_naming_the_field(tmp_path, edit, message):
    text = load_chip("xylo-imu").path.read_text()
    broken = tmp_path / "xylo-imu.toml"
    broken.write_text(edit(text))
    with pytest.raises(ProfileError, match=message):
        read_chip(broken)


def test_dynapcnn_memory_is_sinabs_formula():
    model = UserSpeckNet(channels=12)
    groups, _ = group_layers(walk(model, DIGIT))
    # conv 1 -> 12, 3x3 on 8x8: kernel 1 * 2^(4 + 4), neuron 12 * 2^(3 + 3), bias 12
    assert dynapcnn_memory(groups[0]) == {"kernel": 256, "neuron": 768, "bias": 12}
    # conv 12 -> 256, 3x3 on 4x4 (out 2x2): kernel 12 * 2^(4 + 8), neuron 256 * 2^(1 + 1)
    assert dynapcnn_memory(groups[1]) == {"kernel": 49152, "neuron": 1024, "bias": 256}
    # linear 1024 -> 10 over a (256, 2, 2) input, a 2x2 conv: kernel 256 * 2^(2 + 4)
    assert dynapcnn_memory(groups[2]) == {"kernel": 16384, "neuron": 10, "bias": 10}


def test_the_lif_net_is_refused_by_speck_and_xylo_with_the_changes_named():
    _, layers = _layers("spiking-cnn")
    speck = check_fit(layers, load_chip("speck"))
    assert _failed(speck) == {"neuron model": "lif", "pooling": "avg",
                              "spiking readout": "a non-spiking last layer"}
    assert all(c.change for c in speck.checks if not c.ok)
    xylo = check_fit(layers, load_chip("xylo-audio2"))  # the figures of issue 44's trial
    assert {k: _failed(xylo)[k] for k in ("inputs", "hidden neurons", "outputs")} == \
        {"inputs": "64", "hidden neurons": "1600", "outputs": "10"}
    assert _failed(xylo)["reset"] == "reset to 0"  # Xylo subtracts the threshold
    assert check_fit(layers, load_chip("loihi2")).fits


def test_the_chip_variants_fit_their_chips():
    _, speck_layers = _layers("spiking-cnn:speck")
    speck = check_fit(speck_layers, load_chip("speck"))
    assert speck.fits and len(speck.usage["cores"]) == 4
    _, xylo_layers = _layers("spiking-cnn:xylo")
    assert check_fit(xylo_layers, load_chip("xylo-imu")).fits
    assert _failed(check_fit(xylo_layers, load_chip("xylo-audio2"))) == {"outputs": "10"}
    # Xylo's neuron fires up to 31 spikes a step: no other chip fires more than one
    assert _failed(check_fit(xylo_layers, load_chip("loihi2")))["spikes per step"] == "up to 31"


def test_a_layer_too_big_for_every_core_is_refused():
    small = check_fit(walk(UserSpeckNet(channels=12), DIGIT), load_chip("speck"))
    assert small.fits
    wide = check_fit(walk(UserSpeckNet(channels=48), DIGIT), load_chip("speck"))
    # 48 * 2^(4 + 8) = 196,608 words of kernel memory: more than the largest core's 65,536
    assert _failed(wide).keys() == {"cores and memory"}


def test_a_leaky_net_with_a_tau_not_a_power_of_two_is_refused_by_xylo():
    class Leaky(MultiStepNet):
        def __init__(self) -> None:
            super().__init__(2, (16,))
            node = lif(v_reset=None)
            node.tau = 3.0
            self.body = nn.Sequential(layer.Linear(16, 8, step_mode="m"), node,
                                      layer.Linear(8, 4, step_mode="m"), lif(v_reset=None))

        def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
            return self.body(x_seq)

    report = check_fit(walk(Leaky(), torch.rand(2, 16)), load_chip("xylo-imu"))
    assert _failed(report) == {"decays": "tau 2, tau 3"}


def test_fixed_point_agrees_at_the_chips_widths_and_fails_with_too_few_bits():
    torch.manual_seed(0)
    model, layers = _layers("spiking-cnn:speck")
    x = torch.rand(32, 1, 8, 8)
    scale_to_fire(model, x)
    y = torch.zeros(32, dtype=torch.long)
    eight = compare(model, layers, x, y, Widths(8, 16))
    assert eight.spike_agreement > 0.97 and eight.samples == 32
    two = compare(model, layers, x, y, Widths(2, 16))
    assert two.spike_agreement < eight.spike_agreement - 0.05


def _invoke(*args: str):
    return CliRunner().invoke(cli, ["simulate", *args], catch_exceptions=False)


def test_simulate_target_reports_fit_fixed_point_and_energy(tmp_path):
    out = tmp_path / "speck.json"
    result = _invoke("spiking-cnn:speck", "--target", "speck", "--samples", "8",
                     "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "fits" in result.output and "spike agreement" in result.output
    report = json.loads(out.read_text())
    assert report["target"]["fits"] and report["fixed_point"]["samples"] == 8
    assert report["energy"]["energy_j"] is None and report["energy"]["synaptic_ops"] > 0
    loihi = _invoke("spiking-cnn", "--target", "loihi2", "--samples", "2")
    assert loihi.exit_code == 0 and "Davies et al. 2018" in loihi.output


def test_simulate_target_exits_1_naming_what_does_not_fit():
    result = _invoke("spiking-cnn", "--target", "xylo-imu", "--samples", "4")
    assert result.exit_code == 1
    assert "does not fit xylo-imu: dense layers, pooling, reset, spiking readout, inputs, " \
           "hidden neurons" in result.output
    unknown = _invoke("spiking-cnn", "--target", "truenorth")
    assert unknown.exit_code == 2 and "valid: loihi2, speck" in unknown.output
