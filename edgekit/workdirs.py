"""Temporary folders that outlive a killed owner for one run only.

A process stopped by SIGTERM or Ctrl-C removes its temporary folder itself; one killed with
SIGKILL (a lost fleet worker, a launcher killed by its user) cannot. So each such folder carries
``owner.pid`` with its owner's pid (and, where ``/proc`` has it, its start time, which tells a
reused pid apart), and the next process that makes a folder of the same prefix first removes
those whose owner is gone. Only folders that carry both marks are candidates: the prefix and an
``owner.pid`` naming a dead process, owned by this user; nothing else in the temporary directory
is ever touched.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PID_FILE = "owner.pid"


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
    """Whether ``folder`` carries an owner mark and that owner has died; False when unsure."""
    try:
        if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
            return False
        words = (folder / PID_FILE).read_text().split()
    except (OSError, UnicodeDecodeError):
        return False
    if not words or not words[0].isdigit():
        return False
    return not _alive(int(words[0]), words[1] if len(words) > 1 else None)


def sweep(prefix: str, parent: Path | None = None) -> list[Path]:
    """Remove the ``prefix*`` folders under ``parent`` (the temporary directory) whose owner
    died."""
    root = Path(parent or tempfile.gettempdir())
    removed = []
    with contextlib.suppress(OSError):
        for folder in root.glob(prefix + "*"):
            if _owner_gone(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


@contextlib.contextmanager
def owned_tempdir(prefix: str) -> Iterator[Path]:
    """A fresh ``prefix*`` temporary folder marked with this process's pid, removed on exit;
    the folders of killed owners of the same prefix are removed first."""
    sweep(prefix)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        pid = os.getpid()
        (Path(tmp) / PID_FILE).write_text(f"{pid} {_start_time(pid) or ''}".strip() + "\n")
        yield Path(tmp)
