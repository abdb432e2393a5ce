"""Pick the energy meter for a device: its own sensor when it can be read, else an estimate.

"auto" tries the sensor the profile names (or, without a profile, INA3221, NVML, RAPL in that
order) with a trial read, and falls back to the profile's TDP estimate, or to ``NullMeter`` when
the profile has no power figure; the reason for the fallback goes into the measurement's note.
An explicit request ("rapl", "ina3221", "nvml", "estimate") that cannot be met raises
SensorError (or MissingDependencyError) with a hint instead of falling back.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.energy.base import EnergyMeter
from edgekit.energy.estimate import EstimatedMeter, NullMeter, profile_power
from edgekit.energy.jetson import Ina3221Meter
from edgekit.energy.nvml import NvmlMeter
from edgekit.energy.rapl import RaplMeter
from edgekit.errors import MissingDependencyError, SensorError, UnknownNameError
from edgekit.profiles.schema import DeviceProfile

SENSOR_METERS = ("ina3221", "nvml", "rapl")  # also the "auto" order when there is no profile
METER_NAMES = ("auto", *SENSOR_METERS, "estimate", "none")


def _open_sensor(
    kind: str, profile: DeviceProfile | None, root: Path, interval_s: float | None
) -> EnergyMeter:
    """Construct a sensor meter; construction includes a trial read, so failures surface here."""
    options: dict[str, Any] = {} if interval_s is None else {"interval_s": interval_s}
    if kind == "rapl":
        return RaplMeter(root, **options)
    if kind == "ina3221":
        total = profile.power_sensor.total_rail if profile is not None else None
        return Ina3221Meter(total, root=root, **options)
    return NvmlMeter(**options)


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
    root: Path = Path("/"),
    interval_s: float | None = None,
) -> EnergyMeter:
    """The meter for ``request`` (one of METER_NAMES) on the device ``profile`` describes.

    ``interval_s`` overrides the meter's sampling period (None: the meter's own default).
    """
    if request not in METER_NAMES:
        raise UnknownNameError("energy meter", request, METER_NAMES)
    if request == "none":
        return NullMeter("energy measurement switched off")
    if request == "estimate":
        if profile is None:
            raise SensorError(
                "an energy estimate needs a device profile",
                hint="name a device profile, or use the energy meter 'none'",
            )
        return EstimatedMeter(profile)
    if request in SENSOR_METERS:
        try:
            return _open_sensor(request, profile, root, interval_s)
        except SensorError as exc:  # the sensor's hint says what it needs; add the other choices
            advice = "or use the energy meter 'auto' or 'estimate' instead"
            hint = f"{exc.hint}; {advice}" if exc.hint else advice
            raise SensorError(exc.message, hint=hint) from exc

    reasons: list[str] = []
    if profile is None:
        kinds: tuple[str, ...] = SENSOR_METERS
    elif profile.power_sensor.kind in SENSOR_METERS:
        kinds = (profile.power_sensor.kind,)
    else:
        kinds = ()
        reasons.append(f"profile {profile.name} lists no power sensor")
    for kind in kinds:
        try:
            return _open_sensor(kind, profile, root, interval_s)
        except (SensorError, MissingDependencyError) as exc:
            reasons.append(f"{kind} unavailable: {exc}")
    return _fallback(profile, "; ".join(reasons))
