"""Mamba-style selective state-space scan in plain PyTorch, two state-coupled streams at once.

Selective SSM (S6; Gu & Dao, "Mamba", arXiv:2312.00752, Algorithm 2): per channel e and state n,

    h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t u_t,      y_t = C_t · h_t + D u_t,

with Δ_t = softplus(W_Δ u_t + b), B_t = W_B u_t, C_t = W_C u_t input-dependent ("selective") and
A = -exp(A_log) diagonal. mamba-ssm's fused CUDA kernel neither runs on a CPU nor exports to
ONNX, and the coupling below is outside it, so the scan is written with plain tensor ops.

Cross-stream state coupling [ours; WiFi-Mamba, ICML 2026, gives no formula]: each stream's state
update receives a learned per-(channel, state) share of the other stream's previous state,

    hᵃ_t = āᵃ_t hᵃ_{t-1} + κᵃ_t hᵖ_{t-1} + Δᵃ_t Bᵃ_t uᵃ_t,    κᵃ_t = tanh(Wᵃ) ⊙ (1 - āᵃ_t)

(and the converse), āᵃ_t = exp(Δᵃ_t Aᵃ). The share is taken from the part of the state that the
step refreshes (1 - ā), so every row of the 2x2 transition [[āᵃ, κᵃ], [κᵖ, āᵖ]] sums in absolute
value to below 1: the joint state stays bounded however long it is carried (the persistent
memory relies on this). W starts at zero, so training starts from two independent streams.

The recurrence is linear, h_t = M_t h_{t-1} + v_t per (e, n) with a 2x2 M_t, and runs as:

- up to ``SINGLE_CHUNK`` packets, the plain loop (``step_scan``);
- beyond, the chunked scan [ours] (``chunked_scan``): chunks of packets scanned side by side from
  a zero state, a short loop carrying the true state across chunk boundaries, then every chunk
  again from its true initial state;
- in eager inference on a CPU, one compiled kernel (``edgekit.kernels.wifi_mamba_scan``,
  ``fused=True``; the blocks choose it wherever ``fused_applies``);
- under ``torch.onnx.export``, the ``export_scan`` the caller hands in (WiFi-Mamba's blocks hand
  ``onnx_scan.scan_for_export``, one ONNX ``Scan`` operator), else the loop or chunks unrolled.

Inside the scan the states are laid out (..., 2, N, E), channels last (``transitions``).
Everything is fixed-shape tensor arithmetic, so the scan exports to ONNX and returns the final
states that the persistent memory carries. Why each of these, what else was tried and what it
measured: docs/methods/wifi_mamba.md, "The scan".
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

SINGLE_CHUNK = 150  # up to this many packets the scan is one chunk: the plain loop
# How a graph export writes the scan: ``chunked_scan``'s inputs (Δ, u, B, C, A, tanh(W), h) ->
# C · h (B, L, 2, E) and the final state (B, 2, N, E); ``onnx_scan.scan_for_export`` is one.
ExportScan = Callable[..., tuple[torch.Tensor, torch.Tensor]]


class SelectiveSSM(nn.Module):
    """One stream's projections (in, causal depthwise conv, x -> Δ,B,C, out) and A, D."""

    def __init__(self, d_model: int, d_state: int = 16, expand: int = 2, d_conv: int = 4,
                 dt_rank: int | None = None) -> None:
        super().__init__()
        e = expand * d_model
        self.d_inner, self.d_state = e, d_state
        self.dt_rank = dt_rank or math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * e, bias=False)
        self.conv = nn.Conv1d(e, e, d_conv, groups=e, padding=d_conv - 1)
        self.x_proj = nn.Linear(e, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, e)
        dt = torch.exp(torch.rand(e) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        with torch.no_grad():  # Mamba's init: Δ in [1e-3, 0.1] through the inverse softplus
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1).float()).repeat(e, 1))
        self.D = nn.Parameter(torch.ones(e))
        self.out_proj = nn.Linear(e, d_model, bias=False)

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(B, L, d) -> u, z, Δ (B, L, E); B, C (B, L, N): everything the scan needs but h."""
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (B, L, E) each
        u = F.silu(self.causal_conv(u))
        dt, b, c = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = softplus(self.dt_proj(dt))  # (B, L, E)
        return u, z, dt, b, c

    def causal_conv(self, u: torch.Tensor) -> torch.Tensor:
        """The depthwise causal convolution, (B, L, E) -> (B, L, E). Eager torch runs it as K
        shifted multiply-adds over the channels-last sequence (``self.conv``'s weights, the same
        result), faster than oneDNN's convolution at this size; a traced graph keeps the one Conv
        node, which ONNX Runtime runs faster than the shifts, and so does a dispatch mode (the
        FLOP counter counts a convolution, not multiply-adds). Measured:
        docs/methods/wifi_mamba.md, "Small operations"."""
        seq, taps = u.shape[1], self.conv.kernel_size[0]
        if not eager():
            return self.conv(u.transpose(1, 2))[..., :seq].transpose(1, 2)
        weight = self.conv.weight[:, 0].t()  # (K, E)
        padded = F.pad(u, (0, 0, taps - 1, 0))
        out = torch.addcmul(self.conv.bias, padded[:, :seq], weight[0])
        for k in range(1, taps):
            out = torch.addcmul(out, padded[:, k:k + seq], weight[k])
        return out

    def A(self) -> torch.Tensor:
        return -torch.exp(self.A_log)  # (E, N)


def softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x), written as max(x, 0) + log1p(e^-|x|): the same function (no overflow for
    large x, no threshold; within 1.5e-7 relative of torch's), and seven cheap nodes on ONNX
    Runtime, whose own Softplus kernel is slower (docs/methods/wifi_mamba.md, "Small
    operations")."""
    return x.clamp_min(0) + torch.log1p(torch.exp(-x.abs()))


