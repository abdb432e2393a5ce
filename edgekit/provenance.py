"""Where a result came from: versions, machine, git revision, the command."""
from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
_LIBRARIES = ("edgekit", "torch", "onnx", "onnxruntime", "numpy", "spikingjelly", "tensorrt")


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a measurement depends on (absent ones omitted)."""
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _declares_edgekit(pyproject: Path) -> bool:
    """Whether ``pyproject`` is edgekit's own (tomllib is not in Python 3.10, JetPack 6's)."""
    try:
        text = pyproject.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    return re.search(r"(?ms)^\[project\][^\[]*?^name\s*=\s*[\"']edgekit[\"']", text) is not None


def git_revision() -> str | None:
    """edgekit's commit when it runs from its own source tree (a checkout with its pyproject.toml
    at the repository's top); never the commit of a repository around an installed copy (a venv
    or site-packages inside a user's project), which says nothing about edgekit's code."""
    source = Path(__file__).resolve().parent.parent
    if not _declares_edgekit(source / "pyproject.toml"):
        return None
    top = _git(source, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != source:
        return None
    return _git(source, "rev-parse", "--short", "HEAD")


def machine() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "system": platform.system(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
    }


def provenance(**extra: Any) -> dict[str, Any]:
    """The provenance block every report and manifest carries."""
    doc: dict[str, Any] = {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "versions": library_versions(),
        "git_revision": git_revision(),
        "machine": machine(),
    }
    doc.update(extra)
    return doc


def report_document(kind: str, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A versioned JSON report: ``{"schema": ..., "kind": ..., "provenance": ..., **body}``."""
    return {"schema_version": SCHEMA_VERSION, "kind": kind, "provenance": provenance(**extra),
            **body}
