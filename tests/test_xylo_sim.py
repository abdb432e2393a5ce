"""edgekit's Xylo simulation (``edgekit.neuromorphic.xylo_sim``) against xylosim, SynSense's
bit-accurate simulator of Xylo's SNN core (0.1.3, ``xylosim.v2``, the core Rockpool's XyloSim
for Xylo Audio 2 and Xylo IMU runs): the same registers, the same input events, equal spikes at
every step. xylosim builds from source (``pip install edgekit[xylo]``); without it that test
skips and says so. The rules themselves are checked by hand on one neuron everywhere.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from edgekit.data import DIGITS
from edgekit.neuromorphic.net_layers import walk
from edgekit.neuromorphic.xylo_sim import (
    XyloNet,
    XyloPopulation,
    map_to_xylo,
    run_xylo,
    run_xylosim,
    xylo_events,
)
from edgekit.registry import split_name

XYLOSIM_MISSING = ("xylosim is not installed (pip install 'edgekit[xylo]', or "
                   "benchmarks/xylo_venv.sh): it builds from C++ source")
XYLOSIM = importlib.util.find_spec("xylosim") is not None


@pytest.fixture(scope="module")
def digits():
    return torch.from_numpy(DIGITS.loader().x_test)


@pytest.fixture(scope="module", params=["xylo", "lif", "iaf"])
def digits_net(request, digits):
    """spiking-cnn:xylo untrained (seed 0), with its own neurons (Xylo's), or with LIF or IF
    neurons (the variant's subtractive reset; IF: no leak, Xylo's largest shift)."""
    torch.manual_seed(0)
    entry, variant = split_name("spiking-cnn:xylo")
    model = entry.build(variant, neuron=request.param).eval()
    events = xylo_events(model.encode(digits))
    return map_to_xylo(walk(model, digits[:1])), events


def test_one_neuron_by_hand():
    """Decay with the sign(v) floor, subtractive reset with several spikes, the readout one
    step late, inputs capped at 15 events."""
    one = np.array([[1]])
    hidden = XyloPopulation(one * 10, np.array([16]), np.array([0]), 1, 1, 31, 1.0)
    readout = XyloPopulation(one * 20, np.array([20]), np.array([0]), 1, 1, 1, 1.0)
    h, o = run_xylo(XyloNet(hidden, readout), np.array([[[20]], [[0]], [[0]]]))
    # step 0: i = 150 (15 events) - 75 = 75, v = 75: 4 spikes, v = 11; step 1: i = 38 (75 - 37),
    # v = 11 - 5 + 38 = 44: 2 spikes, v = 12; step 2: i = 19, v = 12 - 6 + 19 = 25: 1 spike
    assert h[:, 0, 0].tolist() == [4, 2, 1]
    # the readout sees step 0's 4 spikes at step 1: i = 80 - 40 = 40 -> v = 40, one spike
    assert o[:, 0, 0].tolist() == [1, 1, 1]


@pytest.mark.skipif(not XYLOSIM, reason=XYLOSIM_MISSING)
def test_the_simulation_is_xylosims(digits_net):
    net, events = digits_net
    mine_h, mine_o = run_xylo(net, events)
    ref_h, ref_o = run_xylosim(net, events)
    assert mine_h.shape == ref_h.shape and mine_o.shape == ref_o.shape
    assert mine_h.sum() > 0 and mine_o.sum() > 0  # the net spikes: the check compares something
    assert np.array_equal(mine_h, ref_h), f"{int((mine_h != ref_h).sum())} hidden entries differ"
    assert np.array_equal(mine_o, ref_o), f"{int((mine_o != ref_o).sum())} readout entries differ"
