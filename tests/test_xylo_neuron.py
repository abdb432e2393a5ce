"""Xylo's neuron for training (``edgekit.spiking.xylo_neuron``): its rules by hand, against
Rockpool's ``LIFTorch`` where Rockpool imports (benchmarks/xylo_venv.sh installs it), and the
trained variant's float net against Xylo's integer rules (``xylo_sim``)."""
from __future__ import annotations

import importlib

import pytest
import torch

from edgekit.data import DIGITS
from edgekit.errors import UsageError
from edgekit.neuromorphic.fixed_point import float_spikes
from edgekit.neuromorphic.net_layers import walk
from edgekit.neuromorphic.xylo_sim import compare_on_xylo, map_to_xylo
from edgekit.registry import split_name
from edgekit.spiking.counting import count
from edgekit.spiking.layers import functional
from edgekit.spiking.xylo_neuron import XyloLIFNode


def _lif_torch():
    try:
        return importlib.import_module("rockpool.nn.modules").LIFTorch
    except ImportError:  # rockpool, or a dependency it imports, is missing
        return None


LIF_TORCH = _lif_torch()


def test_one_neuron_by_hand():
    """The current decays with the input just added, the membrane leaks, several spikes with
    subtractive reset, at most max_spikes."""
    node = XyloLIFNode(1, max_spikes=3)
    with torch.no_grad():
        node.bias.fill_(0.25)
    x = torch.tensor([[10.0], [0.0], [0.0]]).unsqueeze(1)  # [T, B, 1]
    spikes = node(x)[:, 0, 0]
    # step 0: i = 5, v = 5.25: 5 spikes capped at 3, v = 2.25; step 1: i = 2.5,
    # v = 1.125 + 2.5 + 0.25 = 3.875: 3 spikes, v = 0.875; step 2: i = 1.25,
    # v = 0.4375 + 1.25 + 0.25 = 1.9375: 1 spike
    assert spikes.tolist() == [3.0, 3.0, 1.0]
    assert float(node.v.detach()) == pytest.approx(0.9375)
    functional.reset_net(node)
    assert node.v == 0.0 and node.i_syn == 0.0


def test_the_gradient_is_lif_torchs_step_pwl_with_a_wider_window():
    node = XyloLIFNode(4, max_spikes=1, bias=False)
    # after i = x / 2 and v = i, v is -1.5, -0.5, 1.5 and 2.5: below the window (v_th - 2: no
    # gradient), in it, firing, and past the cap (one spike, the gradient still there)
    x = torch.tensor([[[-3.0, -1.0, 3.0, 5.0]]], requires_grad=True)
    spikes = node(x)
    spikes.sum().backward()
    assert spikes[0, 0].tolist() == [0.0, 0.0, 1.0, 1.0]
    assert x.grad[0, 0].tolist() == [0.0, 0.5, 0.5, 0.5]


@pytest.mark.skipif(LIF_TORCH is None, reason="Rockpool's LIFTorch does not import here "
                    "(benchmarks/xylo_venv.sh installs Rockpool 3.1.0)")
@pytest.mark.parametrize("max_spikes", [1, 31])
def test_the_neuron_is_rockpools_lif_torch(max_spikes):
    torch.manual_seed(0)
    n, T = 6, 12
    bias = torch.randn(n) * 0.3
    rockpool = LIF_TORCH((n,), leak_mode="bitshifts", dash_mem=torch.full((n,), 2.0),
                         dash_syn=torch.full((n,), 1.0), bias=bias, threshold=torch.ones(n),
                         max_spikes_per_dt=max_spikes)
    mine = XyloLIFNode(n, max_spikes=max_spikes, dash_mem=2, dash_syn=1)
    with torch.no_grad():
        mine.bias.copy_(bias)
    x = torch.randn(3, T, n) * 4  # Rockpool's [batch, time, channels]
    theirs, _, _ = rockpool(x)
    ours = mine(x.transpose(0, 1)).transpose(0, 1)
    assert theirs.sum() > 0 and (max_spikes == 1 or theirs.max() > 1)
    assert torch.equal(ours.detach(), theirs.detach())


@pytest.fixture(scope="module")
def untrained_xylo():
    torch.manual_seed(0)
    entry, variant = split_name("spiking-cnn:xylo")
    model = entry.build(variant).eval()
    x = torch.from_numpy(DIGITS.loader().x_test[:64])
    return model, walk(model, x[:1]), x


def test_the_variant_maps_onto_xylo_as_trained(untrained_xylo):
    """Xylo's rules run the net as the float neuron does: the spikes agree but for rounding."""
    model, layers, x = untrained_xylo
    assert [lay.detail.get("max_spikes") for lay in layers if lay.kind == "neuron"] == [31, 1]
    net = map_to_xylo(layers)
    assert (net.hidden.dash_mem, net.hidden.dash_syn, net.readout.max_spikes) == (1, 1, 1)
    agreement = compare_on_xylo(model, layers, x, None)
    assert agreement.spike_agreement > 0.9
    assert agreement.same_predictions >= 0.9 * agreement.samples


def test_a_synapse_bias_is_refused_for_xylos_neuron(untrained_xylo):
    model, layers, _ = untrained_xylo
    linear = layers[1].module
    linear.bias = torch.nn.Parameter(torch.zeros(linear.out_features))
    try:
        with pytest.raises(UsageError, match="synapses carry no bias"):
            map_to_xylo(layers)
    finally:
        linear.bias = None


def test_spike_counts_into_a_linear_layer_are_counted_as_events(untrained_xylo):
    """The readout layer gets the hidden neurons' spike counts: spikes x fan-out synaptic ops,
    no MACs (SpikingJelly's counters alone would take the counts for real values)."""
    model, _, x = untrained_xylo
    counts, _ = count(model, [x[:16]])
    hidden, readout = counts.layers["body.2"], counts.layers["body.3"]
    fired = float_spikes(model, x[:16])[0][0]
    assert hidden.spikes == int(fired.sum()) > int(fired.count_nonzero())  # several a step
    assert (readout.macs, readout.acs, readout.sops) == (0, hidden.spikes * 10, hidden.spikes * 10)
    assert counts.totals["synop"] == readout.sops
