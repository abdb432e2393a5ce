"""A dataset that is slow to build (a simulator's) kept on disk under ``$EDGEKIT_HOME``, so each
process that needs it (``train``, then ``compare``, then ``report``) loads it in a second instead of
building it again.

The file is a plain ``.npz`` (read with ``allow_pickle=False``: nothing in it can run code) beside a
JSON record of its SHA-256; a file whose checksum does not match, or that does not read, is built
again and replaced. The key must change whenever the data would: callers put their settings and a
digest of the code that builds the data into it (``source_digest``). One version is kept per
dataset name: writing a new key removes the older keys' files of that name (each 100+ MB), and
only files whose record says edgekit wrote them.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from edgekit.data import Dataset
from edgekit.errors import UsageError
from edgekit.fileio import atomic_write_bytes, atomic_write_json, read_json_object, sha256_file
from edgekit.paths import edgekit_home

FOLDER = "datasets"
ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def source_digest(files: Iterable[Path]) -> str:
    """SHA-256 over the bytes of ``files``: the code that makes the data, as part of the key."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _read(path: Path, record: Path, name: str) -> Dataset | None:
    try:
        meta = read_json_object(record)
        if sha256_file(path) != meta.get("sha256"):
            return None
        with np.load(path, allow_pickle=False) as arrays:
            return Dataset(name, *(arrays[a] for a in ARRAYS), str(meta["digest"]))
    except (OSError, ValueError, KeyError, UsageError, zipfile.BadZipFile):
        return None


def cached_dataset(name: str, key: str, build: Callable[[], Dataset]) -> Dataset:
    """The dataset ``name`` stored under ``key``, built by ``build()`` when there is no sound
    copy. A home folder that cannot be written to only costs the cache, never the data."""
    folder = edgekit_home() / FOLDER
    stem = name.replace(":", "-")  # a variant's name (``wifi-pose-sim:station``) as a file name
    path, record = folder / f"{stem}-{key}.npz", folder / f"{stem}-{key}.json"
    if path.exists() and record.exists():
        found = _read(path, record, name)
        if found is not None:
            return found
    data = build()
    buffer = io.BytesIO()
    np.savez(buffer, **{a: getattr(data, a) for a in ARRAYS})
    payload = buffer.getvalue()
    # a home that cannot take the copy costs the next process a rebuild, never this one its data
    with contextlib.suppress(OSError, UsageError):
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, payload)
        atomic_write_json(record, {"sha256": hashlib.sha256(payload).hexdigest(),
                                   "digest": data.digest, "arrays": list(ARRAYS)})
        _remove_other_versions(folder, stem, key)
    return data


def _remove_other_versions(folder: Path, name: str, key: str) -> None:
    """Delete ``name``'s copies under other keys: stale versions nothing will read again. A pair
    is edgekit's when its record is one this module writes; anything else is left alone."""
    for record in folder.glob(f"{name}-*.json"):
        other = record.stem[len(name) + 1:]
        if other == key or "-" in other:  # this version, or another dataset's name
            continue
        try:
            mine = read_json_object(record).get("arrays") == list(ARRAYS)
        except (OSError, UsageError):
            mine = False
        if mine:
            record.with_suffix(".npz").unlink(missing_ok=True)
            record.unlink(missing_ok=True)
