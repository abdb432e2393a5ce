"""Who is in the fleet: each device's profile, sensors and whether it is busy."""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgekit.errors import UsageError
from edgekit.fleet.engine import device_of
from edgekit.fleet.worker import describe_here

WAIT_S = 10.0  # every call to the scheduler or a worker gives up after this


@dataclass(frozen=True)
class Device:
    """One connected worker."""

    address: str
    name: str
    profile: str  # the device kind: a profile name
    busy: bool  # a job is running on it
    host: str | None = None
    sensors: tuple[str, ...] = ()
    edgekit: str | None = None  # edgekit's version there (the client's code runs there)
    measured_on: str | None = None  # its own profile when it only carries ``profile``'s label

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "name": self.name, "profile": self.profile,
                "busy": self.busy, "host": self.host, "sensors": list(self.sensors),
                "edgekit": self.edgekit, "measured_on": self.measured_on}


def _ask_each(client: Any) -> dict[str, Any]:
    """``describe_here`` from every worker; {} when they do not all answer within WAIT_S
    (``Client.run`` has no timeout of its own, so it runs in a thread that is waited for)."""
    answers: dict[str, Any] = {}

    def ask() -> None:
        answers.update(client.run(describe_here, on_error="return"))

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    return answers if not thread.is_alive() else {}


def workers_by_kind(client: Any) -> dict[str, list[str]]:
    """Device kind -> addresses of its connected workers (workers of other programs left out)."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    kinds: dict[str, list[str]] = {}
    for addr, worker in info.items():
        kind = device_of(worker.get("resources") or {})
        if kind is not None:
            kinds.setdefault(kind, []).append(addr)
    return kinds


def fleet_devices(client: Any, describe: bool = True) -> list[Device]:
    """Every connected device, sorted by kind and name; ``describe`` asks each for its host,
    sensors and edgekit version (when not all answer within WAIT_S, all are listed without)."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    processing = client.processing()
    details = _ask_each(client) if describe and info else {}
    devices = []
    for addr, worker in info.items():
        kind = device_of(worker.get("resources") or {})
        if kind is None:
            continue
        extra = details.get(addr)
        extra = extra if isinstance(extra, dict) else {}
        devices.append(Device(address=addr, name=str(worker.get("name", addr)), profile=kind,
                              busy=bool(processing.get(addr)), host=extra.get("host"),
                              sensors=tuple(extra.get("sensors", ())),
                              edgekit=extra.get("edgekit"),
                              measured_on=extra.get("measured_on")))
    return sorted(devices, key=lambda d: (d.profile, d.name))


def select_kinds(client: Any, wanted: Sequence[str] | None) -> list[str]:
    """The device kinds to run on: ``wanted`` (each a profile name with a connected worker), or
    every connected kind. A kind without a worker is one line naming it, before any work."""
    connected = workers_by_kind(client)
    if not wanted:
        if not connected:
            raise UsageError("no device is connected to the fleet",
                             hint="start 'edgekit fleet worker SCHEDULER' on each device")
        return sorted(connected)
    from edgekit.profiles import load_profile

    for name in wanted:
        load_profile(name)  # an unknown profile name lists the valid ones
    absent = [name for name in wanted if name not in connected]
    if absent:
        have = ", ".join(sorted(connected)) or "none"
        raise UsageError(f"no worker of device kind {', '.join(absent)} is connected "
                         f"(connected: {have})",
                         hint="start 'edgekit fleet worker SCHEDULER --device NAME' there")
    return list(dict.fromkeys(wanted))
