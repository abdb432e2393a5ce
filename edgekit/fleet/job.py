"""What runs on a device: unpack the shipped artifact, then build and profile it in a child.

This is the client's code running on the worker (Dask imports it by name there), so every device
needs the same edgekit installed. The profile itself runs in ``python -m edgekit.fleet.child``:
a TensorRT engine is built there by the profiler's existing path (an ONNX artifact given to a
backend that builds its own format), with the device's own meter, and the child is killed when
it overruns ``timeout_s``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from edgekit.fleet.child import RESULT_FILE, SETTINGS_FILE, TARGET_FILE
from edgekit.fleet.payload import Payload

TOPIC = "edgekit-fleet"  # the Dask event topic jobs report their start and end on
_TAIL = 300  # characters of a crashed child's output kept in the error line


def _announce(event: str) -> str:
    """Tell the client (through the scheduler's event log) that this job started or ended here,
    so its timeout counts from the start on this device, not from the submit."""
    from distributed import get_worker

    worker = get_worker()
    worker.log_event(TOPIC, {"key": str(worker.get_current_task()), "event": event,
                             "worker": worker.address, "name": str(worker.name)})
    return str(worker.name)


def run_child(workdir: Path, timeout_s: float) -> dict[str, Any]:
    """The child's result in ``workdir``, or ``{"error": ...}`` when it overran or crashed."""
    log = workdir / "child.log"
    with open(log, "wb") as out:
        child = subprocess.Popen([sys.executable, "-m", "edgekit.fleet.child", "profile",
                                  str(workdir)], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return {"error": f"timed out after {timeout_s:g} s on the device (killed)"}
    result = workdir / RESULT_FILE
    if code != 0 or not result.is_file():
        tail = " ".join(log.read_text(errors="replace").split())[-_TAIL:]
        return {"error": f"the profiling process exited with {code}: {tail}"}
    return json.loads(result.read_text())


def profile_job(payload: Payload, settings: dict[str, Any], device: str,
                timeout_s: float) -> dict[str, Any]:
    """``{"report": ..., "worker": name}`` from profiling the payload on this device, or
    ``{"error": one line, "worker": name}``. ``settings``: ``child.settings_doc`` of the
    client's ``ProfileSettings``; the device is this worker's kind."""
    worker = _announce("start")
    try:
        with tempfile.TemporaryDirectory(prefix="edgekit-fleet-") as tmp:
            workdir = Path(tmp)
            target = payload.unpack(workdir)
            (workdir / SETTINGS_FILE).write_text(json.dumps({**settings, "device": device}))
            (workdir / TARGET_FILE).write_text(str(target))
            result = run_child(workdir, timeout_s)
    finally:
        _announce("end")
    if "report" in result:
        result["report"]["target"] = payload.name
    return {**result, "worker": worker}
