"""ZipMoE's lossless codec for floating-point weights (arXiv 2601.21198).

A trained weight's exponent byte carries about 2.6-2.7 bits of information, its sign and mantissa
are close to random. The codec therefore splits every value into two byte planes:

    bf16 w (uint16):  e  = (w >> 7) & 0xFF                      exponent, compressed
                      sm = ((w >> 15) & 1) << 7 | (w & 0x7F)     sign + 7 mantissa bits, raw
    reconstruction:   w  = sign << 15 | e << 7 | mantissa        (bit-identical)

The exponent plane of each tensor is cut into K contiguous chunks that are compressed independently
(zstd or lz4 frames), so K chunks decode on K threads at once: both libraries release the GIL while
they decode, and the reconstruction is a handful of vectorised numpy passes over each chunk's slice,
which release it too. Every stored stream carries a CRC-32, checked before anything is decoded.

Other dtypes get the split that fits them [ours]:

    fp16   the same bit positions as bf16: the compressed byte holds the 5 exponent bits and the
           top 3 mantissa bits, the raw byte the sign and the low 7 mantissa bits. Its compressed
           plane has ~3 more bits of entropy than bf16's, so fp16 saves less (about 2.3 bits/param).
    fp32   the top 16 bits of an fp32 value are a bf16 value: they split as bf16, and the low 16
           mantissa bits are stored raw beside the sign-mantissa byte (3 raw bytes per value).

Anything else (integers, fp8, fp64, bool) has no exponent split here and is refused with a
``CodecError`` naming the dtype; the expert store keeps such tensors uncompressed.

The order-0 entropy H of the exponent plane bounds what this scheme can reach with an order-0
coder: ``bound = H + raw bits`` per parameter (10.7 bits for bf16 at H = 2.7). zstd's optimal
parser (levels >= 16) lands within about 2 % of it on real weights; lz4 is faster but farther off.
"""
from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from edgekit.errors import UsageError
from edgekit.kernels.zipmoe_planes import (
    CODECS,
    ChecksumError,
    CodecError,
    compress_bytes,
    crc32,
    decompress_bytes,
    reconstruct_into,
)

DEFAULT_CODEC = "zstd"
# zstd >= 16 uses the optimal parser (btopt/btultra) at every input size; it decides per block that
# matches are not worth it and codes the exponents almost purely with Huffman tables (see
# benchmarks/zipmoe.py for levels 1..19). Decoding speed hardly depends on the level.
DEFAULT_LEVEL = {"zstd": 16, "lz4": 9}
LEVEL_RANGE = {"zstd": (1, 22), "lz4": (0, 16)}
DEFAULT_CHUNKS = 4
# [ours] No chunk below 64 Ki values: every chunk starts on a 4 KiB boundary in the store and
# costs one dispatch, so small tensors get fewer chunks (a 2048x1408 expert matrix still gets K).
MIN_CHUNK_VALUES = 1 << 16


@dataclass(frozen=True)
class Split:
    """How one dtype splits into a compressed byte plane and raw bytes."""

    dtype: torch.dtype
    word: type  # numpy unsigned word type of the whole value
    raw_bytes: int  # raw bytes per value (sign-mantissa byte, plus low mantissa bits for fp32)


