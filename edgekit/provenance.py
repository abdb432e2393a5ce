"""Where a result came from: versions, machine, git revision, the command (style.md rule 6)."""
from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
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


def git_revision() -> str | None:
    """The edgekit checkout's commit, when edgekit runs from a git checkout."""
    repo = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


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
    return {"schema_version": SCHEMA_VERSION, "kind": kind, "provenance": provenance(**extra), **body}
