"""edgekit's model.nir read by simulators that did not write it (issue 16).

SpikingJelly writes the file and imports it back in the export's own validation; here the same
file goes through snnTorch's ``import_from_nir`` and Norse's NIR import, each stepped through the
same input sequence one time step at a time. Every LIF layer's spikes and the output of every step
must equal SpikingJelly's, or each sample's first disagreement (earliest step, then earliest layer:
nothing it depends on disagrees yet) must sit at a threshold tie of SpikingJelly's run, recorded
here as the membrane potential before the spike test. SpikingJelly fires at v >= v_th, snnTorch
and Norse at v > v_th, so a membrane exactly on the threshold is the one place they may part.
"""
from __future__ import annotations

import importlib.util
import json
import warnings

import numpy as np
import pytest
import torch

from edgekit.data import load_dataset
from edgekit.exporters.nir import FIRING_RULE, MODEL_FILE, export_nir
from edgekit.registry import get_entry
from edgekit.spiking.layers import functional, neuron
from edgekit.targets import registry_source
from edgekit.training import train

READERS = ("snntorch", "norse")
missing = [name for name in READERS if importlib.util.find_spec(name) is None]
pytestmark = [
    pytest.mark.usefixtures("single_thread"),
    pytest.mark.skipif(bool(missing), reason=f"NIR readers not installed: {', '.join(missing)} "
                                             "(pip install snntorch norse, see pyproject.toml)"),
]

SAMPLES = 120
TIE = 1e-4  # |h - v_th| below this counts as a tie, as in edgekit.spiking.agreement


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The spiking-cnn, trained for three epochs (it fires and classifies), exported to NIR."""
    entry = get_entry("spiking-cnn")
    digits = load_dataset(entry.task)
    model = train(entry, digits, epochs=3).model.eval()
    result = export_nir(registry_source(entry, None, model), tmp_path_factory.mktemp("nir") / "art")
    x_seq = model.encode(torch.from_numpy(digits.x_test[:SAMPLES]))  # [T, B, 1, 8, 8]
    return result, model, x_seq


def _spikingjelly(model, x_seq):
    """Output per step, each LIF layer's spikes and its membrane before the spike test (h)."""
    lifs = [m for m in model.modules() if isinstance(m, neuron.LIFNode)]
    inputs: dict[int, torch.Tensor] = {}
    handles = [m.register_forward_hook(lambda m, a, out, i=i: inputs.__setitem__(i, (a[0], out)))
               for i, m in enumerate(lifs)]
    functional.reset_net(model)
    with torch.no_grad():
        out = model.forward_seq(x_seq)
    functional.reset_net(model)
    for h in handles:
        h.remove()
    spikes, membranes = [], []
    for i, m in enumerate(lifs):
        assert m.decay_input and m.v_reset == 0.0 and m.tau == 2.0 and m.v_threshold == 1.0
        x, s = inputs[i]
        v, hs = torch.zeros_like(x[0]), []
        for t in range(x.shape[0]):  # SpikingJelly's charge, hard reset to 0
            h = v + (x[t] - (v - m.v_reset)) / m.tau
            hs.append(h)
            v = h * (1.0 - (h >= m.v_threshold).float())
        hs = torch.stack(hs)
        assert torch.equal((hs >= m.v_threshold).float(), s)  # the recorded h is SpikingJelly's
        spikes.append(s)
        membranes.append(hs)
    return out, spikes, membranes


def _step(module, x_seq, lif_types, stateful_call):
    """Run an imported per-step module over T; collect the output and every LIF's spikes."""
    lifs = [m for m in module.modules() if isinstance(m, lif_types)]
    seen: dict[int, list[torch.Tensor]] = {i: [] for i in range(len(lifs))}

    def hook(i):
        def record(m, args, out):
            seen[i].append((out[0] if isinstance(out, tuple) else out).detach().clone())
        return record

    handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(lifs)]
    with torch.no_grad():
        outs = stateful_call(module, x_seq)
    for h in handles:
        h.remove()
    return torch.stack(outs), [torch.stack(seen[i]).float() for i in range(len(lifs))]