SPLITS: dict[str, Split] = {
    "bfloat16": Split(torch.bfloat16, np.uint16, 1),
    "float16": Split(torch.float16, np.uint16, 1),
    "float32": Split(torch.float32, np.uint32, 3),
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def split_for(dtype: torch.dtype | str) -> Split:
    name = dtype if isinstance(dtype, str) else dtype_name(dtype)
    split = SPLITS.get(name)
    if split is None:
        raise CodecError(f"dtype {name} has no exponent/sign-mantissa split",
                         hint=f"the codec handles {', '.join(SPLITS)}; store it uncompressed")
    return split


def settings_check(codec: str, level: int, chunks: int) -> None:
    if codec not in CODECS:
        raise UsageError(f"unknown codec '{codec}'", hint=f"valid: {', '.join(CODECS)}")
    lo, hi = LEVEL_RANGE[codec]
    if not lo <= level <= hi:
        raise UsageError(f"{codec} level {level} is out of range", hint=f"use {lo}..{hi}")
    if chunks < 1:
        raise UsageError(f"chunk count must be at least 1, got {chunks}")


# --------------------------------------------------------------------------------------------
# The split and its inverse (vectorised; numpy releases the GIL inside each pass)
# --------------------------------------------------------------------------------------------

def _words(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's bits as a flat numpy array of unsigned words (no copy when contiguous)."""
    split = split_for(tensor.dtype)
    as_int = {np.uint16: torch.int16, np.uint32: torch.int32}[split.word]
    flat = tensor.detach().reshape(-1).contiguous().cpu()
    return flat.view(as_int).numpy().view(split.word)


def split_planes(tensor: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(exponent plane uint8[n], raw bytes uint8[n * raw_bytes])`` of a bf16/fp16/fp32 tensor."""
    split = split_for(tensor.dtype)
    words = _words(tensor)
    hi = (words >> 16).astype(np.uint16) if split.word is np.uint32 else words
    exponent = ((hi >> 7) & 0xFF).astype(np.uint8)
    sm = (((hi >> 8) & 0x80) | (hi & 0x7F)).astype(np.uint8)
    if split.word is np.uint16:
        return exponent, sm
    low = (words & 0xFFFF).astype(np.uint16)
    return exponent, np.concatenate([sm, low.view(np.uint8)])


def merge_planes(exponent: np.ndarray, raw: np.ndarray, dtype: torch.dtype | str,
                 shape: Sequence[int]) -> torch.Tensor:
    """The inverse of ``split_planes``: a tensor of ``dtype`` and ``shape``, bit-identical."""
    split = split_for(dtype)
    out = np.empty(exponent.size, split.word)
    reconstruct_into(out, exponent, raw)
    return words_to_tensor(out, split, shape)


def words_to_tensor(words: np.ndarray, split: Split, shape: Sequence[int]) -> torch.Tensor:
    as_int = {np.uint16: np.int16, np.uint32: np.int32}[split.word]
    return torch.from_numpy(words.view(as_int)).view(split.dtype).reshape(tuple(shape))


# --------------------------------------------------------------------------------------------
# Chunk compression
# --------------------------------------------------------------------------------------------

def chunk_bounds(n: int, chunks: int, min_values: int = 1) -> list[tuple[int, int]]:
    """Up to K contiguous, nearly equal slices of ``range(n)``, none shorter than ``min_values``
    unless the whole range is (then one slice; none when n == 0)."""
    k = max(1, min(chunks, n // max(1, min_values))) if n else 0
    return [(i * n // k, (i + 1) * n // k) for i in range(k)]


# --------------------------------------------------------------------------------------------
# Encoded tensors
# --------------------------------------------------------------------------------------------

@dataclass
class EncodedChunk:
    data: bytes
    start: int  # first value of this chunk in the tensor
    stop: int
    crc32: int

    @property
    def raw_size(self) -> int:  # exponent bytes = values in the chunk
        return self.stop - self.start


@dataclass
class EncodedTensor:
    """A tensor in ZipMoE form: raw sign-mantissa bytes plus K compressed exponent chunks."""

    dtype: str
    shape: tuple[int, ...]
    codec: str
    level: int
    raw: bytes
    raw_crc32: int
    chunks: list[EncodedChunk] = field(default_factory=list)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def exponent_bytes(self) -> int:
        return sum(len(c.data) for c in self.chunks)

    @property
    def encoded_bytes(self) -> int:
        return len(self.raw) + self.exponent_bytes

    @property
    def bits_per_param(self) -> float:
        return 8 * self.encoded_bytes / max(1, self.numel)


def encode(tensor: torch.Tensor, codec: str = DEFAULT_CODEC, level: int | None = None,
           chunks: int = DEFAULT_CHUNKS, pool: cf.Executor | None = None,
           min_chunk_values: int = MIN_CHUNK_VALUES) -> EncodedTensor:
    """Split and compress one tensor into up to ``chunks`` chunks (none shorter than
    ``min_chunk_values`` values); chunks compress on ``pool`` when given."""
    level = DEFAULT_LEVEL[codec] if level is None and codec in DEFAULT_LEVEL else level
    settings_check(codec, level, chunks)
    exponent, raw = split_planes(tensor)
    bounds = chunk_bounds(exponent.size, chunks, min_chunk_values)

    def one(bound: tuple[int, int]) -> EncodedChunk:
        piece = exponent[bound[0]:bound[1]]
        data = compress_bytes(piece, codec, level)
        return EncodedChunk(data, bound[0], bound[1], crc32(data))

    encoded = list(pool.map(one, bounds)) if pool is not None else [one(b) for b in bounds]
    raw_bytes = raw.tobytes()
    return EncodedTensor(dtype_name(tensor.dtype), tuple(tensor.shape), codec, level, raw_bytes,
                         crc32(raw_bytes), encoded)


def decode_chunk_into(out: np.ndarray, chunk: EncodedChunk, raw: np.ndarray, codec: str,
                      check: bool = True, name: str = "tensor") -> None:
    """Verify, decompress and reconstruct one chunk's slice of ``out`` (worker-thread safe)."""
    if check and crc32(chunk.data) != chunk.crc32:
        raise ChecksumError(f"{name}: exponent chunk at values {chunk.start}..{chunk.stop} "
                            "fails its CRC-32", hint="the store is corrupt; compress it again")
    exponent = np.frombuffer(decompress_bytes(chunk.data, codec, chunk.raw_size), np.uint8)
    reconstruct_into(out, exponent, raw, chunk.start, chunk.stop)


def decode(encoded: EncodedTensor, pool: cf.Executor | None = None, check: bool = True,
           name: str = "tensor") -> torch.Tensor:
    """Rebuild the tensor bit-exactly, one chunk per task on ``pool`` when given."""
    split = split_for(encoded.dtype)
    if check and crc32(encoded.raw) != encoded.raw_crc32:
        raise ChecksumError(f"{name}: sign-mantissa bytes fail their CRC-32",
                            hint="the store is corrupt; compress it again")
    n = encoded.numel
    if len(encoded.raw) != n * split.raw_bytes:
        raise ChecksumError(f"{name}: {len(encoded.raw)} raw bytes, expected {n * split.raw_bytes}")
    out = np.empty(n, split.word)
    raw = np.frombuffer(encoded.raw, np.uint8)
    if pool is None or len(encoded.chunks) < 2:
        for chunk in encoded.chunks:
            decode_chunk_into(out, chunk, raw, encoded.codec, check, name)
    else:
        futures = [pool.submit(decode_chunk_into, out, c, raw, encoded.codec, check, name)
                   for c in encoded.chunks]
        for future in futures:
            future.result()
    return words_to_tensor(out, split, encoded.shape)


# --------------------------------------------------------------------------------------------
# Measures
# --------------------------------------------------------------------------------------------

def exponent_histogram(tensor: torch.Tensor) -> np.ndarray:
    exponent, _ = split_planes(tensor)
    return np.bincount(exponent, minlength=256)


def entropy_bits(histogram: np.ndarray) -> float:
    """Order-0 (Shannon) entropy in bits per symbol of a histogram."""
    counts = np.asarray(histogram, dtype=np.float64)
    total = counts.sum()
    if total == 0:
        return 0.0
    p = counts[counts > 0] / total
    return float(-(p * np.log2(p)).sum())


def raw_bits(dtype: torch.dtype | str) -> int:
    """Raw (uncompressed) bits per value that the split leaves: 8 for 16-bit types, 24 for fp32."""
    return 8 * split_for(dtype).raw_bytes


__all__ = [
    "CODECS", "DEFAULT_CHUNKS", "DEFAULT_CODEC", "DEFAULT_LEVEL", "SPLITS", "ChecksumError",
    "CodecError", "EncodedChunk", "EncodedTensor", "MIN_CHUNK_VALUES", "chunk_bounds",
    "compress_bytes", "crc32",
    "decode", "decode_chunk_into", "decompress_bytes", "encode", "entropy_bits",
    "exponent_histogram", "merge_planes", "raw_bits", "reconstruct_into", "split_for",
    "split_planes", "words_to_tensor",
]
