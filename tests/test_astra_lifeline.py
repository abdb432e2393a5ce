"""SIGKILL to ``edgekit astra run``'s launcher (issue 45 item 8): its ranks end within a second
(the kernel's parent-death signal, or the polling thread where there is none) and the next run
removes the temporary folder it left, and nothing else.

Real processes; every wait has a timeout, so a regression fails instead of hanging.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from edgekit.methods.astra.runtime import lifeline, workdir

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux signals")

DEATH_LIMIT_S = 1.0


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone_after(pids: list[int], limit_s: float) -> float | None:
    """Seconds until every pid has ended, or None when one outlived ``limit_s``."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if not any(_alive(p) for p in pids):
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _workers(launcher: subprocess.Popen, count: int, timeout_s: float = 90) -> list[int]:
    deadline = time.monotonic() + timeout_s
    parent = psutil.Process(launcher.pid)
    while time.monotonic() < deadline:
        assert launcher.poll() is None, launcher.communicate()
        found = []
        for child in parent.children():
            with contextlib.suppress(psutil.Error):
                if "edgekit.methods.astra.runtime.worker" in " ".join(child.cmdline()):
                    found.append(child.pid)
        if len(found) == count:
            return found
        time.sleep(0.05)
    raise AssertionError("the workers did not start")


def _wait_joined(pids: list[int], timeout_s: float = 90) -> None:
    """Until every rank holds an established TCP connection (the group's rendezvous)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            if all(any(c.status == psutil.CONN_ESTABLISHED
                       for c in psutil.Process(p).net_connections("tcp")) for p in pids):
                return
        time.sleep(0.05)
    raise AssertionError("the ranks did not join their group")


def test_sigkill_to_the_launcher_ends_its_ranks_and_the_next_run_sweeps_its_folder(
        tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), OMP_NUM_THREADS="1")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "edgekit", "astra", "run", "--mode", "astra", "--fault", "1:hang",
         "--timeout", "60"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ranks: list[int] = []
    try:
        ranks = _workers(launcher, 2)
        _wait_joined(ranks)  # bound to the launcher before they joined the group
        folder, = tmp.glob("edgekit-astra-*")
        assert (folder / workdir.PID_FILE).read_text().split()[0] == str(launcher.pid)
        launcher.kill()
        launcher.wait(10)
        took = _gone_after(ranks, 10.0)
        print(f"\nranks gone {took} s after SIGKILL to the launcher")
        assert took is not None and took < DEATH_LIMIT_S, took
    finally:
        _kill_all(ranks)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
    # the folder outlived its launcher; the next launcher removes it and nothing else
    assert folder.exists()
    keep = [tmp / "edgekit-astra-nopid", tmp / "other-folder", tmp / "edgekit-astra-live"]
    for path in keep:
        path.mkdir()
    (tmp / "other-folder" / workdir.PID_FILE).write_text(f"{launcher.pid}\n")
    (tmp / "edgekit-astra-live" / workdir.PID_FILE).write_text(f"{os.getpid()}\n")
    (tmp / "edgekit-astra-file").write_text(f"{launcher.pid}\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    with workdir.launcher_workdir() as mine:
        assert not folder.exists()
        assert (mine / workdir.PID_FILE).read_text().split()[0] == str(os.getpid())
        assert all(p.exists() for p in keep) and (tmp / "edgekit-astra-file").exists()
    assert not mine.exists()


def test_a_reused_pid_does_not_keep_a_folder(tmp_path):
    """A pid whose start time differs from the one recorded is another process."""
    folder = tmp_path / "edgekit-astra-old"
    folder.mkdir()
    (folder / workdir.PID_FILE).write_text(f"{os.getpid()} 1\n")  # this pid, another start
    assert workdir.sweep(tmp_path) == [folder]


# The lifeline alone, in a process tree of plain Pythons (no torch to import): a parent starts a
# child that binds to it (or to a pid that is not its parent), prints how and its pid and sleeps;
# the parent is then killed with SIGKILL.
_CHILD = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("lifeline", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(os.getpid(), flush=True)
print(module.bind_to_launcher(use_prctl=sys.argv[2] == "prctl"), flush=True)
time.sleep(60)
"""
_PARENT = """
import os, subprocess, sys, time
launcher = os.getpid() if sys.argv[2] == "self" else 1
env = dict(os.environ, EDGEKIT_ASTRA_LAUNCHER_PID=str(launcher))
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[3], sys.argv[4]], env=env)
print("ended", child.wait(), flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(("how", "named"), [("prctl", "self"), ("thread", "self"),
                                            ("prctl", "other")])
def test_a_rank_ends_with_its_launcher(how, named):
    """With prctl or the polling thread the rank ends within a second of its launcher; a rank
    whose launcher is already gone when it binds (here: a pid that is not its parent) ends at
    once."""
    path = importlib.util.find_spec(lifeline.__name__).origin
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _CHILD, named, path, how],
                              stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        if named == "other":
            # ended at once by SIGTERM, its parent alive
            assert parent.stdout.readline().split() == ["ended", str(-signal.SIGTERM)]
            assert parent.poll() is None
            return
        assert parent.stdout.readline().strip() == how
        assert _alive(child)
        parent.kill()
        parent.wait(10)
        took = _gone_after([child], 5.0)
        assert took is not None and took < DEATH_LIMIT_S, took
    finally:
        _kill_all([child] if child else [])
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


def test_no_launcher_named_leaves_a_torchrun_rank_alone():
    assert lifeline.bind_to_launcher({}) is None
    assert lifeline.bind_to_launcher({lifeline.LAUNCHER_PID_ENV: "x"}) is None
