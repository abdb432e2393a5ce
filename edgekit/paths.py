"""Where edgekit keeps per-user state: calibration results and cached checkpoints."""
from __future__ import annotations

import os
from pathlib import Path


def edgekit_home() -> Path:
    """``$EDGEKIT_HOME`` if set, else ``~/.cache/edgekit``."""
    env = os.environ.get("EDGEKIT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "edgekit"
