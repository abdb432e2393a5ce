"""The process a device agent starts for each job (and once at start-up to know its device).

The agent itself never imports torch, ONNX Runtime or TensorRT: idle, it is Dask's worker and
little else (docs/fleet.md has its measured CPU and memory). Jobs run here, in a process the
agent kills when a job overruns, so a hung or crashed engine build never takes the agent down.
The process stays for the next job (imports are paid once per batch of jobs, not per job) and
exits after ``idle_s`` without one, giving its memory back to the device.

    python -m edgekit.fleet.child describe [DEVICE]   -> JSON {"profile", "sensors"} on stdout
    python -m edgekit.fleet.child serve IDLE_S        -> for each WORKDIR line on stdin:
                                                         WORKDIR/result.json, then DONE WORKDIR
"""
from __future__ import annotations

import dataclasses
import json
import selectors
import sys
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


def describe(device: str | None) -> dict[str, Any]:
    """This machine's device profile (``device`` checked, else detected) and readable sensors."""
    from edgekit.energy.registry import list_meters
    from edgekit.energy.select import sysfs_root
    from edgekit.profiler.run import resolve_device

    root = sysfs_root()
    return {"profile": resolve_device(device).name,
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


def serve(idle_s: float) -> int:
    """Run the jobs whose folders arrive on stdin until stdin closes or none comes for
    ``idle_s``."""
    waiting = selectors.DefaultSelector()
    waiting.register(sys.stdin, selectors.EVENT_READ)
    while waiting.select(timeout=idle_s):
        line = sys.stdin.readline()
        if not line:
            return 0
        run_one(Path(line.strip()))
        print(f"{DONE} {line.strip()}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    mode, *rest = argv
    if mode == "describe":
        try:
            found = describe(rest[0] if rest else None)
        except EdgekitError as exc:
            found = {"error": str(exc)}
        print(json.dumps(found))
        return 0
    return serve(float(rest[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
