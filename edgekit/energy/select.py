"""Pick the energy meter for a device: its own sensor when it can be read, else an estimate.

"auto" tries the sensor the profile names, or without a profile every registered sensor whose
probe finds it, in priority order (INA3221, NVML, RAPL), each with a trial read; it falls back to
the profile's TDP estimate, or to ``NullMeter`` when the profile has no power figure; the reason
for the fallback goes into the measurement's note. An explicit request ("rapl", "ina3221",
"nvml", "estimate") that cannot be met raises SensorError (or MissingDependencyError) with a hint
instead of falling back. The meters come from ``edgekit.energy.registry``; none is named here.

The sensors are looked for under a filesystem root: ``root``, else ``$EDGEKIT_SYSFS_ROOT`` (a
container that mounts the host's /sys elsewhere, a test's rebuilt layout), else ``/``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from edgekit.energy.base import EnergyMeter
from edgekit.energy.estimate import EstimatedMeter, NullMeter, profile_power
from edgekit.energy.registry import get_meter, list_meters
from edgekit.errors import MissingDependencyError, SensorError
from edgekit.profiles.device_profile import DeviceProfile

SYSFS_ROOT_ENV = "EDGEKIT_SYSFS_ROOT"


def meter_names() -> tuple[str, ...]:
    """What ``--energy`` takes: "auto" and every registered meter (plugins' included)."""
    return ("auto", *(s.name for s in list_meters()))


def sysfs_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Where the sensors' files are: ``root``, else $EDGEKIT_SYSFS_ROOT, else ``/``."""
    if root is None:
        root = os.environ.get(SYSFS_ROOT_ENV) or "/"
    return Path(root)


def _fallback(profile: DeviceProfile | None, reason: str) -> EnergyMeter:
    if profile is None:
        return NullMeter("no sensor and no device profile", note=reason)
    if profile_power(profile) is None:
        return NullMeter("no sensor and no TDP in profile", note=reason)
    return EstimatedMeter(profile, reason=reason)


def open_meter(
    profile: DeviceProfile | None,
    request: str = "auto",
    *,
    root: str | os.PathLike[str] | None = None,
    interval_s: float | None = None,
) -> EnergyMeter:
    """The meter for ``request`` (one of ``meter_names()``) on the device ``profile`` describes.

    ``root``: where /sys is (None: ``sysfs_root()``). ``interval_s`` overrides the meter's
    sampling period (None: the meter's own default).
    """
    root = sysfs_root(root)
    options: dict[str, Any] = {} if interval_s is None else {"interval_s": interval_s}
    if request != "auto":
        spec = get_meter(request)
        try:
            return spec.open(profile, root, options)
        except SensorError as exc:  # the sensor's hint says what it needs; add the other choices
            if not spec.sensor:
                raise
            advice = "or use the energy meter 'auto' or 'estimate' instead"
            hint = f"{exc.hint}; {advice}" if exc.hint else advice
            raise SensorError(exc.message, hint=hint) from exc

    reasons: list[str] = []
    sensors = [s for s in list_meters() if s.sensor]
    if profile is None:
        candidates = [s for s in sensors if s.probe(root)]
        reasons += [f"{s.name} unavailable: not found" for s in sensors if s not in candidates]
    else:
        candidates = [s for s in sensors if s.name == profile.power_sensor.kind]
        if not candidates:
            reasons.append(f"profile {profile.name} lists no power sensor")
    for spec in candidates:
        try:
            return spec.open(profile, root, options)
        except (SensorError, MissingDependencyError) as exc:
            reasons.append(f"{spec.name} unavailable: {exc}")
    return _fallback(profile, "; ".join(reasons))