def _snntorch(path, x_seq):
    import nir
    import snntorch
    from snntorch.import_nir import import_from_nir

    module = import_from_nir(nir.read(str(path)))
    for m in module.modules():  # from rest
        if isinstance(m, snntorch.Leaky):
            m.reset_mem()

    def call(module, x_seq):
        return [module(x)[0] for x in x_seq]

    return _step(module, x_seq, snntorch.Leaky, call)


def _norse(path, x_seq, dt):
    """Norse 1.1.0's ``from_nir`` maps nir.SumPool2d but has no entry for nir.AvgPool2d (a NIR
    primitive since nir 1.0); the same ``nirtorch.load`` call with Norse's own node mapping and
    torch's AvgPool2d for that node. Every neuron and weight is still Norse's import."""
    import nir
    import nirtorch
    from norse.torch.module.lif_box import LIFBoxCell
    from norse.torch.utils.import_nir import _import_norse_module

    def node_map(node):
        if isinstance(node, nir.AvgPool2d):
            return torch.nn.AvgPool2d(tuple(int(k) for k in node.kernel_size),
                                      tuple(int(s) for s in node.stride),
                                      tuple(int(p) for p in node.padding))
        return _import_norse_module(node, dt=dt)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = nirtorch.load(nir.read(str(path)), node_map)

    def call(module, x_seq):
        state, outs = None, []
        for x in x_seq:
            out, state = module(x, state)
            outs.append(out)
        return outs

    return _step(module, x_seq, LIFBoxCell, call)


def _untied_roots(ref_spikes, membranes, spikes) -> list[str]:
    """Each sample's first disagreement (step, then layer) that is not at a threshold tie."""
    bad = []
    T, B = ref_spikes[0].shape[:2]
    for b in range(B):
        for t in range(T):
            diffs = [(layer, ref_spikes[layer][t, b] != spikes[layer][t, b])
                     for layer in range(len(ref_spikes))]
            diffs = [(layer, d) for layer, d in diffs if d.any()]
            if diffs:
                layer, d = diffs[0]
                margin = (membranes[layer][t, b][d] - 1.0).abs()
                if margin.max() >= TIE:
                    bad.append(f"sample {b}, step {t}, LIF layer {layer}: "
                               f"|h - v_th| = {margin.max().item():.3g}")
                break
    return bad


@pytest.mark.parametrize("reader", READERS)
def test_model_nir_runs_the_same_in_an_independent_simulator(exported, reader):
    result, model, x_seq = exported
    path = result.folder / MODEL_FILE
    manifest = json.loads((result.folder / "manifest.json").read_text())
    import nir

    metadata = nir.read(str(path)).metadata
    dt = float(metadata["dt"])
    assert dt == manifest["dt_s"] == 1e-4  # snnTorch's importer assumes 1e-4 without reading it
    assert metadata["firing_rule"] == manifest["firing_rule"] == FIRING_RULE

    ref_out, ref_spikes, membranes = _spikingjelly(model, x_seq)
    rates = [s.mean().item() for s in ref_spikes]
    assert min(rates) > 0.005, f"reference too silent to test anything: firing rates {rates}"

    out, spikes = _snntorch(path, x_seq) if reader == "snntorch" else _norse(path, x_seq, dt)
    assert [s.shape for s in spikes] == [s.shape for s in ref_spikes]
    flips = sum(int((a != b).sum()) for a, b in zip(ref_spikes, spikes, strict=True))
    assert _untied_roots(ref_spikes, membranes, spikes) == []
    if flips == 0:
        np.testing.assert_allclose(out.numpy(), ref_out.numpy(), atol=1e-5, rtol=1e-5)
    ties = sum(int(((h - 1.0).abs() < TIE).sum()) for h in membranes)
    exact = sum(int((h == 1.0).sum()) for h in membranes)
    print(f"{reader}: {flips} spike differences over {sum(s.numel() for s in spikes)} elements; "
          f"{ties} near-ties (|h - v_th| < {TIE}), {exact} exact, in SpikingJelly's run; "
          f"firing rates {[round(r, 3) for r in rates]}; "
          f"max |out diff| {(out - ref_out).abs().max().item():.3g}")
