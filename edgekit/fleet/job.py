"""What runs on a device: unpack the shipped artifact, then build and profile it in a child.

This is the client's code running on the worker (Dask imports it by name there), so every device
needs the same edgekit installed. The profile itself runs in the agent's runner process
(``python -m edgekit.fleet.child serve``): a TensorRT engine is built there by the profiler's
existing path (an ONNX artifact given to a backend that builds its own format), with the
device's own meter, and the runner is killed when a job overruns ``timeout_s``.
"""
from __future__ import annotations

import json
import os
import selectors
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from edgekit.fleet.child import DONE, RESULT_FILE, SETTINGS_FILE, TARGET_FILE
from edgekit.fleet.payload import Payload
from edgekit.fleet.worker import labelled_only
from edgekit.interpreter import module_command
from edgekit.workdirs import owned_tempdir

TOPIC = "edgekit-fleet"  # the Dask event topic jobs report their start and end on
_TAIL = 300  # characters of a crashed runner's output kept in the error line
RUNNER_IDLE_S = 60.0  # the runner exits after this long without a job (its memory back)


def _announce(event: str) -> str:
    """Tell the client (through the scheduler's event log) that this job started or ended here,
    so its timeout counts from the start on this device, not from the submit."""
    from distributed import get_worker

    worker = get_worker()
    worker.log_event(TOPIC, {"key": str(worker.get_current_task()), "event": event,
                             "worker": worker.address, "name": str(worker.name)})
    return str(worker.name)


class Runner:
    """The agent's end of ``python -m edgekit.fleet.child serve``: started on the first job,
    reused by the next ones, killed when a job overruns (the next job starts a fresh one)."""

    def __init__(self, idle_s: float = RUNNER_IDLE_S) -> None:
        self.idle_s = idle_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Any = None  # the runner's stderr, read back when it crashes

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(
                module_command("edgekit.fleet.child", "serve", str(self.idle_s)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        return self.proc

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def _tail(self) -> str:
        self.log.seek(0)
        return " ".join(self.log.read().decode(errors="replace").split())[-_TAIL:]

    def run(self, workdir: Path, timeout_s: float) -> dict[str, Any]:
        """The job's result in ``workdir``, or ``{"error": ...}`` when it overran or the runner
        died. A runner that had just exited for being idle is replaced once."""
        for _ in range(2):
            proc = self._start()
            try:
                proc.stdin.write(f"{workdir}\n".encode())  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            except BrokenPipeError:
                self.kill()
                continue
            done = self._wait_done(proc, f"{DONE} {workdir}", timeout_s)
            if done is None:
                self.kill()
                return {"error": f"timed out after {timeout_s:g} s on the device (killed)"}
            if done:
                return json.loads((workdir / RESULT_FILE).read_text())
            code = proc.wait()
            if code != 0:
                tail = self._tail()
                self.proc = None
                return {"error": f"the profiling process exited with {code}: {tail}"}
            self.proc = None  # exited idle just as the job came: once more, with a fresh one
        return {"error": "the profiling process would not start"}

    @staticmethod
    def _wait_done(proc: subprocess.Popen[bytes], line: str, timeout_s: float) -> bool | None:
        """True when ``line`` came, False when the runner closed its output first, None when
        ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        buffer = b""
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if not sel.select(timeout=left):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    return False
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                if any(x.decode(errors="replace").strip() == line for x in lines):
                    return True


_RUNNER = Runner()  # one per agent: the agent runs one job at a time (one thread)


def profile_job(payload: Payload, settings: dict[str, Any], device: str,
                timeout_s: float) -> dict[str, Any]:
    """``{"report": ..., "worker": name}`` from profiling the payload on this device, or
    ``{"error": one line, "worker": name}``. ``settings``: ``child.settings_doc`` of the
    client's ``ProfileSettings``; the device is this worker's kind."""
    worker = _announce("start")
    try:
        with owned_tempdir("edgekit-fleet-") as workdir:
            target = payload.unpack(workdir)
            (workdir / SETTINGS_FILE).write_text(json.dumps(
                {**settings, "device": device, "as_device": labelled_only()}))
            (workdir / TARGET_FILE).write_text(str(target))
            result = _RUNNER.run(workdir, timeout_s)
    finally:
        _announce("end")
    if "report" in result:
        result["report"]["target"] = payload.name
    return {**result, "worker": worker}
