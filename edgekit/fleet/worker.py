"""The device agent: one Dask worker per device, one thread, labelled with its device profile.

One thread, so two profiling jobs never share a device; the resource ``device:<profile>=1`` lets
the client route jobs to a device kind. No nanny process, no dashboard, and no torch: the profile
is detected and jobs run in child processes (``edgekit.fleet.child``), so the idle agent
is Dask's worker and little else (``benchmarks/fleet.py`` measures it).
"""
from __future__ import annotations

import asyncio
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.fleet.engine import address, distributed, resource_for, security
from edgekit.fleet.scheduler import CLOSED_HTTP, without_http
from edgekit.interpreter import module_command
from edgekit.provenance import library_versions

_DESCRIBE_TIMEOUT_S = 120.0  # importing torch on a Jetson Nano's SD card takes tens of seconds
_HERE: dict[str, Any] = {}  # what this agent said about its device at start-up


def describe_device(device: str | None, as_device: bool = False) -> dict[str, Any]:
    """This machine's profile (``device`` checked against the hardware, or only its label with
    ``as_device``; else detected) and readable power sensors, found by a child process so the
    agent never imports torch."""
    args = ([device] if device else []) + (["as"] if as_device else [])
    cmd = module_command("edgekit.fleet.child", "describe", *args)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=_DESCRIBE_TIMEOUT_S,
                             check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UsageError(f"detecting the device took over {_DESCRIBE_TIMEOUT_S:g} s") from None
    try:
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = " ".join(out.stderr.split())[-300:]
        raise UsageError(f"detecting the device failed: {tail}") from None
    if "error" in found:
        raise UsageError(found["error"])
    return found


def labelled_only() -> bool:
    """True when this agent serves under a profile its hardware is not (``--as-device``): its
    jobs' reports then say where they were measured."""
    return bool(_HERE.get("measured_on"))


def describe_here() -> dict[str, Any]:
    """What a worker tells ``fleet status`` (run on it by ``Client.run``, in its event loop, so
    it answers while a job runs)."""
    return {"host": platform.node(), "edgekit": library_versions().get("edgekit"), **_HERE}


# Dask's worker samples itself for its dashboard (a statistical profiler every 10 ms, a system
# monitor every 500 ms, a GIL monitor, a memory monitor every 100 ms) and checks its event loop
# every 20 ms: useless on an agent with no dashboard and no data to spill, and most of its idle
# CPU (benchmarks/fleet.py). Heartbeats, which the scheduler paces, are left as they are.
QUIET_AGENT = {
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.admin.system-monitor.disk": False,
    "distributed.admin.system-monitor.gil.enabled": False,
}


async def _serve(where: str, device: str, name: str, sec: Any) -> None:
    import dask

    with dask.config.set(QUIET_AGENT):
        worker = distributed().Worker(where, nthreads=1, resources={resource_for(device): 1},
                                      name=name, security=sec, dashboard=False,
                                      dashboard_address=CLOSED_HTTP, memory_limit=0)
        async with worker:
            without_http(worker)  # started with the worker: no HTTP server on a device
            await worker.finished()


def run_worker(scheduler: str, found: dict[str, Any], *, name: str | None = None,
               tls_dir: str | Path | None = None) -> None:
    """Serve as a device of ``found["profile"]`` (from ``describe_device``) until the scheduler
    closes or the process is interrupted."""
    _HERE.update(found)
    profile = found["profile"]
    asyncio.run(_serve(address(scheduler, tls_dir is not None), profile,
                       name or f"{platform.node()}/{profile}/{os.getpid()}", security(tls_dir)))
