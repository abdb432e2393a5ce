"""The node-lean neurons that exports trace (edgekit.spiking.lean_neurons): bitwise what
SpikingJelly computes, and only where they apply."""
from __future__ import annotations

import pytest
import torch

from edgekit.spiking.layers import functional, neuron, surrogate
from edgekit.spiking.lean_neurons import lean_neurons

CONFIGS = [  # (kind, decay_input, v_reset, v_threshold, tau)
    ("lif", True, 0.0, 1.0, 2.0),  # the SSA authors' LIF, every registry net
    ("lif", True, 0.0, 0.5, 2.0),  # the Spikingformer's attention neuron
    ("lif", True, -0.3, 1.0, 3.0),
    ("lif", False, 0.0, 1.0, 2.0),
    ("lif", False, -0.3, 0.5, 3.0),
    ("if", None, 0.0, 1.0, None),
    ("if", None, -0.3, 0.5, None),
]


def _neuron(kind: str, decay: bool | None, reset: float, threshold: float, tau: float | None):
    common = {"v_threshold": threshold, "v_reset": reset, "surrogate_function": surrogate.ATan(),
              "detach_reset": True, "step_mode": "m"}
    if kind == "lif":
        return neuron.LIFNode(tau=tau, decay_input=decay, **common).eval()
    return neuron.IFNode(**common).eval()


def _two_runs(node, x: torch.Tensor) -> list[torch.Tensor]:
    """Spikes, state and voltage trace from rest, then spikes of a second run carrying the state."""
    functional.reset_net(node)
    first = node(x)
    record = [first, node.v.clone(), node.v_seq.clone()]
    return [*record, node(x * 0.7)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_lean_neurons_compute_bitwise_what_spikingjelly_computes(config):
    node = _neuron(*config)
    node.store_v_seq = True
    x = torch.randn(6, 3, 200, generator=torch.Generator().manual_seed(0)) * 2
    expected = _two_runs(node, x)
    with lean_neurons(node) as swapped:
        got = _two_runs(node, x)
    assert swapped == 1
    assert 0.02 < float(expected[0].mean()) < 0.95  # it fires, and not on every step
    for e, g in zip(expected, got, strict=True):
        assert e.dtype == g.dtype and torch.equal(e, g)


def test_only_eval_multi_step_hard_reset_lif_and_if_are_swapped_and_all_are_restored():
    lif, plif = _neuron(*CONFIGS[0]), neuron.ParametricLIFNode(step_mode="m").eval()
    soft = neuron.LIFNode(v_reset=None, step_mode="m").eval()
    single = neuron.LIFNode(step_mode="s").eval()
    training = neuron.LIFNode(step_mode="m").train()
    net = torch.nn.Sequential(lif, plif, soft, single, training)
    with lean_neurons(net) as swapped:
        assert swapped == 1 and "multi_step_forward" in vars(lif)
    assert not any("multi_step_forward" in vars(m) for m in net)
    with pytest.raises(RuntimeError, match="inside"), lean_neurons(net):
        raise RuntimeError("inside")
    assert "multi_step_forward" not in vars(lif)  # restored though the block raised


def test_a_net_without_spikingjelly_neurons_is_left_alone():
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    with lean_neurons(net) as swapped:
        assert swapped == 0


def test_a_multistep_net_infers_with_lean_neurons_and_trains_with_spikingjelly_s():
    from edgekit.registry import create_model
    from edgekit.spiking.layers import calibrate_batchnorm, mean_firing_rate

    model = create_model("spikingformer")
    x = torch.rand(8, *model.input_shape, generator=torch.Generator().manual_seed(0))
    calibrate_batchnorm(model, [x])
    assert mean_firing_rate(model, x) > 0.02
    lean_seen = []
    for m in model.modules():
        if isinstance(m, neuron.BaseNode):
            m.register_forward_hook(lambda mod, a, out: lean_seen.append(
                "multi_step_forward" in vars(mod)))
    with torch.no_grad():
        logits = model.eval()(x)
        assert lean_seen and all(lean_seen)
        lean_seen.clear()
        functional.reset_net(model)
        spikingjelly = model.forward_seq(model.encode(x)).mean(0)  # bypasses forward's swap
        assert lean_seen and not any(lean_seen)
    assert torch.equal(logits, spikingjelly)
    lean_seen.clear()
    model.train()(x)
    assert lean_seen and not any(lean_seen)
