"""WiFi-Mamba and the PETR-style baseline: the scan, coupling, memory, sizes, ONNX export."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgekit.errors import UnknownNameError
from edgekit.methods.wifi_mamba.ssm import SelectiveSSM, dual_selective_scan, reference_scan
from edgekit.registry import create_model

pytestmark = pytest.mark.usefixtures("single_thread")


def _prepared(seed, batch=2, seq=12, d=16):
    torch.manual_seed(seed)
    ssm = SelectiveSSM(d, d_state=4, expand=2)
    return ssm, ssm.prepare(torch.randn(batch, seq, d))


def _zero_coupling(e):
    k = torch.nn.Linear(e, e, bias=False)
    torch.nn.init.zeros_(k.weight)
    return k


@torch.no_grad()
def test_loop_scan_matches_the_closed_form():
    ssm_a, pa = _prepared(0)
    ssm_p, pp = _prepared(1)
    e, n = ssm_a.d_inner, ssm_a.d_state
    h0 = torch.randn(2, e, n)
    k = _zero_coupling(e)
    y_a, y_p, _, _ = dual_selective_scan(pa, pp, ssm_a, ssm_p, k, k, h0, torch.zeros(2, e, n))
    u, _, dt, b, c = pa
    torch.testing.assert_close(y_a, reference_scan(u, dt, ssm_a.A(), b, c, ssm_a.D, h0),
                               atol=1e-5, rtol=1e-4)


@torch.no_grad()
def test_scan_is_causal_and_coupling_links_the_streams():
    ssm_a, pa = _prepared(0)
    ssm_p, pp = _prepared(1)
    e, n = ssm_a.d_inner, ssm_a.d_state
    h = torch.zeros(2, e, n)
    k0 = _zero_coupling(e)
    k1 = torch.nn.Linear(e, e, bias=False)
    changed = tuple(t.clone() for t in pp)
    changed[0][:, 6:] += 1.0  # phase stream input changes from step 6 on
    for k, linked in ((k0, False), (k1, True)):
        base = dual_selective_scan(pa, pp, ssm_a, ssm_p, k, k, h, h)
        other = dual_selective_scan(pa, changed, ssm_a, ssm_p, k, k, h, h)
        torch.testing.assert_close(base[1][:, :6], other[1][:, :6])  # causal
        assert not torch.allclose(base[1][:, 6:], other[1][:, 6:])
        assert torch.allclose(base[0], other[0]) != linked  # amplitude sees phase only if coupled


@torch.no_grad()
def test_persistent_memory_is_gated_and_bounded():
    torch.manual_seed(0)
    model = create_model("wifi-mamba").eval()
    x = torch.randn(1, 2, 270, 20)
    p0, _, mem = model.forward_stream(x)
    p1, _, _ = model.forward_stream(x, mem)
    assert not torch.allclose(p0, p1)  # memory changes the next frame's output
    for block in model.blocks:
        block.memory_gate.fill_(-torch.inf)  # gate closed: exactly the memoryless model
    torch.testing.assert_close(model.forward_stream(x, mem)[0], p0)
    for block in model.blocks:
        block.memory_gate.fill_(10.0)  # gate fully open: still bounded, |exp(ΔA)| < 1
    norms = []
    for _ in range(30):
        _, _, mem = model.forward_stream(x, mem)
        norms.append(float(mem.abs().max()))
    assert np.isfinite(norms).all() and max(norms[15:]) < 2 * max(norms[:15])


def test_parameter_counts():
    def count(name):
        with torch.device("meta"):
            return sum(p.numel() for p in create_model(name).parameters())

    assert count("wifi-mamba:full") == 2_142_083  # the paper's 2.14M
    assert count("wifi-petr:paper") == 12_869_163  # 256-d, 8 heads, 6 enc / 3 dec, 100 queries
    assert count("wifi-mamba") <= count("wifi-petr") / 10


def test_unknown_variant_lists_valid_ones():
    with pytest.raises(UnknownNameError, match="wifi-mamba:full"):
        create_model("wifi-mamba:huge")
