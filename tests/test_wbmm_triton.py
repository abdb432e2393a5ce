"""The fused Triton WBMM kernel (edgekit.kernels.wbmm_triton) equals the torch compact form,
run on the CPU by Triton's interpreter (TRITON_INTERPRET=1). Triton is not an edgekit
dependency (about 1 GB installed, and CUDA builds of torch bring it): without it this skips."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from edgekit.kernels.wbmm import WBMM

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="Triton is not installed (pip install triton; about 1 GB, "
                                       "so not in the dev extra)")


@pytest.fixture
def interpreted(monkeypatch):
    from edgekit.kernels import wbmm_triton

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    wbmm_triton._kernel.cache_clear()  # triton.jit reads the variable when it decorates
    yield wbmm_triton
    wbmm_triton._kernel.cache_clear()


@pytest.mark.parametrize("channels, height, width, window, batch", [
    (3, 9, 11, 4, 2),   # padded windows on both sides, d = 16
    (2, 7, 14, 7, 1),   # d = 49: padded to 64 columns inside the kernel
])
def test_fused_kernel_equals_the_compact_form(interpreted, channels, height, width, window,
                                              batch):
    torch.manual_seed(0)
    op = WBMM(channels, window).eval().to_deploy("compact")
    with torch.no_grad():
        op.table.normal_()
        op.bias.normal_()
        x = torch.randn(batch, channels, height, width)
        got = interpreted.wbmm_compact_triton(x, op.table, window, op.bias)
        want = op(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tile", range(8))
def test_every_tuned_tile_equals_the_compact_form(interpreted, monkeypatch, tile):
    """Each tile the GPU's autotuner may pick, alone (the interpreter runs only the first)."""
    assert len(interpreted._TILES) == 8
    monkeypatch.setattr(interpreted, "_TILES", interpreted._TILES[tile:tile + 1])
    interpreted._kernel.cache_clear()
    torch.manual_seed(tile)
    op = WBMM(3, 7).eval().to_deploy("compact")
    with torch.no_grad():
        op.table.normal_()
        op.bias.normal_()
        x = torch.randn(3, 3, 15, 16)  # 27 padded windows of d = 49: partial row and k tiles
        torch.testing.assert_close(interpreted.wbmm_compact_triton(x, op.table, 7, op.bias),
                                   op(x), rtol=1e-5, atol=1e-5)
