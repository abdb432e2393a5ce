"""Writing a ZipMoE store (the format: store.py): tensors encoded on worker threads, their
streams appended 4 KiB-aligned to the data file, the manifest signed, and the new store opened
with every check a reader makes before ``atomic_directory`` swaps it in."""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.fileio import atomic_directory, sha256_file
from edgekit.kernels import zipmoe_codec as codec
from edgekit.methods.zipmoe.config import parse_config
from edgekit.methods.zipmoe.store import (
    ALIGN,
    CONFIG,
    DATA_FILE,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    Extent,
    Store,
    StoreError,
    align_up,
    manifest_digest,
    tensor_digest,
)


class _DataWriter:
    def __init__(self, path: Path) -> None:
        self.handle = open(path, "wb")
        self.offset = 0

    def put(self, data: bytes) -> Extent:
        start = self.offset
        self.handle.write(data)
        pad = align_up(len(data)) - len(data)
        if pad:
            self.handle.write(b"\0" * pad)
        self.offset += len(data) + pad
        return Extent(start, len(data), codec.crc32(data))

    def close(self) -> None:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()


def _encode(name: str, tensor: torch.Tensor, codec_name: str, level: int,
            chunks: int) -> tuple[codec.EncodedTensor | torch.Tensor, str]:
    """The tensor encoded (floating) or as is, and its ``tensor_digest``. A NaN or infinite
    weight is refused: the store would serve it without complaint and emit tokens from it."""
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        raise StoreError(f"tensor '{name}' holds {bad} NaN or infinite values; a model with them "
                         f"computes nothing meaningful", hint="check the checkpoint")
    digest = tensor_digest(name, tensor)
    if codec.dtype_name(tensor.dtype) in codec.SPLITS:
        return codec.encode(tensor, codec_name, level, chunks), digest
    return tensor, digest


# Over 8 parameters: keyword-only codec choices with defaults, passed on from compress_checkpoint
def write_store(folder: str | Path, tensors: Iterable[tuple[str, Callable[[], torch.Tensor]]],
                config: dict[str, Any], *, codec_name: str = codec.DEFAULT_CODEC,
                level: int | None = None, chunks: int = codec.DEFAULT_CHUNKS, workers: int = 2,
                extra: dict[str, Any] | None = None,
                progress: Callable[[str], None] | None = None,
                inputs: Iterable[str | Path] = (), force: bool = False) -> dict[str, Any]:
    """Compress ``tensors`` (name, loader) into a store at ``folder``; returns the manifest.

    Tensors are encoded on ``workers`` threads (the codecs release the GIL) and written in the
    order given, a few in flight at a time so memory stays bounded.
    """
    level = codec.DEFAULT_LEVEL[codec_name] if level is None and codec_name in \
        codec.DEFAULT_LEVEL else level
    codec.settings_check(codec_name, level, chunks)
    parse_config(config)  # refuse configs the engine cannot serve before doing any work
    entries: dict[str, Any] = {}
    totals = {"params": 0, "original_bytes": 0, "stored_bytes": 0, "exponent_bytes": 0,
              "zipmoe_params": 0}
    with atomic_directory(folder, inputs=inputs, force=force) as staging:
        writer = _DataWriter(staging / DATA_FILE)
        try:
            with cf.ThreadPoolExecutor(max(1, workers)) as pool:
                pending: list[tuple[str, cf.Future]] = []

                def drain(limit: int) -> None:
                    while len(pending) > limit:
                        name, future = pending.pop(0)
                        entries[name] = _write_one(writer, *future.result(), totals)
                        if progress:
                            progress(name)

                for name, load in tensors:
                    tensor = load()
                    pending.append((name, pool.submit(_encode, name, tensor, codec_name, level,
                                                      chunks)))
                    drain(2 * max(1, workers))
                drain(0)
        finally:
            writer.close()
        (staging / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "config_sha256": sha256_file(staging / CONFIG),
            "codec": {"name": codec_name, "level": level, "chunks": chunks,
                      "min_chunk_values": codec.MIN_CHUNK_VALUES, "alignment": ALIGN,
                      "checksum": "crc32"},
            "data_file": DATA_FILE, "data_size": writer.offset,
            "totals": {**totals, "bits_per_param": 8 * totals["stored_bytes"] / max(
                1, totals["params"])},
            **(extra or {}),
            "tensors": entries,
        }
        manifest["manifest_sha256"] = manifest_digest(manifest)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        try:  # every check a reader makes, before the swap: a bad store never replaces a good one
            Store(staging)
        except StoreError as exc:
            raise StoreError(f"{folder}: not written, the new store would not open: "
                             f"{exc.message.replace(str(staging), str(folder))}",
                             hint="check the checkpoint against its config.json") from exc
    return manifest


def _write_one(writer: _DataWriter, encoded: codec.EncodedTensor | torch.Tensor, digest: str,
               totals: dict[str, int]) -> dict[str, Any]:
    if isinstance(encoded, codec.EncodedTensor):
        chunk_extents = []
        for chunk in encoded.chunks:
            ext = writer.put(chunk.data)
            chunk_extents.append(Extent(ext.offset, ext.size, ext.crc32, chunk.start, chunk.stop))
        raw = writer.put(encoded.raw)
        dtype, shape, encoding = encoded.dtype, encoded.shape, "zipmoe"
        nbytes = encoded.numel * np.dtype(codec.split_for(encoded.dtype).word).itemsize
        totals["zipmoe_params"] += encoded.numel
        totals["exponent_bytes"] += encoded.exponent_bytes
        numel = encoded.numel
    else:
        tensor = encoded.contiguous()
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        raw, chunk_extents = writer.put(data), []
        dtype, shape, encoding = codec.dtype_name(tensor.dtype), tuple(tensor.shape), "raw"
        nbytes, numel = len(data), tensor.numel()
    totals["params"] += numel
    totals["original_bytes"] += nbytes
    totals["stored_bytes"] += raw.size + sum(c.size for c in chunk_extents)
    return {"dtype": dtype, "shape": list(shape), "encoding": encoding, "sha256": digest,
            "raw": raw.to_json(),
            "chunks": [c.to_json() for c in chunk_extents]}


