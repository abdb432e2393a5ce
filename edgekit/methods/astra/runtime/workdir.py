"""The launcher's temporary folder, and the removal of one a killed launcher left behind.

A launcher stopped by SIGTERM or Ctrl-C removes its ``edgekit-astra-*`` folder itself; one killed
with SIGKILL cannot. So the launcher writes its pid (and, where ``/proc`` has it, its start time,
which tells a reused pid apart) into ``launcher.pid`` in the folder, and every launcher starts by
removing the folders whose launcher is gone. Only folders that carry both marks are candidates:
the ``edgekit-astra-`` prefix and a ``launcher.pid`` file naming a dead process, owned by this
user; nothing else in the temporary directory is ever touched.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFIX = "edgekit-astra-"
PID_FILE = "launcher.pid"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (proc(5), field 22); None off Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone's process: alive, whoever it is
    now = _start_time(pid)
    return started is None or now is None or now == started


def _owner_gone(folder: Path) -> bool:
    """Whether ``folder`` is a launcher's and that launcher has died; False when unsure."""
    try:
        if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
            return False
        words = (folder / PID_FILE).read_text().split()
    except (OSError, UnicodeDecodeError):
        return False
    if not words or not words[0].isdigit():
        return False
    return not _alive(int(words[0]), words[1] if len(words) > 1 else None)


def sweep(parent: Path | None = None) -> list[Path]:
    """Remove the folders under ``parent`` (the temporary directory) left by dead launchers."""
    root = Path(parent or tempfile.gettempdir())
    removed = []
    with contextlib.suppress(OSError):
        for folder in root.glob(PREFIX + "*"):
            if _owner_gone(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


@contextlib.contextmanager
def launcher_workdir() -> Iterator[Path]:
    """A fresh ``edgekit-astra-*`` folder marked with this launcher's pid, removed on exit; the
    folders of launchers killed earlier are removed first."""
    sweep()
    with tempfile.TemporaryDirectory(prefix=PREFIX) as tmp:
        pid = os.getpid()
        mark = f"{pid} {_start_time(pid) or ''}".strip()
        (Path(tmp) / PID_FILE).write_text(mark + "\n")
        yield Path(tmp)
