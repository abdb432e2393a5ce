"""edgekit's Speck rules against sinabs's own (SynSense's library, 3.1.3) where sinabs imports:
its ``ValidateMapping`` (called by the Speck check, so the memory figures and layer limits are
sinabs's) and its ``_discretize_conv_spk_`` (restated by ``fixed_point``). sinabs installs with
``--no-deps`` (its metadata asks for samna); without it these tests skip and say so.

``discretize.py`` lives in ``sinabs.backend.dynapcnn``, whose ``__init__`` imports samna; the
file itself imports only torch and ``sinabs.layers``, so the test loads it by path.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from edgekit.neuromorphic.chip_fit import (
    check_fit,
    dynapcnn_memory,
    group_layers,
    layer_memories,
)
from edgekit.neuromorphic.chip_limits import load_chip
from edgekit.neuromorphic.fixed_point import Widths, _weights
from edgekit.neuromorphic.net_layers import walk
from edgekit.neuromorphic.sinabs_rules import sinabs_version
from edgekit.registry import split_name
from edgekit.spiking.layers import MultiStepNet, iaf, layer, scale_to_fire

SINABS = sinabs_version()
SINABS_MISSING = ("sinabs is not installed (pip install --no-deps sinabs==3.1.3 pbr; "
                  "benchmarks/xylo_venv.sh)")
needs_sinabs = pytest.mark.skipif(SINABS is None, reason=SINABS_MISSING)


class WideKernel(MultiStepNet):
    """One conv whose 17x17 kernel no DYNAP-CNN core takes."""

    def __init__(self) -> None:
        super().__init__(2, (1, 20, 20))
        self.body = nn.Sequential(layer.Conv2d(1, 4, 17, step_mode="m"), iaf(),
                                  layer.Flatten(step_mode="m"),
                                  layer.Linear(64, 10, step_mode="m"), iaf())

    def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.body(x_seq)


class OddMaps(MultiStepNet):
    """Feature maps and kernels whose sides are not powers of two (6x6, a 6x6 linear kernel):
    the memory formulas round them up."""

    def __init__(self) -> None:
        super().__init__(2, (1, 8, 8))
        self.body = nn.Sequential(layer.Conv2d(1, 6, 3, step_mode="m"), iaf(),
                                  layer.Flatten(step_mode="m"),
                                  layer.Linear(216, 10, step_mode="m"), iaf())

    def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.body(x_seq)


def _speck():
    entry, variant = split_name("spiking-cnn:speck")
    torch.manual_seed(0)
    model = entry.build(variant).eval()
    x = torch.rand(16, 1, 8, 8)
    return model, walk(model, x), x


def test_the_speck_check_says_whose_memory_rules_it_used():
    _, layers, _ = _speck()
    report = check_fit(layers, load_chip("speck"))
    memory = next(c for c in report.checks if c.rule == "cores and memory")
    rules = [c.rule for c in report.checks]
    if SINABS:
        assert f"sinabs {SINABS}" in memory.source and "sinabs layer rules" in rules
    else:
        assert "sinabs not installed" in memory.source and "sinabs layer rules" not in rules


@needs_sinabs
def test_sinabs_validate_mapping_gives_edgekits_memory_figures():
    _, speck, _ = _speck()
    for layers in (speck, walk(OddMaps(), torch.rand(2, 1, 8, 8))):
        groups, _ = group_layers(layers)
        needs, refusals, used = layer_memories(groups)
        assert not refusals and "ValidateMapping (called)" in used
        assert needs == [dynapcnn_memory(g) for g in groups]


@needs_sinabs
def test_a_layer_sinabs_refuses_does_not_fit_in_sinabs_words():
    report = check_fit(walk(WideKernel(), torch.rand(2, 1, 20, 20)), load_chip("speck"))
    failed = {c.rule: c.need for c in report.checks if not c.ok}
    assert "Kernel size is limited to, at most, 16x16" in failed["sinabs layer rules"]


@needs_sinabs
def test_fixed_point_scales_as_sinabs_discretize():
    import sinabs
    import sinabs.layers as sl

    path = Path(sinabs.__file__).parent / "backend" / "dynapcnn" / "discretize.py"
    spec = importlib.util.spec_from_file_location("sinabs_discretize", path)
    discretize = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(discretize)
    model, layers, x = _speck()
    scale_to_fire(model, x)
    widths = Widths(8, 16)
    compared = 0
    for i, lay in enumerate(layers):
        if lay.kind not in ("conv", "linear"):
            continue
        threshold = layers[i + 1].detail["threshold"]
        mine_w, mine_b, scale = _weights(lay, 1.0, widths, threshold)
        m = lay.module
        conv = nn.Conv2d(1, 1, 1)  # sinabs takes a Conv2d: the weights are what it reads
        conv.weight = nn.Parameter(m.weight.detach().clone().reshape(m.weight.shape[0], -1, 1, 1)
                                   if lay.kind == "linear" else m.weight.detach().clone())
        conv.bias = nn.Parameter(m.bias.detach().clone())
        spike = sl.IAF(spike_threshold=torch.tensor(threshold),
                       min_v_mem=torch.tensor(-2.0 * threshold))
        conv, spike = discretize._discretize_conv_spk_(conv, spike, to_int=False)
        assert torch.equal(mine_w.float().reshape(conv.weight.shape), conv.weight.data)
        assert torch.equal(mine_b.float(), conv.bias.data)
        assert round(threshold * scale) == float(spike.spike_threshold)
        compared += 1
    assert compared == 4
