"""Small trained checkpoints shipped with edgekit, so the short tour (``make demo``) measures
trained models within its budget instead of models trained for seconds.

``manifest.json`` names each file with its SHA-256, the ``edgekit train`` command that made it,
the dataset and its digest, and the test score it reached. A file is only ever used through
``install``, which checks its hash first: a corrupted or replaced file is refused, never
loaded. ``python -m edgekit.demo_weights`` retrains them all (``build.py``); the full tour
(``make demo DEMO=full``) does not use them and trains every model to its schedule.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.fileio import atomic_write_bytes, read_json_object

FOLDER = Path(__file__).resolve().parent
MANIFEST = FOLDER / "manifest.json"


def manifest(folder: Path = FOLDER) -> dict[str, Any]:
    """The manifest's ``weights`` entries by name."""
    path = folder / MANIFEST.name
    if not path.is_file():
        raise UsageError(f"no demo weights manifest at {path}",
                         hint="python -m edgekit.demo_weights trains them")
    weights = read_json_object(path).get("weights")
    if not isinstance(weights, dict):
        raise UsageError(f"{path}: field 'weights' must be an object")
    return weights


def verified_bytes(name: str, folder: Path = FOLDER) -> bytes:
    """The bytes of demo checkpoint ``name``, refused unless they hash to the manifest's."""
    weights = manifest(folder)
    if name not in weights:
        raise UsageError(f"no demo weights named {name!r}", hint=f"known: {', '.join(weights)}")
    entry = weights[name]
    path = folder / entry["file"]
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"demo weights {path}: cannot read: {exc.strerror}") from exc
    if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
        raise UsageError(f"demo weights {path} do not match the SHA-256 in {MANIFEST.name}",
                         hint="the file is corrupt or was replaced; reinstall edgekit or "
                              "retrain them with python -m edgekit.demo_weights")
    return blob


def install(name: str, dest: Path, folder: Path = FOLDER) -> Path:
    """Write the verified checkpoint ``name`` to ``dest`` (a file the tour owns), atomically."""
    return atomic_write_bytes(dest, verified_bytes(name, folder))
