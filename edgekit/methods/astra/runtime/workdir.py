"""The launcher's temporary folder: an ``edgekit-astra-*`` folder marked with the launcher's pid,
so that the next launcher removes it when SIGKILL left it behind (``edgekit.workdirs``)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from edgekit import workdirs

PREFIX = "edgekit-astra-"
PID_FILE = workdirs.PID_FILE


def sweep(parent: Path | None = None) -> list[Path]:
    """Remove the folders under ``parent`` (the temporary directory) left by dead launchers."""
    return workdirs.sweep(PREFIX, parent)


@contextlib.contextmanager
def launcher_workdir() -> Iterator[Path]:
    """A fresh ``edgekit-astra-*`` folder marked with this launcher's pid, removed on exit; the
    folders of launchers killed earlier are removed first."""
    with workdirs.owned_tempdir(PREFIX) as folder:
        yield folder
