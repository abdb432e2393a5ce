"""Spawn N local worker processes, watch them, and turn any rank's failure into one error.

Each worker is ``python -m edgekit.methods.astra.runtime.worker`` with the rendezvous (a free
localhost port) in its environment, exactly as torchrun would start it. The launcher polls the
children: when one exits non-zero it gives the others a moment to report their own view (a lost
peer, a timeout), terminates whoever is left, and raises ``RankFailed`` naming each rank and what
happened. Every wait is bounded: the workers' collective timeout ends a hang, and the launcher's own
deadline (the timeout plus start-up grace) ends anything else.

SIGTERM to the launcher is handled like Ctrl-C: it raises ``Terminated`` (a KeyboardInterrupt), so
the ranks are stopped and the ``edgekit-astra-*`` temporary folder removed before the CLI exits
143; while a rank is being started it (and Ctrl-C) waits until that rank is recorded. A rank that
is still running when its peers gave up on it (stopped with SIGSTOP, or stuck) is named first after
any rank that failed on its own: it is what the others waited for. SIGKILL to the launcher ends its
ranks too (``lifeline``), and the next launcher removes the folder it left (``workdir``).
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError, Terminated
from edgekit.fileio import read_json_object
from edgekit.interpreter import module_command
from edgekit.methods.astra.runtime.lifeline import LAUNCHER_PID_ENV
from edgekit.methods.astra.runtime.spec import RunSpec
from edgekit.methods.astra.runtime.workdir import launcher_workdir

_POLL_S = 0.05
_REPORT_GRACE_S = 3.0  # how long peers get to write their own error after one rank fails
_START_GRACE_S = 60.0  # importing torch and building the model, before the first collective


class RankFailed(EdgekitError):
    """A rank died, raised or timed out; the message names every rank and what it saw."""

    exit_code = 1


def free_port() -> int:
    """A TCP port that was free a moment ago on localhost (the rendezvous port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pythonpath() -> str:
    """Put the running edgekit first, so the workers import the same code as the launcher."""
    import edgekit

    root = str(Path(edgekit.__file__).resolve().parent.parent)
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _stopped(proc: subprocess.Popen) -> bool:
    """Whether the process is stopped (SIGSTOP, SIGTSTP, a debugger); Linux /proc only."""
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] in (["T"], ["t"])


def _rank_report(workdir: Path, rank: int, code: int | None, stopped: bool = False) -> str:
    error = workdir / f"rank{rank}.error"
    if error.exists() and error.read_text().strip():
        return f"rank {rank}: {error.read_text().strip()}"
    if code is None:
        if stopped:
            return f"rank {rank}: stuck (the process was stopped), terminated"
        return f"rank {rank}: still running, terminated"
    return f"rank {rank} {_describe_exit(code)}"


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            # a stopped process keeps SIGTERM pending until it runs again
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 5.0
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _failure(workdir: Path, procs: list[subprocess.Popen], codes: list[int | None],
             stopped: frozenset[int] = frozenset()) -> str:
    """One line: the ranks that failed on their own first (root causes), then the ranks still
    running that the others waited for (stopped ones first), then the others."""
    own = [r for r, c in enumerate(codes) if c not in (None, 0)
           and not (workdir / f"rank{r}.peer").exists()]
    stuck = sorted((r for r, c in enumerate(codes) if c is None), key=lambda r: r not in stopped)
    rest = [r for r in range(len(procs)) if r not in own and r not in stuck and codes[r] != 0]
    return "; ".join(_rank_report(workdir, r, codes[r], r in stopped) for r in own + stuck + rest)


