"""The process a device agent starts for each job (and once at start-up to know its device).

The agent itself never imports torch, ONNX Runtime or TensorRT: idle, it is Dask's worker and
little else (docs/fleet.md has its measured CPU and memory). Each job runs here, in a fresh
process the agent can kill when the job overruns, so a hung or crashed engine build never takes
the agent down and its memory goes back to the device after every job.

    python -m edgekit.fleet.child describe [DEVICE]   -> JSON {"profile", "sensors"} on stdout
    python -m edgekit.fleet.child profile WORKDIR     -> WORKDIR/result.json
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError

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


def main(argv: list[str]) -> int:
    mode, *rest = argv
    try:
        if mode == "describe":
            print(json.dumps(describe(rest[0] if rest else None)))
            return 0
        workdir = Path(rest[0])
        result = profile_in(workdir)
    except EdgekitError as exc:
        result = {"error": str(exc)}
        if mode == "describe":
            print(json.dumps(result))
            return 0
    (workdir / RESULT_FILE).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
