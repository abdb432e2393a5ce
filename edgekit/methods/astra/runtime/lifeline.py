"""A rank ends with its launcher, even when the launcher is killed with SIGKILL.

SIGKILL gives the launcher no chance to stop its ranks: they would run on, blocked in a
collective, until their own timeout. So each rank asks the kernel to send it SIGTERM when its
parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``, prctl(2)), then checks that its parent is still
the launcher: a launcher killed before the request was made has already handed the rank to
another parent, and no death signal would ever come. (Linux sends it when the *thread* that
started the rank ends; ``launch`` starts, watches and stops its ranks in one call, so that thread
outlives them.) Where prctl is missing (macOS, Windows) a
daemon thread polls the parent pid instead. The launcher passes its pid in
``EDGEKIT_ASTRA_LAUNCHER_PID``; a rank started by torchrun has none and is left alone.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading

LAUNCHER_PID_ENV = "EDGEKIT_ASTRA_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_S = 0.1


def _set_parent_death_signal(signum: int) -> bool:
    """Ask Linux for ``signum`` when the parent dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _end() -> None:
    """What the death signal would do: SIGTERM to this process (its default action ends it)."""
    os.kill(os.getpid(), signal.SIGTERM)


def _watch_parent(launcher: int) -> None:
    event = threading.Event()
    while not event.wait(_POLL_S):
        if os.getppid() != launcher:
            _end()
            return


def bind_to_launcher(environ: dict[str, str] | None = None, use_prctl: bool = True) -> str | None:
    """End this process when the launcher named in the environment dies; returns how
    ("prctl", "thread"), or None when no launcher is named (torchrun)."""
    value = (os.environ if environ is None else environ).get(LAUNCHER_PID_ENV, "")
    if not value.isdigit():
        return None
    launcher = int(value)
    how = "prctl" if use_prctl and _set_parent_death_signal(signal.SIGTERM) else "thread"
    if how == "thread":
        threading.Thread(target=_watch_parent, args=(launcher,), name="edgekit-lifeline",
                         daemon=True).start()
    if os.getppid() != launcher:  # the launcher died before the request: nobody will signal
        _end()
    return how
