"""Bit-pack VQ code indices so the bytes exchanged are the real compressed size.

A token's G indices, each below K, take ``G * ceil(log2 K)`` bits; a shard of n tokens is sent
as ``ceil(n * G * bits / 8)`` bytes (numpy's packbits, little-endian bit order), not as int64.
"""
from __future__ import annotations

import math

import numpy as np
import torch


def index_bits(codebook_size: int) -> int:
    """Bits per index for a codebook of ``codebook_size`` entries (at least 1)."""
    return max(1, math.ceil(math.log2(codebook_size)))


def packed_bytes(num_indices: int, bits: int) -> int:
    return math.ceil(num_indices * bits / 8)


def pack(indices: torch.Tensor, bits: int) -> torch.Tensor:
    """Indices (any shape, values < 2**bits) -> uint8 tensor of ``packed_bytes`` bytes, in host
    memory (where a network card reads them)."""
    flat = indices.reshape(-1).to("cpu", torch.int64).numpy()
    planes = (flat[:, None] >> np.arange(bits, dtype=np.int64)) & 1  # (n, bits), LSB first
    return torch.from_numpy(np.packbits(planes.astype(np.uint8).reshape(-1), bitorder="little"))


def unpack(data: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    """Inverse of ``pack``: the first ``count`` indices as int64, on ``data``'s device."""
    planes = np.unpackbits(data.cpu().numpy(), count=count * bits, bitorder="little")
    planes = planes.reshape(count, bits).astype(np.int64)
    indices = torch.from_numpy((planes << np.arange(bits, dtype=np.int64)).sum(axis=1))
    return indices.to(data.device)
