"""Linux RAPL energy counters through powercap sysfs (Intel, and AMD Zen on recent kernels).

Layout: ``/sys/class/powercap/intel-rapl:N`` is a top-level zone (``name`` "package-N" or
"psys"), ``intel-rapl:N:M`` a subzone of package N ("core", "uncore", "dram"). Each zone has
``energy_uj``, a counter that runs from 0 to ``max_energy_range_uj`` inclusive and then restarts
at 0. ``intel-rapl-mmio:*`` zones repeat the package counter through MMIO and are never read.

Which zones make the total (the rule: never a total plus its own sub-rails):
- every package zone, plus every zone named "dram", top-level or nested under a package: the
  DRAM domain is not part of the package domain (Intel SDM vol. 3B, "RAPL Domains"); the
  powercap tree only nests it there. "core" and "uncore" lie inside the package: never added.
- "psys" (the whole platform, where implemented) only when there is no package zone: its
  coverage is up to the platform vendor (it may include the display and the charger), and
  adding it to the packages would count them twice; package + DRAM compares across machines.

A DRAM zone that cannot be read is left out and named in the measurement (``omitted``): the
total is then the packages alone, which is still honest for what it names. A package (or psys)
zone that cannot be read fails the meter: without it there is no total.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from edgekit.energy.base import (
    Clock,
    CounterTrace,
    EnergyMeasurement,
    EnergyMeter,
    read_sysfs,
    read_sysfs_int,
)
from edgekit.energy.registry import MeterSpec, register_meter
from edgekit.errors import SensorError

POWERCAP = Path("sys/class/powercap")
_ZONE = re.compile(r"intel-rapl:(\d+)(?::(\d+))?")
PERMISSION_HINT = (
    "since Linux 5.10 energy_uj is readable by root only: run as root, or "
    "`sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj "
    "/sys/class/powercap/intel-rapl:*:*/energy_uj` (until reboot; a udev rule makes it permanent)"
)


@dataclass(frozen=True)
class Zone:
    key: str  # "package-0", "package-0/dram", "psys"
    energy_file: Path
    max_energy_range_uj: int
    optional: bool = False  # a DRAM zone: left out (and named) when it cannot be read


def counter_delta(prev_uj: int, cur_uj: int, max_energy_range_uj: int) -> int:
    """Energy between two reads. The counter takes the values 0..max inclusive, so it counts
    modulo max + 1: a wrap from ``prev`` to ``cur`` adds ``(max - prev) + 1 + cur``. At most one
    wrap between two reads can be seen, hence the sampling during the window."""
    return (cur_uj - prev_uj) % (max_energy_range_uj + 1)


def _zone_dirs(root: Path) -> list[tuple[Path, re.Match[str]]]:
    base = root / POWERCAP
    if not base.is_dir():
        return []
    matches = ((p, _ZONE.fullmatch(p.name)) for p in sorted(base.iterdir()))
    return [(p, m) for p, m in matches if m is not None]


def available(root: Path = Path("/")) -> bool:
    """Whether powercap lists any RAPL zone (says nothing about whether it can be read)."""
    return bool(_zone_dirs(root))


def find_zones(root: Path = Path("/"), omitted: dict[str, str] | None = None) -> list[Zone]:
    """The zones whose sum is the total, per the rule in the module docstring. With ``omitted``,
    a DRAM zone whose range cannot be read is recorded there (key -> why) instead of failing."""
    dirs = _zone_dirs(root)
    if not dirs:
        raise SensorError(
            f"no RAPL zones under {root / POWERCAP}",
            hint="RAPL needs Linux on x86 with the intel_rapl driver loaded",
        )
    names = {d.name: read_sysfs(d / "name") for d, _ in dirs}
    packages, drams, psys = [], [], []
    for d, match in dirs:
        parent = f"intel-rapl:{match[1]}"
        nested = match[2] is not None
        name = names[d.name]
        key = f"{names.get(parent, parent)}/{name}" if nested else name
        if not nested and name.startswith("package"):
            packages.append((key, d))
        elif name == "dram":
            drams.append((key, d))
        elif not nested and name == "psys":
            psys.append((key, d))
    chosen = packages + drams if packages else psys
    if not chosen:
        found = ", ".join(sorted(set(names.values())))
        raise SensorError(f"no RAPL package or psys zone under {root / POWERCAP} (found: {found})")
    zones = []
    for key, d in chosen:
        optional = (key, d) in drams
        try:
            max_uj = read_sysfs_int(d / "max_energy_range_uj", PERMISSION_HINT)
        except SensorError as exc:
            if omitted is None or not optional:
                raise
            omitted[key] = str(exc)
            continue
        zones.append(Zone(key, d / "energy_uj", max_uj, optional))
    return zones


class RaplMeter(EnergyMeter):
    """CPU package (+ DRAM) energy from the RAPL counters, wrap-arounds included."""

    source = "measured: rapl"

    def __init__(
        self,
        root: Path = Path("/"),
        *,
        interval_s: float = 0.1,
        clock: Clock = time.perf_counter,
    ) -> None:
        super().__init__(interval_s=interval_s, clock=clock)
        self.omitted: dict[str, str] = {}
        self.zones = []
        for zone in find_zones(root, self.omitted):  # trial read: fails here, not mid-profile
            try:
                read_sysfs_int(zone.energy_file, PERMISSION_HINT)
            except SensorError as exc:
                if not zone.optional:
                    raise
                self.omitted[zone.key] = str(exc)
            else:
                self.zones.append(zone)
        self._last = self._read_counters()
        self._uj = [0] * len(self.zones)
        self._traces = [CounterTrace() for _ in self.zones]  # unwrapped uJ since begin

    def _read_counters(self) -> list[int]:
        return [read_sysfs_int(z.energy_file, PERMISSION_HINT) for z in self.zones]

    def _begin(self, now: float) -> None:
        self._last = self._read_counters()
        self._uj = [0] * len(self.zones)
        self._traces = [CounterTrace() for _ in self.zones]
        for trace in self._traces:
            trace.add(now, 0)

    def _read(self, now: float) -> None:
        current = self._read_counters()
        for i, zone in enumerate(self.zones):
            self._uj[i] += counter_delta(self._last[i], current[i], zone.max_energy_range_uj)
            self._traces[i].add(now, self._uj[i])
        self._last = current

    def _zone_uj(self) -> list[float] | list[int]:
        """Each zone's energy over the span: the counted total for the whole window (exact
        integers, as before), else the counter interpolated at the timed interval's ends."""
        if self._whole:
            return list(self._uj)
        return [trace.between(*self._span) for trace in self._traces]

    def _attribution(self, result: EnergyMeasurement) -> str:
        return ("energy counter interpolated linearly at the timed interval's ends, between the "
                "reads around each end")

    def _result(self, duration_s: float, samples: int) -> EnergyMeasurement:
        zone_uj = self._zone_uj()
        return EnergyMeasurement(
            energy_j=sum(zone_uj) / 1e6,
            duration_s=duration_s,
            source=self.source,
            measured=True,
            samples=samples,
            components={z.key: uj / 1e6 for z, uj in zip(self.zones, zone_uj, strict=True)},
            omitted=dict(self.omitted),
            note=(f"DRAM zones {', '.join(self.omitted)} unreadable and left out: the total is "
                  "the CPU packages without their DRAM" if self.omitted else None),
        )


register_meter(MeterSpec(name="rapl", priority=30, sensor=True, probe=available,
                         open=lambda profile, root, options: RaplMeter(root, **options)))
