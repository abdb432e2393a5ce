"""The process a device agent starts for each job (and once at start-up to know its device).

The agent itself never imports torch, ONNX Runtime or TensorRT: idle, it is Dask's worker and
little else (docs/fleet.md has its measured CPU and memory). Jobs run here, in a process the
agent kills when a job overruns, so a hung or crashed engine build never takes the agent down.
The process stays for the next job (imports are paid once per batch of jobs, not per job) and
exits after ``idle_s`` without one, giving its memory back to the device.

    python -m edgekit.fleet.child describe [DEVICE [as]] -> JSON {"profile", "sensors",
                                                         "measured_on"} on stdout
    python -m edgekit.fleet.child serve IDLE_S        -> for each WORKDIR line on stdin:
                                                         WORKDIR/result.json, then DONE WORKDIR
"""
from __future__ import annotations

import dataclasses
import json
import queue
import sys
import threading
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError

DONE = "edgekit-fleet-done"  # the line that says a job's result is written (stdout may hold
# other lines: libraries print)
SETTINGS_FILE = "settings.json"
RESULT_FILE = "result.json"
TARGET_FILE = "target.txt"


def settings_doc(settings: Any) -> dict[str, Any]:
    """``ProfileSettings`` as plain JSON (every field, whatever fields it has)."""
    return dataclasses.asdict(settings)


def settings_from(doc: dict[str, Any]) -> Any:
    from edgekit.profiler.run import ProfileSettings
    from edgekit.profiler.timing import TimingPlan

    return ProfileSettings(**{**doc, "plan": TimingPlan(**doc["plan"])})


def describe(device: str | None, as_device: bool = False) -> dict[str, Any]:
    """This machine's device profile (``device`` checked against the hardware, else detected),
    its readable sensors, and the machine's own profile when it only carries ``device``'s
    label (``as_device``; None otherwise)."""
    from edgekit.energy.registry import list_meters
    from edgekit.energy.select import sysfs_root
    from edgekit.profiler.run import resolve_device

    root = sysfs_root()
    profile, here = resolve_device(device, as_device=as_device, sysfs=str(root))
    return {"profile": profile.name, "measured_on": here.name if here else None,
            "sensors": [s.name for s in list_meters() if s.sensor and s.probe(root)]}


def profile_in(workdir: Path) -> dict[str, Any]:
    from edgekit.profiler.run import profile

    settings = settings_from(json.loads((workdir / SETTINGS_FILE).read_text()))
    target = (workdir / TARGET_FILE).read_text()
    return {"report": profile(target, settings)}


def run_one(workdir: Path) -> None:
    """One job: its result, or the one line of what went wrong, in ``workdir/result.json``."""
    try:
        result = profile_in(workdir)
    except EdgekitError as exc:
        result = {"error": str(exc)}
    except Exception as exc:  # a bug or a library's failure: reported, and the next job runs
        message = " ".join(str(exc).split())[:300]
        result = {"error": f"internal error: {type(exc).__name__}: {message}"}
    (workdir / RESULT_FILE).write_text(json.dumps(result))


def lines_of(stream: Any) -> queue.Queue:
    """The lines of ``stream`` as they arrive, then None at its end, read by a thread. (A
    select() on the stream beside a buffered readline() misses a line that arrived in the same
    read as the one before: it waits in Python's buffer, where select() cannot see it.)"""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="edgekit-fleet-stdin", daemon=True).start()
    return lines


def serve(idle_s: float) -> int:
    """Run the jobs whose folders arrive on stdin, one line each, until stdin closes or none
    comes for ``idle_s``."""
    lines = lines_of(sys.stdin)
    while True:
        try:
            line = lines.get(timeout=idle_s)
        except queue.Empty:
            return 0
        if line is None:
            return 0
        run_one(Path(line.strip()))
        print(f"{DONE} {line.strip()}", flush=True)


def main(argv: list[str]) -> int:
    mode, *rest = argv
    if mode == "describe":
        try:
            found = describe(rest[0] if rest else None, rest[1:] == ["as"])
        except EdgekitError as exc:
            found = {"error": str(exc)}
        print(json.dumps(found))
        return 0
    return serve(float(rest[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