def scan_constants(A: torch.Tensor, coupling: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A and the coupling share tanh(W), (2, E, N) as the parameters hold them, in the scan's
    layout (2, N, E), contiguous: made once per scan, since eager torch multiplies a transposed
    view slower at every position."""
    return (A.transpose(-1, -2).contiguous(),
            torch.tanh(coupling).transpose(-1, -2).contiguous())


def transitions(dt: torch.Tensor, u: torch.Tensor, b: torch.Tensor,
                A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence's per-packet terms, each (..., 2, N, E) (2: amplitude, phase; states before
    channels, see below): decay ā and drive ΔBu. Δ, u (..., 2, E); B (..., 2, N); A (2, N, E)
    from ``scan_constants``. The leading axes are (B, L), or (B, chunks, 1) at one position of
    the chunked scan. The cross share κ = tanh(W) ⊙ (1 - ā) is ``cross(share, decay)``.

    The E channels are the last axis: every product with a per-channel factor (Δ, Δu) then
    broadcasts over rows of E values rather than of N (16), which ONNX Runtime's CPU kernels do
    much faster (docs/methods/wifi_mamba.md, "Layout")."""
    decay = torch.exp(dt.unsqueeze(-2) * A)
    drive = b.unsqueeze(-1) * (dt * u).unsqueeze(-2)
    return decay, drive


def cross(share: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """κ = tanh(W) ⊙ (1 - ā), in two nodes where addcmul exports three."""
    return share - share * decay


def read_out(states: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """y = C · h per channel: states (..., 2, N, E), C (..., 2, N) -> (..., 2, E), as one
    batched (1 x N) @ (N x E) product instead of a broadcast multiply and a sum."""
    return (c.unsqueeze(-2) @ states).squeeze(-2)


def step_scan(decay: torch.Tensor, share: torch.Tensor, drive: torch.Tensor,
              h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence one packet at a time: (B, L, 2, N, E) terms, tanh(W) (2, N, E), h
    (B, 2, N, E) -> states (B, L, 2, N, E) and the final state; what a frame of one chunk runs,
    tested against the closed form. ``flip`` swaps the streams, and each step is
    h ← ā ⊙ (h - g) + g + ΔBu with g = tanh(W) ⊙ flip(h), which is ā h + κ flip(h) + ΔBu with
    κ = tanh(W)(1 - ā) and spares making κ for every packet (six nodes a step against five, and
    no frame of κ to make and split; docs/methods/wifi_mamba.md, "Small operations"). Packets
    are split off with their time axis kept, which exports to ONNX without a Squeeze and an
    Unsqueeze per packet."""
    h, states = h.unsqueeze(1), []
    for d, v in zip(decay.split(1, 1), drive.split(1, 1), strict=True):
        g = share * h.flip(-3)
        h = torch.addcmul(g + v, d, h - g)
        states.append(h)
    return torch.cat(states, 1), h.squeeze(1)


def chunk_size(length: int) -> int:
    """Packets per chunk: the whole frame up to SINGLE_CHUNK; else about √(3L/20), which balances
    the ~20·S in-chunk against the ~3·L/S carry operations (and keeps the ONNX graph small)."""
    if length <= SINGLE_CHUNK:
        return length
    return math.ceil(math.sqrt(3 * length / 20))


def _chunk_starts(terms: list, h: torch.Tensor, chunks: int) -> torch.Tensor:
    """The true state entering each chunk (B, chunks, 1, 2, N, E), from each position's terms
    (B, chunks, 1, 2, N, E); h (B, 2, N, E)."""
    # Pass 1: each chunk from zero (the first from h), and each chunk's 2x2 transition product
    # P = M_S ⋯ M_1, kept by rows: diag[i] = P_ii, off[i] = P_i,other.
    h = h.unsqueeze(1).unsqueeze(1)  # (B, 1, 1, 2, N, E)
    local = F.pad(h, (0, 0, 0, 0, 0, 0, 0, 0, 0, chunks - 1))
    diag, off = terms[0][0], terms[0][1]
    for j, (d, k, v) in enumerate(terms):
        local = torch.addcmul(torch.addcmul(v, d, local), k, local.flip(-3))
        if j:
            diag, off = (torch.addcmul(d * diag, k, off.flip(-3)),
                         torch.addcmul(d * off, k, diag.flip(-3)))
    # Carry across chunks: the state entering chunk i + 1 is P_i (state entering i) + local end.
    ends, diag, off = local.split(1, 1), diag.split(1, 1), off.split(1, 1)
    starts = [h, ends[0]]
    for i in range(1, chunks - 1):
        s = starts[-1]
        starts.append(torch.addcmul(torch.addcmul(ends[i], diag[i], s), off[i], s.flip(-3)))
    return torch.cat(starts, 1)


def chunked_scan(dt: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                 A: torch.Tensor, share: torch.Tensor, h: torch.Tensor,
                 size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The scan in chunks of ``size`` packets side by side: C_t · h_t (B, L, 2, E) and the final
    state (B, 2, N, E), from h (B, 2, N, E). Inputs as ``transitions`` takes them, C (B, L, 2, N);
    A and tanh(W) from ``scan_constants``; L must be a multiple of ``size``
    (``dual_selective_scan`` pads). The (B, L, 2, N, E) terms
    and states are never built whole, only each position's terms for all chunks at once."""
    length = dt.shape[1]
    if length % size:
        raise ValueError(f"{length} packets do not split into chunks of {size}")
    chunks = length // size
    # per position, all chunks: (B, chunks, 1, 2, ...), the position axis kept (see step_scan)
    dt, u, b, c = (x.unflatten(1, (chunks, size)).split(1, 2) for x in (dt, u, b, c))
    terms = []
    for j in range(size):
        decay, drive = transitions(dt[j], u[j], b[j], A)
        terms.append((decay, cross(share, decay), drive))
    state = _chunk_starts(terms, h, chunks)
    # Pass 2: every chunk from its true initial state, reading out C · h as it goes.
    ys = []
    for (d, k, v), c_j in zip(terms, c, strict=True):
        state = torch.addcmul(torch.addcmul(v, d, state), k, state.flip(-3))
        ys.append(read_out(state, c_j))
    return torch.cat(ys, 2).flatten(1, 2), state[:, -1, 0]


def eager() -> bool:
    """Whether operations run as themselves: not traced or compiled (ONNX export,
    torch.compile) and under no dispatch mode (``FlopCounterMode`` and the like), which see only
    tensor operations, so the eager-only fast paths here would hide work from them."""
    return not (torch.jit.is_tracing() or torch.compiler.is_compiling()
                or is_in_torch_dispatch_mode())


def fused_applies(*tensors: torch.Tensor) -> bool:
    """Whether the kernel may replace the tensor-operation scan here: no gradient wanted,
    ``eager()``, float32 tensors in CPU memory."""
    if torch.is_grad_enabled() or not eager():
        return False
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


# Over 8 parameters: the two streams' inputs and parameters of the paper's dual scan, each a tensor
# the kernel needs, and three switches of how to run it
def dual_selective_scan(a: tuple[torch.Tensor, ...], p: tuple[torch.Tensor, ...],
                        ssm_a: SelectiveSSM, ssm_p: SelectiveSSM, coupling: torch.Tensor,
                        h: torch.Tensor, chunk: int | None = None,
                        fused: bool = False,
                        export_scan: ExportScan | None = None) -> tuple[torch.Tensor, ...]:
    """Scan both streams over time with state coupling: y_a, y_p (B, L, E) and the final states
    (B, 2, E, N). ``a``/``p`` are the ``prepare`` outputs (u, z, Δ, B, C), ``h`` the initial
    states, ``chunk`` packets per chunk (None: ``chunk_size``; at least L: the plain loop);
    ``fused``: the compiled kernel instead (``edgekit.kernels.wifi_mamba_scan``; inference
    only, any length); ``export_scan``: what runs under ``torch.onnx.export`` instead of the
    unrolled loop or chunks (``onnx_scan.scan_for_export``: one ONNX ``Scan`` at any length).

    The sequence is padded to whole chunks with Δ = 0, which makes ā = 1, κ = 0 and ΔBu = 0: a
    padded step carries the state through unchanged, so the final state is the last packet's."""
    length = a[0].shape[1]
    size = min(chunk_size(length) if chunk is None else chunk, length)
    u, dt, b, c = (torch.stack([a[i], p[i]], 2) for i in (0, 2, 3, 4))  # (B, L, 2, ...)
    A, share = scan_constants(torch.stack([ssm_a.A(), ssm_p.A()]), coupling)
    h = h.transpose(-1, -2)  # (B, 2, N, E) inside the scan (``transitions``)
    d_skip = torch.stack([ssm_a.D, ssm_p.D])
    if fused:
        from edgekit.kernels.wifi_mamba_scan import fused_scan  # imports Numba (0.6 s)

        y, h = fused_scan(dt, u, b, c, A, share, d_skip, h)
        h = h.transpose(-1, -2)
        return y[:, :, 0], y[:, :, 1], h
    if export_scan is not None and torch.onnx.is_in_onnx_export():
        y, h = export_scan(dt, u, b, c, A, share, h)
    elif size == length:
        decay, drive = transitions(dt, u, b, A)
        states, h = step_scan(decay, share, drive, h)
        y = read_out(states, c)  # C_t · h_t, (B, L, 2, E)
    else:
        pad = (0, 0, 0, 0, 0, -length % size)
        y, h = chunked_scan(*(F.pad(x, pad) for x in (dt, u, b, c)), A, share, h, size)
        y = y[:, :length]
    h = h.transpose(-1, -2)
    y = y + d_skip * u
    return y[:, :, 0], y[:, :, 1], h


def reference_scan(decay: torch.Tensor, cross: torch.Tensor, drive: torch.Tensor,
                   h: torch.Tensor) -> torch.Tensor:
    """The coupled states by the closed form h_t = Σ_s (M_t ⋯ M_{s+1}) v_s + (M_t ⋯ M_1) h_0,
    each product built backwards from t with the 2x2 entries written out; O(L²), for tests only:
    an independent check of the scans. Terms (B, L, 2, N, E), h (B, 2, N, E) -> states."""
    one, zero = torch.ones_like(h[:, 0]), torch.zeros_like(h[:, 0])
    out = []
    for t in range(decay.shape[1]):
        aa, ap, pa, pp = one, zero, zero, one  # q = M_t ⋯ M_{s+1}, the identity at s = t
        acc_a, acc_p = zero, zero
        for s in range(t, -1, -1):
            v_a, v_p = drive[:, s, 0], drive[:, s, 1]
            acc_a = acc_a + aa * v_a + ap * v_p
            acc_p = acc_p + pa * v_a + pp * v_p
            m_aa, m_ap = decay[:, s, 0], cross[:, s, 0]  # q <- q M_s
            m_pa, m_pp = cross[:, s, 1], decay[:, s, 1]
            aa, ap = aa * m_aa + ap * m_pa, aa * m_ap + ap * m_pp
            pa, pp = pa * m_aa + pp * m_pa, pa * m_ap + pp * m_pp
        out.append(torch.stack([acc_a + aa * h[:, 0] + ap * h[:, 1],
                                acc_p + pa * h[:, 0] + pp * h[:, 1]], 1))
    return torch.stack(out, 1)
