"""The energy meters edgekit knows: each meter's file registers itself here with one call.

A ``MeterSpec`` says how to tell whether the meter's sensor is present (``probe``), how to open it
on a device (``open``, which includes a trial read so failures surface before a profile starts),
and where "auto" tries it (``priority``, lowest first). ``select.open_meter`` walks this registry
and never names a meter, so adding a sensor is one file in ``edgekit/energy/``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.extensions import Registry

if TYPE_CHECKING:
    from edgekit.energy.base import EnergyMeter
    from edgekit.profiles.device_profile import DeviceProfile


@dataclass(frozen=True, kw_only=True)
class MeterSpec:
    name: str  # the --energy name, and a profile's power.sensor.kind for sensors
    priority: int  # the order "auto" tries sensors in, and the order of the CLI choices
    sensor: bool  # reads a power sensor ("auto" tries it); False: an estimate or no figure
    # Whether the sensor is present under the filesystem root (a cheap listing, no read).
    probe: Callable[[Path], bool]
    # (profile or None, filesystem root, {"interval_s": ...} or {}) -> an open meter; raises
    # SensorError or MissingDependencyError with a hint when it cannot be read.
    open: Callable[[DeviceProfile | None, Path, dict[str, Any]], EnergyMeter]


_METERS: Registry[MeterSpec] = Registry("energy meter")


def register_meter(spec: MeterSpec) -> MeterSpec:
    return _METERS.add(spec.name, spec)


def list_meters() -> list[MeterSpec]:
    """Every meter, in priority order (sensors first)."""
    return sorted(_METERS.entries(), key=lambda s: (s.priority, s.name))


def get_meter(name: str) -> MeterSpec:
    return _METERS.get(name, valid=["auto", *_METERS.names()])
