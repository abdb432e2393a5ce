"""Energy where no sensor can be read: an estimate from the device profile, or no figure at all.

The estimate is power budget x duration, where the budget is the default power mode's watts
(a Jetson's nvpmodel mode), else the profile's TDP, else (generic CPU profiles) the assumed watts
per core x the profile's cores, or this machine's when the profile gives none. It is labelled
"estimated: tdp", has ``measured=False``, and its note states the assumption; it is never
shown as a measurement. A profile with no figure gives ``NullMeter``: energy NaN, source
"unavailable: ...", because a made-up number would be worse than none.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from edgekit.energy.base import Clock, EnergyMeasurement, EnergyMeter
from edgekit.energy.registry import MeterSpec, register_meter
from edgekit.errors import SensorError
from edgekit.profiles.device_profile import DeviceProfile

ESTIMATE_SOURCE = "estimated: tdp"


def profile_power(profile: DeviceProfile) -> tuple[float, str] | None:
    """The power to assume and where it came from, or None if the profile has no figure."""
    mode = profile.power_mode()
    if mode is not None:
        return mode.watts, f"TDP of power mode {mode.name} ({mode.watts:g} W)"
    if profile.tdp_w is not None:
        return profile.tdp_w, f"TDP {profile.tdp_w:g} W"
    if profile.core_power_w is not None:
        cores = profile.cpu_cores or os.cpu_count() or 1
        watts = profile.core_power_w * cores
        return watts, (f"{cores} cores x {profile.core_power_w:g} W/core assumed "
                       f"({watts:g} W)")
    return None


class _SensorlessMeter(EnergyMeter):
    """A window with a clock and no sensor: nothing to sample, no thread."""

    samples_in_background = False

    def __init__(self, clock: Clock) -> None:
        super().__init__(interval_s=1.0, clock=clock)  # interval unused: no sampler thread

    def _begin(self, now: float) -> None:
        """No sensor: the window is only its start and end times."""

    def _read(self, now: float) -> None:
        """No sensor to read."""

    def _attribution(self, result: EnergyMeasurement) -> str:
        return "power budget x the timed interval's duration"


class EstimatedMeter(_SensorlessMeter):
    """Power budget x window duration; ``reason`` records why no sensor was used."""

    source = ESTIMATE_SOURCE

    def __init__(
        self,
        profile: DeviceProfile,
        *,
        reason: str | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        super().__init__(clock)
        power = profile_power(profile)
        if power is None:
            raise SensorError(
                f"device profile {profile.name} has no TDP or power mode to estimate energy from",
                hint="add tdp_w or power modes to the profile, or use the energy meter 'none'",
            )
        self.power_w, basis = power
        assumption = f"{basis} assumed for the whole window: a power budget, not a measurement"
        self.note = f"{reason}; {assumption}" if reason else assumption

    def _result(self, duration_s: float, samples: int) -> EnergyMeasurement:
        return EnergyMeasurement(
            energy_j=self.power_w * duration_s,
            duration_s=duration_s,
            source=self.source,
            measured=False,
            samples=0,
            note=self.note,
        )


class NullMeter(_SensorlessMeter):
    """No sensor and nothing to estimate from (or energy switched off): the figure is NaN."""

    def __init__(
        self, why: str, *, note: str | None = None, clock: Clock = time.perf_counter
    ) -> None:
        super().__init__(clock)
        self.source = f"unavailable: {why}"
        self.note = note

    def _result(self, duration_s: float, samples: int) -> EnergyMeasurement:
        return EnergyMeasurement(
            energy_j=math.nan,
            duration_s=duration_s,
            source=self.source,
            measured=False,
            samples=0,
            note=self.note,
        )


def _open_estimate(profile: DeviceProfile | None, root: Path,
                   options: dict[str, Any]) -> EstimatedMeter:
    if profile is None:
        raise SensorError("an energy estimate needs a device profile",
                          hint="name a device profile, or use the energy meter 'none'")
    return EstimatedMeter(profile)


register_meter(MeterSpec(name="estimate", priority=100, sensor=False, probe=lambda root: True,
                         open=_open_estimate))
register_meter(MeterSpec(name="none", priority=200, sensor=False, probe=lambda root: True,
                         open=lambda profile, root, options: NullMeter(
                             "energy measurement switched off")))
