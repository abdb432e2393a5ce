"""One tensor's streams in the store: where they lie, reading, checking, decompressing and
rebuilding them; what every ZipMoE decoder and the start-up profile do with them."""
from __future__ import annotations

import numpy as np
import torch

from edgekit.kernels import zipmoe_codec as codec
from edgekit.kernels.zipmoe_planes import decode_exponents
from edgekit.methods.zipmoe.store import TensorEntry, align_up, check_extent, stream_errors
from edgekit.storage import StorageReader

# [ours] How far ahead of a capped channel the I/O thread books reads: enough to cover the
# decode workers' and the compute thread's scheduling delays, little enough that reads of a
# mispredicted prefetch are mostly still unbooked, and cancelled, when the layer routes.
READ_AHEAD_S = 1e-3


def expert_span(entries: tuple[TensorEntry, ...]) -> tuple[int, int] | None:
    """Offset and length of one read covering all of an expert's streams, when only alignment
    padding lies between them; None otherwise. [ours] A little more bytes in far fewer reads,
    each Python work on the I/O thread (docs/methods/zipmoe.md, "One read per expert")."""
    extents = sorted((x for e in entries for x in (*e.chunks, e.raw)), key=lambda x: x.offset)
    for before, after in zip(extents, extents[1:], strict=False):
        if after.offset < before.end or after.offset > align_up(before.end):
            return None
    return extents[0].offset, extents[-1].end - extents[0].offset


def exponent_span(entry: TensorEntry) -> tuple[int, int]:
    """Offset and length of one read covering all of a tensor's exponent chunks (they are
    written back to back, each 4 KiB aligned)."""
    first, last = entry.chunks[0], entry.chunks[-1]
    return first.offset, last.end - first.offset


def read_raw(reader: StorageReader, entry: TensorEntry) -> bytes:
    """A tensor's sign-mantissa bytes, CRC-checked."""
    return check_extent(entry, entry.raw, reader.read(entry.raw.offset, entry.raw.size),
                        "sign-mantissa bytes")


def decompress(entry: TensorEntry, blob: bytes | memoryview, codec_name: str) -> np.ndarray:
    """Check and decode a tensor's K exponent chunks out of one spanning read."""
    base = entry.chunks[0].offset
    out = np.empty(entry.numel, np.uint8)
    view = memoryview(blob)
    with stream_errors():
        decode_exponents(entry.name, [(view[x.offset - base:x.end - base], x.size, x.crc32,
                                       x.start, x.stop) for x in entry.chunks],
                         out, codec_name)
    return out


def rebuild(entry: TensorEntry, exponent: np.ndarray, raw: bytes) -> torch.Tensor:
    """A tensor from its exponent plane and raw bytes (the codec's vectorised inverse split)."""
    return codec.merge_planes(exponent, np.frombuffer(raw, np.uint8), entry.dtype, entry.shape)
