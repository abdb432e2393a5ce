"""The ZipMoE expert store: one data file per model, 4 KiB-aligned chunks, a JSON manifest.

A store is a folder:

    manifest.json   format, codec, the model's config, and per tensor: dtype, shape, encoding,
                    the extents (offset, size, CRC-32) of its raw bytes and exponent chunks, and
                    the digest that binds its decoded bytes to its name, dtype and shape
    config.json     the checkpoint's own config, copied
    weights.zmoe    the bytes: per tensor its K compressed exponent chunks, then its raw
                    sign-mantissa bytes, every extent starting on a 4 KiB boundary (so reads can
                    use O_DIRECT), the file padded to a whole 4 KiB block

Every tensor of the checkpoint is stored, experts and dense weights alike; bf16/fp16/fp32 tensors
go through the codec (``encoding: zipmoe``), anything else is kept as is (``encoding: raw``).
Written through ``atomic_directory`` (store_writer.py): an interrupted compress leaves nothing
half-made.

The metadata is checked as the bytes are: the manifest carries the SHA-256 of ``config.json``
(``config_sha256``) and of its own canonical content (``manifest_sha256``), every field is checked
against ``MANIFEST_FIELDS``, and every tensor the model of that config asks for must be present
with the shape it implies, a floating dtype and extents of the size that dtype and shape give. A
store whose metadata lies about the number of layers, or about a dtype of another size, does not
open.

The manifest's own digest only shows it was not edited by hand; whoever edits it can re-sign it.
What binds a tensor's bytes to the tensor is its ``sha256``: the SHA-256 of its name, dtype and
shape and its decoded bytes (``tensor_digest``), taken at compress time from the checkpoint's
tensor. A manifest re-signed after relabelling a bf16 tensor fp16 (same size, so it opens), or
after swapping two experts' extents, fails that digest when the tensor is decoded: ``verify``
decodes every tensor, serving checks each tensor the first time it decodes it. It is not a
signature (anyone can recompute it); it catches relabelled, swapped or mis-decoded data.

Reading checks before decoding: the data file must be as long as the manifest says (a truncated
file names the first tensor that lies past its end), and every extent's CRC-32 must match (a
flipped byte names the tensor and the chunk). Nothing is ever decoded silently from bad bytes.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.errors import UsageError
from edgekit.fileio import read_json_object, register_output_kind, sha256_file
from edgekit.kernels import zipmoe_codec as codec
from edgekit.kernels.zipmoe_planes import STREAM_HINT, StreamError, check_stream
from edgekit.methods.zipmoe.config import PROJECTIONS, MoEConfig, parse_config
from edgekit.schema import INT, STR, ListOf, MapOf, Object, Optional, check

FORMAT = "edgekit-zipmoe-store"
# 2: config_sha256 and manifest_sha256 (version 1 stores carry no hashes of their metadata).
# 3: a per-tensor sha256 binding decoded bytes to name, dtype and shape (``tensor_digest``).
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
CONFIG = "config.json"
DATA_FILE = "weights.zmoe"
ALIGN = 4096


class StoreError(UsageError):
    """A store that is missing, malformed, truncated or corrupt; names the file and tensor."""


RECOMPRESS = "compress the checkpoint again with 'edgekit moe compress'"
_EXTENT = Object({"offset": INT, "size": INT, "crc32": INT, "start": Optional(INT),
                  "stop": Optional(INT)})
# Every field a reader of the store uses; ``totals`` and ``source`` are records for people.
MANIFEST_FIELDS = Object({
    "format": STR,
    "format_version": INT,
    "codec": Object({"name": STR, "level": Optional(INT), "chunks": INT, "alignment": INT}),
    "data_file": STR,
    "config_sha256": STR,
    "manifest_sha256": STR,
    "tensors": MapOf(Object({"dtype": STR, "shape": ListOf(INT), "encoding": STR,
                             "sha256": STR, "raw": _EXTENT, "chunks": ListOf(_EXTENT)})),
    "trace": Optional(Object({"tokens": Optional(INT), "counts": Optional(MapOf(ListOf(INT))),
                              "skipped": Optional(STR)})),
})
_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest's canonical JSON (sorted keys, no spaces), without the digest."""
    rest = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def tensor_digest(name: str, tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's identity (name, dtype, shape) and its bytes, so that bytes which
    decode fine but belong to another tensor, or are read as another dtype, do not match."""
    head = json.dumps([name, codec.dtype_name(tensor.dtype), list(tensor.shape)])
    digest = hashlib.sha256(head.encode() + b"\0")
    digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def _store_files(folder: Path) -> list[str] | None:
    manifest = read_json_object(folder / MANIFEST)
    if manifest.get("format") != FORMAT:
        return None
    return [MANIFEST, CONFIG, str(manifest.get("data_file", DATA_FILE))]


register_output_kind("zipmoe-store", _store_files)


def align_up(n: int, alignment: int = ALIGN) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class Extent:
    """Bytes of one stream in the data file; ``start:stop`` are the values an exponent chunk
    covers (unused for raw streams)."""

    offset: int
    size: int
    crc32: int
    start: int = 0
    stop: int = 0

    @property
    def end(self) -> int:
        return self.offset + self.size

    def to_json(self) -> dict[str, int]:
        out = {"offset": self.offset, "size": self.size, "crc32": self.crc32}
        if self.stop:
            out.update(start=self.start, stop=self.stop)
        return out


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    encoding: str               # "zipmoe" | "raw"
    sha256: str                 # tensor_digest of the decoded tensor
    raw: Extent                 # sign-mantissa bytes (zipmoe) or the whole tensor (raw)
    chunks: tuple[Extent, ...]  # compressed exponent chunks (zipmoe)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Size of the tensor itself (uncompressed)."""
        return self.numel * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()

    @property
    def stored_bytes(self) -> int:
        return self.raw.size + sum(c.size for c in self.chunks)

    @property
    def exponent_bytes(self) -> int:
        return sum(c.size for c in self.chunks)

    def extents(self) -> list[tuple[str, Extent]]:
        k = len(self.chunks)
        return [(f"exponent chunk {i + 1} of {k}", c) for i, c in enumerate(self.chunks)] + \
               [("sign-mantissa bytes" if self.encoding == "zipmoe" else "raw bytes", self.raw)]


def _entry_from_json(name: str, doc: dict[str, Any], where: str) -> TensorEntry:
    try:
        ext = lambda d: Extent(int(d["offset"]), int(d["size"]), int(d["crc32"]),  # noqa: E731
                               int(d.get("start", 0)), int(d.get("stop", 0)))
        return TensorEntry(name, str(doc["dtype"]), tuple(int(s) for s in doc["shape"]),
                           str(doc["encoding"]), str(doc["sha256"]), ext(doc["raw"]),
                           tuple(ext(c) for c in doc.get("chunks", [])))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{where}: tensor '{name}' has a malformed entry ({exc!r})") from exc


class Store:
    """An opened store: manifest checked, data file length checked against it."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        if not path.is_file():
            raise StoreError(f"{self.folder}: not a ZipMoE store (no {MANIFEST})",
                             hint="create one with 'edgekit moe compress CHECKPOINT -o STORE'")
        try:
            self.manifest = read_json_object(path)
        except UsageError as exc:
            raise StoreError(str(exc)) from exc
        if self.manifest.get("format") != FORMAT:
            raise StoreError(f"{path}: not a ZipMoE store manifest")
        version = self.manifest.get("format_version")
        if version != FORMAT_VERSION:
            old = isinstance(version, int) and not isinstance(version, bool) and \
                version < FORMAT_VERSION
            raise StoreError(f"{path}: format version {version!r} is not supported (this "
                             f"edgekit reads {FORMAT_VERSION})",
                             hint=RECOMPRESS if old else "upgrade edgekit")
        check(self.manifest, MANIFEST_FIELDS, str(path), hint=RECOMPRESS, error=StoreError)
        if manifest_digest(self.manifest) != self.manifest["manifest_sha256"]:
            raise StoreError(f"{path}: field 'manifest_sha256' does not match the manifest's "
                             f"content (edited after compress?)", hint=RECOMPRESS)
        config_path = self.folder / CONFIG
        if not config_path.is_file():
            raise StoreError(f"{config_path}: missing", hint=RECOMPRESS)
        try:
            config_digest = sha256_file(config_path)
        except OSError as exc:
            raise StoreError(f"{config_path}: cannot read ({exc.strerror or exc})") from exc
        if config_digest != self.manifest["config_sha256"]:
            raise StoreError(f"{config_path}: SHA-256 does not match field 'config_sha256' of "
                             f"{path} (edited after compress?)", hint=RECOMPRESS)
        self.config_dict = read_json_object(config_path)
        self.tensors = {n: _entry_from_json(n, d, str(path))
                        for n, d in self.manifest["tensors"].items()}
        has_bias = any(n.endswith("self_attn.q_proj.bias") for n in self.tensors)
        self.config: MoEConfig = parse_config(self.config_dict, str(config_path),
                                              attention_bias=has_bias)
        self.codec = self.manifest["codec"]["name"]
        self.data_path = self.folder / self.manifest["data_file"]
        # Names of the tensors whose decoded bytes have matched their sha256 (see ``prove``).
        self.checked: set[str] = set()
        self._check_length()
        self._check_tensors()
        self._check_trace()

    def _check_length(self) -> None:
        """The data file is there, readable, and holds every extent (none before its start)."""
        if not self.data_path.is_file():
            raise StoreError(f"{self.data_path}: data file is missing")
        try:
            self.data_path.open("rb").close()  # readable: a refusal here, not mid-serve
        except OSError as exc:
            raise StoreError(f"{self.data_path}: cannot read ({exc.strerror or exc})",
                             hint="check the file's permissions") from exc
        where = self.folder / MANIFEST
        for name, entry in self.tensors.items():
            for what, e in entry.extents():
                if e.offset < 0 or e.size < 0 or e.start < 0 or e.stop < 0:
                    raise StoreError(f"{where}: tensor '{name}' ({what}) has a negative offset, "
                                     f"size or range", hint=RECOMPRESS)
        size = self.data_path.stat().st_size
        beyond = [(e.end, name, what) for name, t in self.tensors.items()
                  for what, e in t.extents() if e.end > size]
        if beyond:
            _, name, what = min(beyond)
            more = len({n for _, n, _ in beyond}) - 1
            raise StoreError(
                f"{self.data_path}: truncated to {size} bytes; tensor '{name}' ({what}) lies past "
                f"the end" + (f", and {more} more tensors" if more > 0 else ""),
                hint="compress the checkpoint again")

    def _check_tensors(self) -> None:
        """Every tensor the model of ``config.json`` asks for, dense and expert, is here with
        the shape the config implies, a dtype the model computes in and extents of the size
        that dtype and shape give; no tensor belongs to a layer the config does not have."""
        where, config_path = self.folder / MANIFEST, self.folder / CONFIG
        for name in self.tensors:
            layer = _LAYER.match(name)
            if layer and int(layer.group(1)) >= self.config.num_layers:
                raise StoreError(f"{config_path}: field 'num_hidden_layers' is "
                                 f"{self.config.num_layers}, but {where} holds '{name}'",
                                 hint=RECOMPRESS)
        for name, shape in self.config.tensor_shapes().items():
            entry = self.tensors.get(name)
            field = f"field 'tensors[\"{name}\"]"
            if entry is None:
                raise StoreError(f"{where}: tensor '{name}' is missing ({config_path.name} "
                                 f"implies it)", hint=RECOMPRESS)
            if entry.shape != shape:
                raise StoreError(f"{where}: {field}.shape' is {list(entry.shape)}, "
                                 f"{config_path.name} implies {list(shape)}", hint=RECOMPRESS)
            if entry.encoding not in ("zipmoe", "raw"):
                raise StoreError(f"{where}: {field}.encoding' is {entry.encoding!r}, not "
                                 f"'zipmoe' or 'raw'", hint=RECOMPRESS)
            if entry.dtype not in codec.SPLITS:
                raise StoreError(f"{where}: {field}.dtype' is {entry.dtype!r}, the model needs "
                                 f"one of {', '.join(codec.SPLITS)}", hint=RECOMPRESS)
            split = codec.split_for(entry.dtype)
            itemsize = np.dtype(split.word).itemsize
            raw_size = entry.numel * (split.raw_bytes if entry.encoding == "zipmoe" else itemsize)
            covered = sum(c.stop - c.start for c in entry.chunks)
            if entry.raw.size != raw_size or (entry.encoding == "zipmoe" and
                                              covered != entry.numel):
                raise StoreError(f"{where}: {field}.dtype' is {entry.dtype!r}, but its stored "
                                 f"bytes do not fit that dtype and shape {list(entry.shape)}",
                                 hint=RECOMPRESS)

    def _check_trace(self) -> None:
        """A routing trace counts, for each MoE layer of the config, the tokens of each of its
        experts; the planner adds the rows up, so one of another length is refused here."""
        counts = (self.manifest.get("trace") or {}).get("counts") or {}
        where = self.folder / MANIFEST
        layers = {str(layer) for layer in self.config.moe_layers}
        for layer, row in counts.items():
            if layer not in layers:
                raise StoreError(f"{where}: field 'trace.counts' has layer {layer!r}, which is "
                                 f"not a MoE layer of {CONFIG}", hint=RECOMPRESS)
            if len(row) != self.config.num_experts or any(c < 0 for c in row):
                raise StoreError(f"{where}: field 'trace.counts[\"{layer}\"]' holds "
                                 f"{len(row)} counts, not {self.config.num_experts} non-negative "
                                 f"ones (one per expert)", hint=RECOMPRESS)

    def expert_keys(self) -> Iterable[tuple[int, int, str]]:
        for layer in self.config.moe_layers:
            for expert in range(self.config.num_experts):
                for proj in PROJECTIONS:
                    yield layer, expert, proj

    def expert_entries(self, layer: int, expert: int) -> tuple[TensorEntry, ...]:
        return tuple(self.tensors[self.config.expert_tensor_name(layer, expert, p)]
                     for p in PROJECTIONS)

    @property
    def expert_bytes(self) -> int:
        """bf16 (original) bytes of one routed expert."""
        return sum(t.nbytes for t in self.expert_entries(self.config.moe_layers[0], 0))

    @property
    def total_expert_bytes(self) -> int:
        return self.expert_bytes * self.config.num_experts * len(self.config.moe_layers)

    def dense_names(self) -> list[str]:
        return [n for n in self.tensors if ".experts." not in n]

    # -- decoding ---------------------------------------------------------------------------
    def prove(self, entry: TensorEntry, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` after checking it against its entry's ``sha256``, the first time only:
        bytes that passed their CRC-32s once decode the same way every time, so serving pays
        one hash per tensor it uses, not one per decode."""
        if entry.name not in self.checked:
            if tensor_digest(entry.name, tensor) != entry.sha256:
                raise StoreError(
                    f"{self.folder / MANIFEST}: tensor '{entry.name}' decodes to bytes that do "
                    f"not match its field 'sha256' (data swapped, dtype relabelled or manifest "
                    f"forged)", hint=RECOMPRESS)
            self.checked.add(entry.name)
        return tensor

    def read(self, handle: Any, entry: TensorEntry, extent: Extent, what: str) -> bytes:
        handle.seek(extent.offset)
        data = handle.read(extent.size)
        return check_extent(entry, extent, data, what)

    def load_tensor(self, name: str, pool: cf.Executor | None = None) -> torch.Tensor:
        entry = self.tensors.get(name)
        if entry is None:
            raise StoreError(f"{self.folder}: no tensor '{name}'")
        with open(self.data_path, "rb") as handle:
            return self.prove(entry, decode_entry(entry, {what: self.read(handle, entry, e, what)
                                                          for what, e in entry.extents()},
                                                  self.codec, pool))

    def verify(self, progress: Callable[[str], None] | None = None) -> int:
        """Check every extent's CRC-32, decode every tensor and check its ``sha256``; returns
        the tensor count."""
        with open(self.data_path, "rb") as handle:
            for name, entry in self.tensors.items():
                blobs = {what: self.read(handle, entry, e, what) for what, e in entry.extents()}
                self.checked.discard(name)  # verify checks every tensor, proven or not
                self.prove(entry, decode_entry(entry, blobs, self.codec))
                if progress:
                    progress(name)
        return len(self.tensors)


@contextlib.contextmanager
def stream_errors() -> Iterator[None]:
    """Raise a ``StreamError`` (the codec's stream checks) as a ``StoreError``."""
    try:
        yield
    except StreamError as exc:
        raise StoreError(str(exc), hint=STREAM_HINT) from exc.__cause__


def check_extent(entry: TensorEntry, extent: Extent, data: bytes, what: str) -> bytes:
    """Raise ``StoreError`` naming the tensor when ``data`` is short or fails its CRC-32."""
    with stream_errors():
        return check_stream(entry.name, what, data, extent.size, extent.crc32)


def encoded_from_entry(entry: TensorEntry, chunk_data: list[bytes], raw: bytes,
                       codec_name: str) -> codec.EncodedTensor:
    return codec.EncodedTensor(
        entry.dtype, entry.shape, codec_name, 0, raw, entry.raw.crc32,
        [codec.EncodedChunk(d, c.start, c.stop, c.crc32)
         for d, c in zip(chunk_data, entry.chunks, strict=False)])


def decode_entry(entry: TensorEntry, blobs: dict[str, bytes], codec_name: str,
                 pool: cf.Executor | None = None) -> torch.Tensor:
    """A tensor from its verified extents (``blobs`` keyed as ``TensorEntry.extents`` names)."""
    items = [blobs[what] for what, _ in entry.extents()]
    if entry.encoding == "raw":
        dtype = getattr(torch, entry.dtype)
        return torch.frombuffer(bytearray(items[-1]), dtype=torch.uint8).view(dtype).reshape(
            entry.shape)
    if entry.encoding != "zipmoe":
        raise StoreError(f"tensor '{entry.name}': unknown encoding '{entry.encoding}'")
    encoded = encoded_from_entry(entry, items[:-1], items[-1], codec_name)
    try:
        # The CRCs were checked on read; the codec still checks decoded sizes.
        return codec.decode(encoded, pool, check=False, name=entry.name)
    except codec.CodecError as exc:
        raise StoreError(f"tensor '{entry.name}': {exc}") from exc
    except Exception as exc:  # a decoder's own error on bytes that passed their CRC
        raise StoreError(f"tensor '{entry.name}': cannot be decoded ({exc})") from exc

