"""Jetson power from the on-module INA3221 monitors, one strategy per sysfs layout.

- JetPack 5/6 (hwmon): ``/sys/bus/i2c/drivers/ina3221/<bus-addr>/hwmon/hwmonK/`` with
  ``inN_label`` (rail name), ``inN_input`` (bus voltage, mV) and ``currN_input`` (mA), so power
  is voltage x current. Labels "NC" (not connected) and the "sum of shunt voltages" channel are
  not rails. AGX Orin has two monitors (1-0040 and 1-0041); all are read.
- JetPack 4 (iio): ``/sys/bus/i2c/drivers/ina3221x/<bus-addr>/iio:deviceK/`` with
  ``rail_name_N`` and ``in_powerN_input`` (mW) directly.
- Jetson AGX Thor (JetPack 7): an INA238 on the module input, ``VIN``, in the same hwmon layout
  under ``/sys/bus/i2c/drivers/ina238/``, beside INA3221 sub-rails.

The sampler reads at the monitor's own conversion period where the hwmon driver gives it: the
chip attribute ``update_interval`` (milliseconds, the mainline ina3221 driver that JetPack 5/6
use: channels x samples averaged x (bus + shunt conversion time)); the iio driver of JetPack 4
has none, so the default 50 ms applies there. An explicit ``interval_s`` wins. Readings that do
not change as often as the monitor updates are flagged (``base.stale_warning``).

The total, as jtop (rbonghi/jetson_stats, ``jtop/core/power.py``, ``total_power``) takes it:
- a layout with an input rail (VDD_IN on Orin NX/Nano and JetPack 5/6 boards, POM_5V_IN on
  JetPack 4, VIN on Thor) uses that rail alone, never the input plus the rails it feeds; the
  other rails are reported as its sub-rails;
- a layout without one (AGX Orin: VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0 on 0x40 and
  VDDQ_VDD2_1V8AO on 0x41) sums every connected rail: the module's rails, not the carrier
  board's I/O (USB, fan, M.2, Ethernet) nor the regulator losses upstream of them.
A rail that cannot be read is left out and named in the measurement (``omitted``); the total
rail itself must be readable, or the meter fails. Energy is the trapezoidal integral of each
rail's power over the sample times.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edgekit.energy.base import (
    Clock,
    EnergyMeasurement,
    EnergyMeter,
    PowerIntegral,
    read_sysfs,
    read_sysfs_int,
    stale_warning,
)
from edgekit.energy.registry import MeterSpec, register_meter
from edgekit.errors import SensorError

if TYPE_CHECKING:
    from edgekit.profiles.device_profile import DeviceProfile

I2C_DRIVERS = Path("sys/bus/i2c/drivers")
HWMON_LABELS = (  # under I2C_DRIVERS
    "ina3221*/*/hwmon/hwmon*/in*_label",
    "ina238*/*/hwmon/hwmon*/in*_label",  # Jetson AGX Thor: the module input, VIN
)
IIO_LABELS = "ina3221*/*/iio:device*/rail_name_*"
TOTAL_RAILS = ("VDD_IN", "POM_5V_IN", "VIN")  # auto-picked in this order, no profile naming one
_NOT_RAILS = ("NC", "sum of shunt voltages")
HWMON_UPDATE_INTERVALS = "ina3221*/*/hwmon/hwmon*/update_interval"  # ms, under I2C_DRIVERS
DEFAULT_INTERVAL_S = 0.05  # where the driver gives no update interval (iio layout)
MIN_INTERVAL_S = 0.001  # a 0 ms update_interval (conversion under 0.5 ms) samples at 1 ms


class Rail(Protocol):
    @property
    def name(self) -> str: ...

    def read_mw(self) -> float: ...


@dataclass(frozen=True)
class HwmonRail:
    """JetPack 5/6: power = bus voltage (mV) x current (mA) / 1000, in mW."""

    name: str
    voltage_file: Path
    current_file: Path
    monitor: str = "ina3221"  # the driver: ina3221, or ina238 (Thor's module input)

    def read_mw(self) -> float:
        return read_sysfs_int(self.voltage_file) * read_sysfs_int(self.current_file) / 1000


@dataclass(frozen=True)
class IioRail:
    """JetPack 4: the driver reports power in mW."""

    name: str
    power_file: Path

    def read_mw(self) -> float:
        return float(read_sysfs_int(self.power_file))


def _hwmon_rails(root: Path) -> list[Rail]:
    rails: list[Rail] = []
    labels = {label for pattern in HWMON_LABELS for label in (root / I2C_DRIVERS).glob(pattern)}
    for label in sorted(labels):
        channel = label.name[len("in") : -len("_label")]
        current = label.with_name(f"curr{channel}_input")
        name = read_sysfs(label)
        if name in _NOT_RAILS or not current.exists():
            continue
        monitor = label.relative_to(root / I2C_DRIVERS).parts[0]
        rails.append(HwmonRail(name, label.with_name(f"in{channel}_input"), current, monitor))
    return rails


def _iio_rails(root: Path) -> list[Rail]:
    rails: list[Rail] = []
    for label in sorted((root / I2C_DRIVERS).glob(IIO_LABELS)):
        channel = label.name[len("rail_name_") :]
        name = read_sysfs(label)
        if name in _NOT_RAILS:
            continue
        rails.append(IioRail(name, label.with_name(f"in_power{channel}_input")))
    return rails


def find_rails(root: Path = Path("/")) -> list[Rail]:
    """Every connected rail, from the hwmon layout if present, else the iio layout."""
    rails = _hwmon_rails(root) or _iio_rails(root)
    seen: set[str] = set()
    for rail in rails:
        if rail.name in seen:
            raise SensorError(f"INA3221 rail {rail.name} appears on more than one monitor")
        seen.add(rail.name)
    return rails


def update_interval_s(root: Path = Path("/")) -> float | None:
    """The monitors' conversion period in seconds from hwmon's ``update_interval`` (ms), the
    shortest where there are several monitors; None where no driver gives one (iio layout)."""
    intervals = [read_sysfs_int(f) / 1000
                 for f in sorted((root / I2C_DRIVERS).glob(HWMON_UPDATE_INTERVALS))]
    return max(min(intervals), MIN_INTERVAL_S) if intervals else None


def available(root: Path = Path("/")) -> bool:
    """Whether any INA3221 channel is listed (says nothing about whether it can be read)."""
    base = root / I2C_DRIVERS
    return any(any(base.glob(p)) for p in HWMON_LABELS) or any(base.glob(IIO_LABELS))


def pick_total(rails: list[Rail], total_rail: str | None) -> Rail | None:
    """The profile's total rail, else the first of TOTAL_RAILS present; None when the layout has
    no input rail (AGX Orin): the total is then the sum of the rails."""
    by_name = {r.name: r for r in rails}
    names = ", ".join(by_name) or "(none)"
    if total_rail is not None:
        if total_rail not in by_name:
            raise SensorError(
                f"INA3221 total rail {total_rail} not found (rails: {names})",
                hint="set power_sensor.total_rail in the device profile to the input rail",
            )
        return by_name[total_rail]
    for name in TOTAL_RAILS:
        if name in by_name:
            return by_name[name]
    return None


class Ina3221Meter(EnergyMeter):
    """Module input energy on a Jetson (the input rail, or the sum of the rails where there is
    none), with every readable rail integrated beside it."""

    def __init__(
        self,
        total_rail: str | None = None,
        *,
        root: Path = Path("/"),
        interval_s: float | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        """``interval_s``: seconds between reads; None: the monitor's ``update_interval``,
        else DEFAULT_INTERVAL_S."""
        self.update_interval_s = update_interval_s(root)
        if interval_s is None:
            interval_s = self.update_interval_s or DEFAULT_INTERVAL_S
        super().__init__(interval_s=interval_s, clock=clock)
        rails = find_rails(root)
        if not rails:
            raise SensorError(
                f"no INA3221 power monitor under {root / I2C_DRIVERS}",
                hint="INA3221 monitors exist on Jetson modules only",
            )
        self.total = pick_total(rails, total_rail)
        self.omitted: dict[str, str] = {}
        self.rails: list[Rail] = []
        for rail in rails:  # trial read: fails here, not mid-profile
            try:
                rail.read_mw()
            except SensorError as exc:
                if rail is self.total:
                    raise  # no honest total without it
                self.omitted[rail.name] = str(exc)
            else:
                self.rails.append(rail)
        if not self.rails:
            raise SensorError("no INA3221 rail can be read: "
                              + "; ".join(self.omitted.values()))
        if self.total is not None:
            monitor = getattr(self.total, "monitor", "ina3221")
            self.source = f"measured: {monitor}/{self.total.name}"
        else:
            self.source = f"measured: sum of rails ({', '.join(r.name for r in self.rails)})"
        self._integrals = {r.name: PowerIntegral() for r in self.rails}

    def _begin(self, now: float) -> None:
        self._integrals = {r.name: PowerIntegral() for r in self.rails}
        self._read(now)

    def _read(self, now: float) -> None:
        readings = [(rail.name, rail.read_mw()) for rail in self.rails]  # all, or none on error
        for name, power_mw in readings:
            self._integrals[name].add(now, power_mw)

    def _result(self, duration_s: float, samples: int) -> EnergyMeasurement:
        rails = {name: self._charge(i) for name, i in self._integrals.items()}
        note = None
        if self.total is not None:
            energy_j = rails.pop(self.total.name)  # the sub-rails stay beside it, not added
        else:
            energy_j = sum(rails.values())
            if self.omitted:
                note = (f"the sum leaves out the unreadable rails {', '.join(self.omitted)}: "
                        "it is lower than the module's power")
        return EnergyMeasurement(
            energy_j=energy_j,
            duration_s=duration_s,
            source=self.source,
            measured=True,
            samples=samples,
            components=rails,
            components_summed=self.total is None,
            omitted=dict(self.omitted),
            note=note,
            # the total rail's readings, or, for a sum, the first rail's (they share a monitor)
            warning=stale_warning(*self._integrals[(self.total or self.rails[0]).name].readings,
                                  self.update_interval_s),
        )


def _open(profile: DeviceProfile | None, root: Path, options: dict[str, Any]) -> Ina3221Meter:
    """The profile names the total rail (VDD_IN, POM_5V_IN, VIN); without one, TOTAL_RAILS
    decide, and a layout without any of them sums its rails."""
    total = profile.power_sensor.total_rail if profile is not None else None
    return Ina3221Meter(total, root=root, **options)


register_meter(MeterSpec(name="ina3221", priority=10, sensor=True, probe=available, open=_open))
