"""Where edgekit keeps per-user state: calibration results and cached checkpoints."""
from __future__ import annotations

import os
from pathlib import Path

from edgekit.errors import UsageError


def edgekit_home() -> Path:
    """``$EDGEKIT_HOME`` if set, else ``~/.cache/edgekit``; a UsageError if that is not a folder.

    The folder need not exist yet (writers create it), but a file in its place would make every
    read and write under it fail with an OS error, so it is refused here with one clear line.
    """
    env = os.environ.get("EDGEKIT_HOME")
    home = Path(env).expanduser() if env else Path.home() / ".cache" / "edgekit"
    if home.exists() and not home.is_dir():
        raise UsageError(f"EDGEKIT_HOME {home} is not a folder",
                         hint="point EDGEKIT_HOME at a folder, or unset it")
    return home
