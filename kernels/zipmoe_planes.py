"""The torch-free half of ZipMoE's codec: rebuilding values from their two byte planes, the
compressed frames and their checksums (zipmoe_codec.py holds the split, tensors and the format).

It imports numpy and the codecs only, so a decode process (zipmoe_decoder.py) runs it without
torch: importing torch costs that process 2.4 s and 220 MB here, this module 0.13 s.
"""
from __future__ import annotations

import threading
import zlib

import numpy as np

from edgekit.errors import MissingDependencyError, UsageError

CODECS = ("zstd", "lz4")


class CodecError(UsageError):
    """A tensor the codec cannot encode, or stored bytes that fail their checks."""


class ChecksumError(CodecError):
    """A stored stream whose CRC-32 or size does not match what was written."""


class StreamError(Exception):
    """A tensor's stored stream that is short, fails its CRC-32 or does not decode; the message
    names the tensor and the stream. The store raises it as a ``StoreError``, the decode process
    sends it to the serving process."""


STREAM_HINT = "compress the checkpoint again"


def check_stream(name: str, what: str, data: bytes | memoryview, size: int,
                 crc: int) -> bytes | memoryview:
    """``data`` when it is ``size`` bytes with this CRC-32; else ``StreamError``."""
    if len(data) != size:
        raise StreamError(f"tensor '{name}': {what} is truncated ({len(data)} of {size} bytes)")
    if crc32(data) != crc:
        raise StreamError(f"tensor '{name}': {what} fails its CRC-32 (corrupt store)")
    return data


def decode_exponents(name: str, chunks: list[tuple[bytes | memoryview, int, int, int, int]],
                     out: np.ndarray, codec: str) -> None:
    """Check and decompress a tensor's exponent chunks, ``(data, size, crc, start, stop)``
    each, into ``out[start:stop]``."""
    for i, (data, size, crc, start, stop) in enumerate(chunks):
        data = check_stream(name, f"exponent chunk {i + 1} of {len(chunks)}", data, size, crc)
        try:
            out[start:stop] = np.frombuffer(decompress_bytes(data, codec, stop - start), np.uint8)
        except Exception as exc:  # noqa: BLE001 - a decoder's error on bytes that passed their CRC
            raise StreamError(f"tensor '{name}': exponent chunk {i + 1} cannot be decoded "
                              f"({exc})") from exc


# --------------------------------------------------------------------------------------------
# Rebuilding values from their planes (vectorised; numpy releases the GIL inside each pass)
# --------------------------------------------------------------------------------------------

_SIGN_MANTISSA = np.int16(0x807F - 0x10000)  # bits 15 and 0..6 of a 16-bit word, as int16


def reconstruct_into(out: np.ndarray, exponent: np.ndarray, raw: np.ndarray,
                     start: int = 0, stop: int | None = None) -> None:
    """Write values ``start:stop`` of ``out`` (uint16 or uint32 words) from their two planes.

    ``exponent`` holds the slice's exponent bytes; ``raw`` is the whole tensor's raw stream (the
    slice is taken here), so K workers can each rebuild their own chunk of one output in parallel.
    """
    stop = out.size if stop is None else stop
    n_total = out.size
    sm = raw[start:stop]
    if out.dtype == np.uint16:
        dst, tmp = out[start:stop], np.empty(stop - start, np.uint16)
    else:
        dst, tmp = np.empty(stop - start, np.uint16), np.empty(stop - start, np.uint16)
    # hi = sign << 15 | e << 7 | mantissa in five passes: sm read as int8 and widened to int16
    # copies the sign into bits 7..15, the mask keeps bits 15 and 0..6, the exponent fills 7..14.
    signed = dst.view(np.int16)
    np.copyto(signed, sm.view(np.int8), casting="unsafe")
    np.bitwise_and(signed, _SIGN_MANTISSA, out=signed)
    np.copyto(tmp, exponent, casting="unsafe")
    np.left_shift(tmp, 7, out=tmp)
    np.bitwise_or(dst, tmp, out=dst)
    if out.dtype == np.uint32:
        low = raw[n_total:].view(np.uint16)[start:stop]
        view = out[start:stop]
        np.copyto(view, dst, casting="unsafe")
        np.left_shift(view, 16, out=view)
        np.bitwise_or(view, low, out=view)


# --------------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------------

_local = threading.local()


def _zstd():
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - dependency of edgekit
        raise MissingDependencyError("the zstd codec needs the 'zstandard' package",
                                     hint="pip install zstandard") from exc
    return zstandard


def _lz4():
    try:
        import lz4.frame
    except ImportError as exc:  # pragma: no cover - dependency of edgekit
        raise MissingDependencyError("the lz4 codec needs the 'lz4' package",
                                     hint="pip install lz4") from exc
    return lz4.frame


def compress_bytes(data: bytes | memoryview | np.ndarray, codec: str, level: int) -> bytes:
    """One independent frame (content size recorded, no frame checksum: ours is CRC-32)."""
    if codec == "zstd":
        zstandard = _zstd()
        key = ("zc", level)
        compressor = getattr(_local, "zc", {}).get(key)
        if compressor is None:
            compressor = zstandard.ZstdCompressor(level=level, write_content_size=True,
                                                  write_checksum=False)
            _local.__dict__.setdefault("zc", {})[key] = compressor
        return compressor.compress(data)
    if codec == "lz4":
        return _lz4().compress(data, compression_level=level, store_size=True,
                               content_checksum=False)
    raise UsageError(f"unknown codec '{codec}'", hint=f"valid: {', '.join(CODECS)}")


def decompress_bytes(data: bytes | memoryview, codec: str, raw_size: int) -> bytes:
    """Decode one frame; the GIL is released inside the library while it works."""
    if codec == "zstd":
        decompressor = getattr(_local, "zd", None)
        if decompressor is None:
            decompressor = _local.zd = _zstd().ZstdDecompressor()
        out = decompressor.decompress(data, max_output_size=raw_size)
    elif codec == "lz4":
        out = _lz4().decompress(data)
    else:
        raise UsageError(f"unknown codec '{codec}'", hint=f"valid: {', '.join(CODECS)}")
    if len(out) != raw_size:
        raise ChecksumError(f"a chunk decoded to {len(out)} bytes, expected {raw_size}")
    return out


def crc32(data: bytes | memoryview | np.ndarray) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF
