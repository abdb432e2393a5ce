"""Importing a user's Python file (a model script, an ``--evaluate`` function, a plugin) as a
module of its own, the way ``importlib`` runs a script for Polygraphy's ``my.py:load_network``.

The module is named after the file's resolved path (``<prefix>_<hash>``), so importing a file
twice gives the same name; its folder is on ``sys.path`` while it imports, so its neighbours
import too, and nothing of it stays in ``sys.modules`` when it fails.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class NotImportable(Exception):
    """The file is not a Python file ``importlib`` can load."""


def import_script(path: Path, prefix: str) -> ModuleType:
    """The module that running ``path`` makes; the script's own exception propagates."""
    name = f"{prefix}_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise NotImportable(f"{path} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return module
