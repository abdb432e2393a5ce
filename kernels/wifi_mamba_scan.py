"""WiFi-Mamba's coupled dual-stream scan as one compiled CPU kernel, for eager inference.

Unfused, the scan is six tensor operations per packet and block (``ssm.step_scan``), each on a
(2, N, E) state of 2,048 floats: in eager torch about 18 µs a packet of dispatch overhead for
perhaps 1 µs of arithmetic, so at 20-200 packets the loop alone took about half of WiFi-Mamba's
time and left it slower than a transformer twelve times its size (benchmarks/README.md). Here the
whole recurrence, its drive ΔBu, the read-out C · h and the skip D u run in one pass over the
state per packet, as mamba-ssm's CUDA kernel does on a GPU (which neither CPU backend has),
compiled by Numba on first use (about 2 s, then cached under ``$EDGEKIT_HOME/numba``).

It computes what ``edgekit.methods.wifi_mamba.ssm.dual_selective_scan`` does (its reference),
in the same order of operations per element (the step h ← ā (h - g) + g + ΔBu with g = tanh(W)
⊙ flip(h)); only the read-out's sums are added in another order (within about 1e-6 of the
unfused scan, tested). It has no gradient and cannot be traced, so training and ONNX export
keep the tensor-operation scan (``ssm.fused_applies`` says when a block may use this one).
"""
from __future__ import annotations

import os

from edgekit.paths import edgekit_home

# Numba caches the compiled kernel beside this file, or in the user's cache where that is not
# writable, and fails at import where neither is; edgekit's own cache folder is known to be usable.
os.environ.setdefault("NUMBA_CACHE_DIR", str(edgekit_home() / "numba"))

import numba  # noqa: E402 (reads NUMBA_CACHE_DIR when first imported)
import numpy as np  # noqa: E402
import torch  # noqa: E402


# Over 8 parameters: a numba kernel takes its arrays one by one (no dataclass in nopython mode)
@numba.njit(cache=True, nogil=True, boundscheck=False)
def _scan(decay, dt, u, b, c, d_skip, share, h, y):
    """decay (B, L, 2, N, E); Δ, u (B, L, 2, E); B, C (B, L, 2, N); D (2, E); tanh(W) (2, N, E);
    h (B, 2, N, E), updated in place to the final state; y (B, L, 2, E) written."""
    batch, length, _, n_state, width = decay.shape
    for i in range(batch):
        for t in range(length):
            for s in range(2):
                for e in range(width):
                    y[i, t, s, e] = d_skip[s, e] * u[i, t, s, e]
            for n in range(n_state):
                b_a, b_p = b[i, t, 0, n], b[i, t, 1, n]
                c_a, c_p = c[i, t, 0, n], c[i, t, 1, n]
                for e in range(width):
                    h_a, h_p = h[i, 0, n, e], h[i, 1, n, e]
                    g_a, g_p = share[0, n, e] * h_p, share[1, n, e] * h_a
                    v_a = b_a * (dt[i, t, 0, e] * u[i, t, 0, e])
                    v_p = b_p * (dt[i, t, 1, e] * u[i, t, 1, e])
                    h_a = (g_a + v_a) + decay[i, t, 0, n, e] * (h_a - g_a)
                    h_p = (g_p + v_p) + decay[i, t, 1, n, e] * (h_p - g_p)
                    h[i, 0, n, e], h[i, 1, n, e] = h_a, h_p
                    y[i, t, 0, e] += c_a * h_a
                    y[i, t, 1, e] += c_p * h_p


def fused_scan(dt: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
               A: torch.Tensor, share: torch.Tensor, d_skip: torch.Tensor,
               h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """C_t · h_t + D u_t (B, L, 2, E) and the final state (B, 2, N, E), from Δ, u (B, L, 2, E),
    B, C (B, L, 2, N), A and tanh(W) (2, N, E) from ``ssm.scan_constants``, D (2, E) and the
    initial state h (B, 2, N, E). The decay exp(Δ A) is made by torch for the whole frame at
    once (its vectorised exp; the kernel's own would be scalar)."""
    decay = torch.exp(dt.unsqueeze(-2) * A)
    state = h.clone(memory_format=torch.contiguous_format)
    y = torch.empty_like(u, memory_format=torch.contiguous_format)
    _scan(*(_array(t) for t in (decay, dt, u, b, c, d_skip, share)), state.numpy(), y.numpy())
    return y, state


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()