def _main_thread() -> bool:
    """Signal handlers can only be installed from the main thread (the CLI's; not a library
    caller's worker thread, where the default actions stay)."""
    import threading

    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _sigterm_interrupts():
    """While the ranks run, SIGTERM raises ``Terminated`` in the main thread, so the ``finally``
    blocks stop the ranks and remove the temporary folder (the default action would not)."""
    if not _main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _signals_held():
    """SIGTERM and Ctrl-C held back while one rank is started, then raised as usual: raised
    inside ``Popen`` after the child exists, they would leave that rank out of the list of
    processes the ``finally`` stops, running on after the launcher (seen under load, when the
    signal came while the last rank was being started). A signal the launcher ignores (SIGINT in
    a background job, under nohup) stays ignored: a handler would not reach the rank, which would
    then start with the default disposition and die of a Ctrl-C meant for the foreground."""
    if not _main_thread():
        yield
        return
    came: list[int] = []
    held = [s for s in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(s) is not signal.SIG_IGN]
    previous = {s: signal.signal(s, lambda signum, frame: came.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if came:
        signal.raise_signal(came[0])  # the usual handler: Terminated or KeyboardInterrupt


def launch(spec: RunSpec, world_size: int, deadline_s: float | None = None,
           echo: Any = None) -> dict[str, Any]:
    """Run ``spec`` on ``world_size`` local processes; returns rank 0's result document.

    ``deadline_s`` bounds the whole run (default: start-up grace + the collective timeout per
    forward pass to run, generous for any run that is making progress). ``echo`` gets rank 0's
    progress lines.
    """
    forwards = (len(spec.modes) + len(spec.astra_groups)) * (
        spec.warmup + spec.reps * len(spec.links))
    limit = deadline_s or _START_GRACE_S + spec.timeout_s * forwards
    with _sigterm_interrupts(), launcher_workdir() as workdir:
        result = workdir / "result.json"
        port = free_port()
        argv = module_command("edgekit.methods.astra.runtime.worker", *spec.argv(),
                              "--workdir", str(workdir), "--result", str(result))
        procs: list[subprocess.Popen] = []
        stopped: frozenset[int] = frozenset()
        try:
            for rank in range(world_size):
                env = dict(os.environ, PYTHONPATH=_pythonpath(), RANK=str(rank),
                           LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                           OMP_NUM_THREADS=str(spec.threads),
                           **{LAUNCHER_PID_ENV: str(os.getpid())})
                # rank 0's output is the progress; the others' would only repeat it
                with _signals_held():
                    procs.append(subprocess.Popen(
                        argv, env=env, stderr=subprocess.STDOUT, text=True,
                        stdout=subprocess.DEVNULL if rank else subprocess.PIPE))
            codes = _watch(procs, workdir, time.monotonic() + limit, echo)
            stopped = frozenset(r for r, p in enumerate(procs)
                                if p.poll() is None and _stopped(p))
        finally:
            _stop(procs)
        if codes is None:
            raise RankFailed(f"no result after {limit:.0f} s (the launcher's deadline); "
                             "every rank was terminated")
        if any(c != 0 for c in codes):
            raise RankFailed(_failure(workdir, procs, codes, stopped))
        return read_json_object(result)


def _watch(procs: list[subprocess.Popen], workdir: Path, deadline: float,
           echo: Any) -> list[int | None] | None:
    """Poll until every rank exits 0, or one fails (then wait briefly for the others);
    None when the deadline passed first."""
    import selectors

    sel = selectors.DefaultSelector()
    if procs[0].stdout is not None:
        os.set_blocking(procs[0].stdout.fileno(), False)
        sel.register(procs[0].stdout, selectors.EVENT_READ)
    failed_at: float | None = None
    pending = ""
    while True:
        for key, _ in sel.select(timeout=_POLL_S):
            chunk = key.fileobj.read()  # type: ignore[union-attr]
            if chunk == "":  # end of file: rank 0 has exited
                sel.unregister(key.fileobj)
            pending += chunk or ""
            *lines, pending = pending.split("\n")
            if echo is not None:
                for line in lines:
                    echo(line)
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return codes
        now = time.monotonic()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        if failed_at is not None and (all(c is not None for c in codes)
                                      or now - failed_at > _REPORT_GRACE_S):
            return codes
        if now > deadline:
            return None
