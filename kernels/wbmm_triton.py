"""WBMM's compact form as one Triton kernel: the table gather fused into the batched matmul.

The compact deploy form (``edgekit.kernels.wbmm.wbmm_compact``) builds M = R[:, I] ([C, d, d])
in memory on every call, then multiplies. This kernel never writes M: each program gathers the
slice of M it needs, ``R[c, I[k0:k1, :]]``, from the small table (T = (2w-1)^2 numbers per
channel, in cache) straight into registers and feeds it to ``tl.dot`` with a tile of windows:

    y[c, n, j] = sum_i x_win[c, n, i] * R[c, I[i, j]] + bias[c]

x_win is the window view ``to_windows`` makes ([C, B·nWin, d]). Accumulation is fp32; fp32 inputs
multiply in IEEE fp32 (no TF32), as torch's default matmul does, so the two compare like for like.

The tile sizes are tuned per shape and dtype (``triton.autotune``, keyed on the window count,
d and the dtypes): on Hopper the larger tiles (64-128 windows, 32-64 inputs a step) with more
pipeline stages keep the tensor cores fed in bf16, while fp32 (IEEE, CUDA cores) and the small
shapes prefer the narrow ones. Whatever the tiles, the kernel is bound by the roofline that
benchmarks/wbmm.py prints beside its timings: with d = 196 (window 14) it does 2d = 392 FLOPs
per output value against 2 values moved, an arithmetic intensity of 49 FLOP/byte in fp32 (above
an H200's fp32 ridge of 67 TFLOP/s / 4.8 TB/s = 14: compute-bound on the CUDA cores) and 98 in
bf16 (under its tensor-core ridge of 206: memory-bound).

Triton is imported when the kernel is first used, never at import of edgekit; without it (or
without a GPU, unless TRITON_INTERPRET=1 runs the kernel on the CPU) ``wbmm_compact_triton``
raises MissingDependencyError.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import torch

from edgekit.errors import MissingDependencyError
from edgekit.kernels.wbmm import as_window, from_windows, relative_position_index, to_windows


@functools.cache
def _kernel() -> Any:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        raise MissingDependencyError("the fused WBMM kernel needs Triton",
                                     hint="pip install triton (CUDA builds of torch bring it)"
                                     ) from None

    configs = [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=st)
               for n, k, w, st in _TILES]
    if os.environ.get("TRITON_INTERPRET") == "1":  # the interpreter cannot time configs
        configs = configs[:1]

    # Over 8 parameters: a Triton kernel takes its pointers, sizes and constexpr tiles one by one
    @triton.autotune(configs=configs, key=["n_rows", "D"])
    @triton.jit
    def wbmm_gather_matmul(x_ptr, table_ptr, index_ptr, bias_ptr, y_ptr, n_rows, table_len,
                           D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr,
                           IEEE: tl.constexpr):
        c = tl.program_id(0)  # channel
        rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # windows of this tile
        cols = tl.arange(0, D_PAD)  # output positions j
        x_base = x_ptr + c * n_rows * D
        acc = tl.zeros((BLOCK_N, D_PAD), dtype=tl.float32)
        for k0 in range(0, D, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)  # input positions i
            a = tl.load(x_base + rows[:, None] * D + ks[None, :],
                        mask=(rows[:, None] < n_rows) & (ks[None, :] < D), other=0.0)
            in_range = (ks[:, None] < D) & (cols[None, :] < D)
            idx = tl.load(index_ptr + ks[:, None] * D + cols[None, :], mask=in_range, other=0)
            m = tl.load(table_ptr + c * table_len + idx, mask=in_range, other=0.0)  # R[c, I]
            if IEEE:
                acc += tl.dot(a, m, input_precision="ieee")
            else:
                acc += tl.dot(a, m)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + c).to(tl.float32)
        tl.store(y_ptr + c * n_rows * D + rows[:, None] * D + cols[None, :],
                 acc.to(y_ptr.dtype.element_ty),
                 mask=(rows[:, None] < n_rows) & (cols[None, :] < D))

    return triton, wbmm_gather_matmul


# (BLOCK_N windows, BLOCK_K inputs a step, warps, pipeline stages); the first is the tile the
# kernel had before tuning, and the one the interpreter runs
_TILES = ((32, 16, 4, 2), (32, 32, 4, 3), (64, 32, 4, 3), (64, 32, 8, 4), (64, 64, 8, 3),
          (128, 32, 8, 3), (128, 64, 8, 4), (128, 16, 8, 2))


def _next_pow2(n: int) -> int:
    return 1 << max(4, (n - 1).bit_length())  # tl.dot needs every dimension >= 16


def gather_matmul(xw: torch.Tensor, table: torch.Tensor, index: torch.Tensor,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
    """[C, N, d] windows times R[:, I] per channel (+ bias), without materialising M."""
    triton, kernel = _kernel()
    C, n_rows, d = xw.shape
    xw, table = xw.contiguous(), table.contiguous().to(xw.dtype)
    index = index.to(device=xw.device, dtype=torch.int32).contiguous()
    y = torch.empty_like(xw)
    d_pad = _next_pow2(d)
    kernel[lambda meta: (C, triton.cdiv(n_rows, meta["BLOCK_N"]))](
        xw, table, index, bias if bias is not None else table, y, n_rows, table.shape[1], D=d,
        D_PAD=d_pad, HAS_BIAS=bias is not None, IEEE=xw.dtype == torch.float32)
    return y


def wbmm_compact_triton(x: torch.Tensor, table: torch.Tensor, window: int | Sequence[int],
                        bias: torch.Tensor | None = None,
                        index: torch.Tensor | None = None) -> torch.Tensor:
    """``wbmm_compact(x, table, window, bias=bias, shortcut=False)`` with the fused kernel:
    x [B, C, H, W], table [C, (2wh-1)(2ww-1)], bias [C] -> [B, C, H, W]."""
    window = as_window(window)
    index = relative_position_index(window) if index is None else index
    xw, grid = to_windows(x, window)  # [C, B·nWin, d]
    y = gather_matmul(xw, table, index, bias)  # [C, B·nWin, d]
    return from_windows(y, window, grid, (x.shape[-2], x.shape[-1]))  # [B, C, H, W]
