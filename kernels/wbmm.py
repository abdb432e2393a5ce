"""WBMM: windowed batch matrix multiplication (arXiv 2607.02097, ICML 2026).

A depthwise convolution gathers k·k scattered neighbours per output. WBMM instead cuts the feature
map into contiguous, non-overlapping wh x ww windows (d = wh·ww positions each) and multiplies every
window by a per-channel d x d matrix, in one batched matmul over all windows:

    R  in R^{C x (2wh-1)(2ww-1)}      per-channel relative-position table (the weights)
    I[i, j] = (h_i - h_j + wh - 1)·(2ww - 1) + (w_i - w_j + ww - 1)     (i: input, j: output)
    M  = R[:, I]                      [C, d, d]
    y  = x_win @ M + x_win            x_win: [C, B·nWin, d], identity shortcut inside the operator

Because M[c, i, j] depends only on the offset between input i and output j, a window of size w is
*exactly* a (2w-1) x (2w-1) depthwise convolution applied independently inside each window
(7 <-> 13x13, 14 <-> 27x27); it is not a sliding convolution. H and W are zero-padded (right and
bottom) to multiples of the window and the output is cropped back.

Two deploy forms (the authors' WBMM-NC / WBMM-C):
  compact  keeps R and indexes it on every call (a Gather, then the MatMul);
  cached   keeps the dense M (d² instead of (2w-1)² numbers per channel, ~14x for w=7).

Reparameterisation (authors' Sec. 3.7, ``wbmm_reparam.py``): the training form
``BN1(x@M + x) + BN2(DW5x5 x) + BN3(DW3x3 x)`` folds into one table and one bias: the 3x3 and 5x5
kernels land at the centre offsets of R, the shortcut is +1 at the centre offset (0, 0), the BN
scales multiply and the shifts add. [ours] The small-kernel branches are applied *inside each
window* (zero padding at window borders), which is what a kernel embedded in R computes; where the
map is a single window (the authors' only use, S4 of WBMM-P/N at 7x7) that is the plain depthwise
convolution, elsewhere it keeps the fusion exact.

This file is the plain-PyTorch reference and the CPU path. Every function is traceable by the ONNX
exporters: the index is a constant, the table lookup a Gather, all windows go through one MatMul.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.errors import UsageError

Window = tuple[int, int]
DEPLOY_FORMS = ("compact", "cached")


def as_window(window: int | Sequence[int]) -> Window:
    """``7`` -> ``(7, 7)``; checks the window is a pair of positive ints."""
    pair = (window, window) if isinstance(window, int) else tuple(window)
    if len(pair) != 2 or any(int(v) != v or v < 1 for v in pair):
        raise UsageError(f"a WBMM window must be one or two positive ints, got {window!r}")
    return int(pair[0]), int(pair[1])


def table_size(window: int | Sequence[int]) -> int:
    """Entries per channel of the relative-position table: (2wh-1)(2ww-1)."""
    wh, ww = as_window(window)
    return (2 * wh - 1) * (2 * ww - 1)


def centre_offset(window: int | Sequence[int]) -> int:
    """Flat table position of the relative offset (0, 0), where I[i, i] points."""
    wh, ww = as_window(window)
    return (wh - 1) * (2 * ww - 1) + (ww - 1)


@functools.cache
def _index(wh: int, ww: int) -> torch.Tensor:
    cpu = torch.device("cpu")  # explicit: the cache must not hold a meta or GPU tensor
    h = torch.arange(wh, device=cpu).repeat_interleave(ww)  # [d] row of each position (raster)
    w = torch.arange(ww, device=cpu).repeat(wh)  # [d] column of each position
    dh = h[:, None] - h[None, :] + (wh - 1)  # [d, d] h_i - h_j, shifted to 0..2wh-2
    dw = w[:, None] - w[None, :] + (ww - 1)  # [d, d] w_i - w_j, shifted to 0..2ww-2
    return dh * (2 * ww - 1) + dw  # [d, d] flat table position


def relative_position_index(window: int | Sequence[int]) -> torch.Tensor:
    """I in Z^{d x d} (int64): ``I[i, j]`` = table position of offset (input i - output j)."""
    return _index(*as_window(window)).clone()  # a copy: callers may move or modify it


def dense_matrix(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """M = R[:, I]: [C, T] table and [d, d] index -> [C, d, d] per-channel window matrices."""
    d = index.shape[0]
    return table.index_select(1, index.reshape(-1)).reshape(table.shape[0], d, d)  # [C, d, d]


def _pad_to_windows(x: torch.Tensor, window: Window) -> tuple[torch.Tensor, int, int]:
    """Zero-pad [B, C, H, W] right and bottom to multiples of the window; returns (x, nh, nw)."""
    wh, ww = window
    H, W = x.shape[-2:]
    ph, pw = (-H) % wh, (-W) % ww
    if ph or pw:
        x = F.pad(x, (0, pw, 0, ph))  # [B, C, H+ph, W+pw]
    return x, (H + ph) // wh, (W + pw) // ww


def to_windows(x: torch.Tensor, window: Window) -> tuple[torch.Tensor, tuple[int, int]]:
    """[B, C, H, W] -> ([C, B·nWin, d], (nh, nw)), windows in raster order, zero-padded."""
    wh, ww = window
    C = x.shape[1]
    x, nh, nw = _pad_to_windows(x, window)  # [B, C, nh·wh, nw·ww]
    x = x.reshape(-1, C, nh, wh, nw, ww)  # [B, C, nh, wh, nw, ww]
    x = x.permute(1, 0, 2, 4, 3, 5)  # [C, B, nh, nw, wh, ww]
    return x.reshape(C, -1, wh * ww), (nh, nw)  # [C, B·nh·nw, d]


def from_windows(y: torch.Tensor, window: Window, grid: tuple[int, int],
                 size: tuple[int, int]) -> torch.Tensor:
    """Inverse of :func:`to_windows`: [C, B·nWin, d] -> [B, C, H, W], padding cropped."""
    wh, ww = window
    nh, nw = grid
    C = y.shape[0]
    y = y.reshape(C, -1, nh, nw, wh, ww)  # [C, B, nh, nw, wh, ww]
    y = y.permute(1, 0, 2, 4, 3, 5)  # [B, C, nh, wh, nw, ww]
    y = y.reshape(-1, C, nh * wh, nw * ww)  # [B, C, Hp, Wp]
    H, W = size
    if (H, W) != (nh * wh, nw * ww):
        y = y[:, :, :H, :W]  # [B, C, H, W]
    return y


def wbmm(x: torch.Tensor, matrix: torch.Tensor, window: int | Sequence[int],
         bias: torch.Tensor | None = None, shortcut: bool = True) -> torch.Tensor:
    """The operator with a dense M: ``y = x_win @ M (+ x_win) (+ bias)`` per window.

    x [B, C, H, W], matrix [C, d, d] (rows: input position, columns: output position),
    bias [C] or None. One batched matmul over all B·nWin windows of every channel.
    """
    window = as_window(window)
    size = (x.shape[-2], x.shape[-1])
    xw, grid = to_windows(x, window)  # [C, B·nWin, d]
    y = torch.matmul(xw, matrix)  # [C, B·nWin, d] @ [C, d, d] -> [C, B·nWin, d]
    if shortcut:
        y = y + xw
    if bias is not None:
        y = y + bias.reshape(-1, 1, 1)  # [C, 1, 1]
    return from_windows(y, window, grid, size)  # [B, C, H, W]


def wbmm_compact(x: torch.Tensor, table: torch.Tensor, window: int | Sequence[int],
                 index: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 shortcut: bool = True) -> torch.Tensor:
    """The operator from the compact table: builds M = R[:, I] on this call, then :func:`wbmm`."""
    window = as_window(window)
    index = relative_position_index(window).to(table.device) if index is None else index
    return wbmm(x, dense_matrix(table, index), window, bias, shortcut)


def window_depthwise_conv(x: torch.Tensor, weight: torch.Tensor,
                          window: int | Sequence[int]) -> torch.Tensor:
    """A depthwise convolution (weight [C, 1, kh, kw], odd sizes, 'same' zero padding) applied
    independently inside each non-overlapping window; the training form of the small-kernel
    branches, and exactly what :func:`embed_kernel` puts into the table."""
    wh, ww = window = as_window(window)
    B, C, H, W = x.shape
    kh, kw = weight.shape[-2:]
    if H <= wh and W <= ww:  # one window: padding to it and cropping changes nothing
        return F.conv2d(x, weight, padding=(kh // 2, kw // 2), groups=C)  # [B, C, H, W]
    xp, nh, nw = _pad_to_windows(x, window)  # [B, C, nh·wh, nw·ww]
    xp = xp.reshape(-1, C, nh, wh, nw, ww)  # [B, C, nh, wh, nw, ww]
    xp = xp.permute(0, 2, 4, 1, 3, 5).reshape(-1, C, wh, ww)  # [B·nh·nw, C, wh, ww]
    y = F.conv2d(xp, weight, padding=(kh // 2, kw // 2), groups=C)  # [B·nWin, C, wh, ww]
    y = y.reshape(-1, nh, nw, C, wh, ww).permute(0, 3, 1, 4, 2, 5)  # [B, C, nh, wh, nw, ww]
    return y.reshape(-1, C, nh * wh, nw * ww)[:, :, :H, :W]  # [B, C, H, W]


def embed_kernel(kernel: torch.Tensor, window: int | Sequence[int]) -> torch.Tensor:
    """A depthwise kernel [C, 1, kh, kw] (odd, kh <= 2wh-1, kw <= 2ww-1) as a table [C, T].

    The kernel tap at (u, v) weighs input offset (u - kh//2, v - kw//2) from the output, the
    same convention as R, so it lands at the centre of the (2wh-1) x (2ww-1) grid; the rest is 0.
    """
    wh, ww = as_window(window)
    C = kernel.shape[0]
    kh, kw = kernel.shape[-2:]
    if kh % 2 == 0 or kw % 2 == 0 or kh > 2 * wh - 1 or kw > 2 * ww - 1:
        raise UsageError(f"a {kh}x{kw} kernel does not fit a {wh}x{ww} WBMM window",
                         hint=f"kernels must be odd and at most {2 * wh - 1}x{2 * ww - 1}")
    table = kernel.new_zeros(C, 2 * wh - 1, 2 * ww - 1)  # [C, 2wh-1, 2ww-1]
    r0, c0 = wh - 1 - kh // 2, ww - 1 - kw // 2
    table[:, r0:r0 + kh, c0:c0 + kw] = kernel.reshape(C, kh, kw)
    return table.reshape(C, -1)  # [C, T]


def bn_scale_shift(bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """An eval-mode BatchNorm as ``x * scale + shift`` per channel (running statistics)."""
    std = torch.sqrt(bn.running_var + bn.eps)
    gamma = bn.weight if bn.weight is not None else torch.ones_like(std)
    beta = bn.bias if bn.bias is not None else torch.zeros_like(std)
    scale = gamma / std
    return scale.detach().clone(), (beta - bn.running_mean * scale).detach().clone()


class WBMM(nn.Module):
    """The WBMM operator as a module, in training form or one of the two deploy forms.

    ``deploy=None`` (training): table R (trunc-normal, std 0.02), ``y = x@M + x``; with
    ``small_kernels`` the training form is ``BN1(x@M + x) + BN2(DW5x5 x) + BN3(DW3x3 x)``.
    ``deploy="compact"``: fused table and bias, M indexed on every call.
    ``deploy="cached"``: the dense fused M [C, d, d] and bias.
    Build a deploy form from a trained operator with :meth:`to_deploy`.
    """

    def __init__(self, channels: int, window: int | Sequence[int] = 7,
                 small_kernels: bool = False, deploy: str | None = None) -> None:
        super().__init__()
        if deploy not in (None, *DEPLOY_FORMS):
            raise UsageError(f"unknown WBMM deploy form '{deploy}'",
                             hint=f"valid: {', '.join(DEPLOY_FORMS)} (or None for training)")
        self.channels = channels
        self.window = as_window(window)
        self.small_kernels = small_kernels
        self.deploy = deploy
        wh, ww = self.window
        d = wh * ww
        # I depends only on the window; a non-persistent buffer so it follows .to(device)
        self.register_buffer("index", relative_position_index(self.window), persistent=False)
        if deploy is None:
            self.table = nn.Parameter(torch.empty(channels, table_size(self.window)))
            nn.init.trunc_normal_(self.table, std=0.02)
            if small_kernels:
                for k in (5, 3):
                    embed_kernel(torch.zeros(1, 1, k, k), self.window)  # fails early if too big
                self.dw5 = nn.Conv2d(channels, channels, 5, padding=2, groups=channels, bias=False)
                self.dw3 = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
                self.bn1 = nn.BatchNorm2d(channels)  # on x@M + x
                self.bn2 = nn.BatchNorm2d(channels)  # on the 5x5 branch
                self.bn3 = nn.BatchNorm2d(channels)  # on the 3x3 branch
        elif deploy == "compact":
            self.table = nn.Parameter(torch.zeros(channels, table_size(self.window)))
            self.bias = nn.Parameter(torch.zeros(channels))
        else:
            self.matrix = nn.Parameter(torch.zeros(channels, d, d))
            self.bias = nn.Parameter(torch.zeros(channels))

    def extra_repr(self) -> str:
        return (f"{self.channels}, window={self.window}, small_kernels={self.small_kernels}, "
                f"deploy={self.deploy}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, H, W] -> [B, C, H, W]
        if self.deploy == "cached":
            return wbmm(x, self.matrix, self.window, self.bias, shortcut=False)
        matrix = dense_matrix(self.table, self.index)  # [C, d, d]
        if self.deploy == "compact":
            return wbmm(x, matrix, self.window, self.bias, shortcut=False)
        y = wbmm(x, matrix, self.window, shortcut=True)
        if self.small_kernels:
            y = (self.bn1(y) + self.bn2(window_depthwise_conv(x, self.dw5.weight, self.window))
                 + self.bn3(window_depthwise_conv(x, self.dw3.weight, self.window)))
        return y

    @torch.no_grad()
    def fused(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(table [C, T], bias [C]) of the training form with shortcut, branches and BNs folded.

        Uses the BNs' running statistics: the result equals the operator in eval mode.
        """
        if self.deploy is not None:
            raise UsageError("this WBMM operator is already in a deploy form")
        table = self.table.detach().clone()
        table[:, centre_offset(self.window)] += 1.0  # the "+x" shortcut is M's diagonal
        bias = torch.zeros_like(table[:, 0])
        if self.small_kernels:
            s1, t1 = bn_scale_shift(self.bn1)
            s2, t2 = bn_scale_shift(self.bn2)
            s3, t3 = bn_scale_shift(self.bn3)
            table = (table * s1[:, None] + embed_kernel(self.dw5.weight, self.window) * s2[:, None]
                     + embed_kernel(self.dw3.weight, self.window) * s3[:, None])
            bias = t1 + t2 + t3
        return table, bias

    @torch.no_grad()
    def to_deploy(self, form: str = "compact", scale: torch.Tensor | None = None,
                  shift: torch.Tensor | None = None) -> WBMM:
        """A new operator in deploy form ``form`` computing ``op(x) * scale + shift`` (a
        following BatchNorm folded in, per channel) from this one in eval mode."""
        if form not in DEPLOY_FORMS:
            raise UsageError(f"unknown WBMM deploy form '{form}'",
                             hint=f"valid: {', '.join(DEPLOY_FORMS)}")
        if self.deploy == "cached" and form == "compact":
            raise UsageError("a cached WBMM operator cannot go back to the compact form",
                             hint="reparameterise the training form instead")
        if self.deploy is None:
            table, bias = self.fused()
            matrix = None
        elif self.deploy == "compact":
            table, bias, matrix = self.table.detach().clone(), self.bias.detach().clone(), None
        else:
            table, bias, matrix = None, self.bias.detach().clone(), self.matrix.detach().clone()
        if scale is not None:
            bias = bias * scale
            table = table * scale[:, None] if table is not None else None
            matrix = matrix * scale[:, None, None] if matrix is not None else None
        if shift is not None:
            bias = bias + shift
        ref = self.table if self.deploy != "cached" else self.matrix
        new = WBMM(self.channels, self.window, self.small_kernels, deploy=form).to(ref)
        if form == "compact":
            new.table.copy_(table)
        else:
            new.matrix.copy_(dense_matrix(table, self.index) if matrix is None else matrix)
        new.bias.copy_(bias)
        return new.train(self.training)


def flops(batch: int, channels: int, height: int, width: int, window: int | Sequence[int]) -> int:
    """FLOPs of one call (2 per multiply-accumulate), padding included, as torch counts them."""
    wh, ww = as_window(window)
    windows = math.ceil(height / wh) * math.ceil(width / ww)
    return 2 * channels * batch * windows * (wh * ww) ** 2
