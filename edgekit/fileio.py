"""Atomic file and folder writes: a failed write leaves nothing half-made behind."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _parent_writable(path: Path) -> Path:
    parent = path.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create folder {parent}: {exc.strerror}") from exc
    if not os.access(parent, os.W_OK):
        raise UsageError(f"output folder {parent} is not writable", hint="choose another path")
    return parent


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename over ``path``."""
    target = Path(path)
    parent = _parent_writable(target)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file ordinary modes
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str], overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary folder; on success it replaces ``path``, on any error it is removed.

    Replacing keeps the old folder until the new one is complete, so an interrupted export never
    destroys a good artifact.
    """
    target = Path(path)
    parent = _parent_writable(target)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} exists and is not a folder")
    if target.exists() and not overwrite:
        raise UsageError(f"{target} already exists", hint="remove it or choose another -o")
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".partial"))
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes 0700; the result is an ordinary folder
    try:
        yield staging
        if target.exists():
            backup = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".old"))
            backup.rmdir()
            os.replace(target, backup)
            os.replace(staging, target)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def sha256_file(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON object from ``path``; anything else is a one-line UsageError naming the file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError as exc:  # arrays or objects nested thousands deep
        raise UsageError(f"{path}: not valid JSON (nested too deeply)") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data
