"""Energy meters against real sysfs layouts rebuilt in tmp_path, with an injected clock.

Deterministic tests give the meter an hour-long sampling interval, so the background thread
never fires and every reading is one the test made with ``begin``/``sample``/``end``. NVML is
the one fake: no GPU here, so a recorded-readings device stands in for pynvml.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from edgekit.energy import (
    EnergyMeasurement,
    EstimatedMeter,
    Ina3221Meter,
    NullMeter,
    NvmlMeter,
    RaplMeter,
    jetson,
    meter_names,
    open_meter,
    rapl,
)
from edgekit.energy.rapl import counter_delta
from edgekit.errors import MissingDependencyError, SensorError, UnknownNameError, UsageError
from edgekit.profiles.device_profile import DeviceProfile, PowerMode, PowerSensor

NEVER = 3600.0  # sampling interval that keeps the background thread from firing in a test
HAS_PYNVML = importlib.util.find_spec("pynvml") is not None


# -- helpers ---------------------------------------------------------------------------------


def make_profile(
    *,
    kind: str = "cpu",
    sensor: str = "rapl",
    total_rail: str | None = None,
    tdp_w: float | None = 65.0,
    modes: Iterable[PowerMode] = (),
    default_mode: str | None = None,
) -> DeviceProfile:
    return DeviceProfile(
        name="test-device",
        display_name="Test device",
        kind=kind,
        arch="x86_64",
        peak_flops={},
        memory_bytes=8 << 30,
        memory_bandwidth_bytes_s=None,
        storage_bandwidth_bytes_s=None,
        tdp_w=tdp_w,
        idle_power_w=None,
        power_modes=tuple(modes),
        default_power_mode=default_mode,
        power_sensor=PowerSensor(sensor, total_rail),
        preferred_backends=("torch",),
        preferred_precisions=("fp32",),
        cpu_cores=None,
        sources={},
    )


def ticks(*times: float) -> Callable[[], float]:
    """A clock that returns the given times, one per call, and fails loudly if called more."""
    return iter(times).__next__


def write(path: Path, value: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")
    return path


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("edgekit-energy")]


# -- RAPL --------------------------------------------------------------------------------------


def rapl_zone(
    root: Path, zone: str, name: str, energy_uj: int, max_uj: int = 262143328850
) -> Path:
    """One powercap zone as the kernel lays it out: the folder under /sys/devices (subzones
    inside their package), linked from /sys/class/powercap; returns its energy_uj file."""
    devices = root / "sys/devices/virtual/powercap/intel-rapl"
    package = zone.rsplit(":", 1)[0] if zone.count(":") == 2 else None
    folder = (devices / package / zone) if package else (devices / zone)
    link = root / "sys/class/powercap" / zone
    link.parent.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    link.symlink_to(folder)
    write(folder / "name", name)
    write(folder / "max_energy_range_uj", max_uj)
    write(folder / "energy_uj", energy_uj)
    return link / "energy_uj"


@pytest.fixture
def intel_two_sockets(tmp_path: Path) -> dict[str, Path]:
    """A two-socket Intel server: packages, core/uncore/dram subzones, psys, an MMIO duplicate."""
    write(tmp_path / "sys/class/powercap/intel-rapl/enabled", 1)  # the control type, not a zone
    return {
        "package-0": rapl_zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000),
        "package-0/core": rapl_zone(tmp_path, "intel-rapl:0:0", "core", 500_000),
        "package-0/uncore": rapl_zone(tmp_path, "intel-rapl:0:1", "uncore", 100_000),
        "package-0/dram": rapl_zone(tmp_path, "intel-rapl:0:2", "dram", 200_000),
        "package-1": rapl_zone(tmp_path, "intel-rapl:1", "package-1", 3_000_000),
        "package-1/core": rapl_zone(tmp_path, "intel-rapl:1:0", "core", 700_000),
        "package-1/dram": rapl_zone(tmp_path, "intel-rapl:1:1", "dram", 400_000),
        "psys": rapl_zone(tmp_path, "intel-rapl:2", "psys", 9_000_000),
        "mmio": rapl_zone(tmp_path, "intel-rapl-mmio:0", "package-0", 1_000_000),
    }


def test_rapl_total_is_packages_plus_dram_never_core_psys_or_mmio(
    tmp_path: Path, intel_two_sockets: dict[str, Path]
) -> None:
    meter = RaplMeter(tmp_path, interval_s=NEVER, clock=ticks(10.0, 12.0))
    meter.begin()
    for gained_j, file in enumerate(intel_two_sockets.values(), start=1):  # 1 J, 2 J, ...
        write(file, int(file.read_text()) + gained_j * 1_000_000)
    result = meter.end()

    assert result.components == {
        "package-0": 1.0,
        "package-1": 5.0,
        "package-0/dram": 4.0,
        "package-1/dram": 7.0,
    }
    assert result.energy_j == 17.0
    assert (result.duration_s, result.avg_power_w) == (2.0, 8.5)
    assert (result.source, result.measured, result.samples) == ("measured: rapl", True, 2)
    assert result.note is None


def test_rapl_psys_alone_when_there_is_no_package_zone(tmp_path: Path) -> None:
    psys = rapl_zone(tmp_path, "intel-rapl:0", "psys", 0)
    meter = RaplMeter(tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0))
    meter.begin()
    write(psys, 12_500_000)
    assert meter.end().components == {"psys": 12.5}


def test_rapl_amd_package_zone(tmp_path: Path) -> None:
    """AMD Zen through the same powercap driver: package-0 with a core subzone, no DRAM."""
    package = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 7_000_000, max_uj=65712999613)
    core = rapl_zone(tmp_path, "intel-rapl:0:0", "core", 3_000_000, max_uj=65712999613)
    meter = RaplMeter(tmp_path, interval_s=NEVER, clock=ticks(0.0, 4.0))
    meter.begin()
    write(package, 47_000_000)
    write(core, 33_000_000)
    result = meter.end()
    assert (result.energy_j, result.components) == (40.0, {"package-0": 40.0})
    assert result.avg_power_w == 10.0


@pytest.mark.parametrize(
    ("prev", "cur", "max_uj", "delta"),
    [
        (10, 20, 1000, 10),
        (5, 5, 1000, 0),
        (990, 10, 1000, 21),  # 990 -> 1000 is 10, 1000 -> 0 is one step, 0 -> 10 is 10
        (1000, 0, 1000, 1),
        (0, 1000, 1000, 1000),
    ],
)
def test_counter_delta_counts_modulo_max_plus_one(
    prev: int, cur: int, max_uj: int, delta: int
) -> None:
    assert counter_delta(prev, cur, max_uj) == delta


def test_rapl_wraparound_is_counted_exactly(tmp_path: Path) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 999_990, max_uj=999_999)
    meter = RaplMeter(tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0))
    meter.begin()
    write(energy, 15)  # 9 to the top, 1 to wrap, 15 after
    assert meter.end().energy_j == 25 / 1e6


def test_rapl_two_wraps_in_one_window_with_samples_between(tmp_path: Path) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 900, max_uj=999)
    meter = RaplMeter(tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0, 2.0, 3.0))
    meter.begin()
    write(energy, 400)  # wraps: +500
    meter.sample()
    write(energy, 100)  # wraps again: +700
    meter.sample()
    write(energy, 600)  # +500
    result = meter.end()
    assert result.energy_j == 1700 / 1e6
    assert result.samples == 4


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda f: f.unlink(), "no such file"),
        (lambda f: f.write_text("garbage\n"), "expected an integer, found 'garbage'"),
        (lambda f: (f.unlink(), f.mkdir()), "Is a directory"),
    ],
    ids=["missing", "garbage", "directory"],
)
def test_rapl_unreadable_counter_names_the_file(
    tmp_path: Path, breakage: Callable[[Path], object], message: str
) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    breakage(energy)
    with pytest.raises(SensorError) as info:
        RaplMeter(tmp_path)
    assert str(energy) in str(info.value)
    assert message in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_rapl_permission_denied_says_what_to_do(tmp_path: Path) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    energy.chmod(0)
    with pytest.raises(SensorError, match="permission denied.*run as root.*chmod o\\+r"):
        RaplMeter(tmp_path)


def test_rapl_counter_breaking_mid_window_fails_the_read(tmp_path: Path) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = RaplMeter(tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0))
    meter.begin()
    write(energy, "oops")
    try:
        with pytest.raises(SensorError, match=f"{energy}.*'oops'"):
            meter.sample()
    finally:
        meter.close()


def test_rapl_absent(tmp_path: Path) -> None:
    assert not rapl.available(tmp_path)
    with pytest.raises(SensorError, match="no RAPL zones under"):
        RaplMeter(tmp_path)
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    assert rapl.available(tmp_path)


# -- Jetson INA3221 ---------------------------------------------------------------------------


def hwmon_monitor(root: Path, address: str, channels: dict[int, str], hwmon: str) -> Path:
    """A JetPack 5/6 INA3221 hwmon folder with labels for ``channels``, its device linked from
    the driver folder as the kernel does; returns the hwmon folder."""
    device = root / "sys/devices/platform/bus@0/c240000.i2c/i2c-1" / address
    link = root / "sys/bus/i2c/drivers/ina3221" / address
    device.mkdir(parents=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(device)
    folder = link / "hwmon" / hwmon
    for n, label in channels.items():
        write(folder / f"in{n}_label", label)
        write(folder / f"in{n}_input", 0)
        write(folder / f"curr{n}_input", 0)
    return folder


def set_hwmon(folder: Path, readings: dict[int, tuple[int, int]]) -> None:
    """Channel -> (bus voltage mV, current mA)."""
    for n, (mv, ma) in readings.items():
        write(folder / f"in{n}_input", mv)
        write(folder / f"curr{n}_input", ma)


@pytest.fixture
def orin_nano(tmp_path: Path) -> Path:
    """Orin Nano / NX on JetPack 6: VDD_IN and two sub-rails, the sum channel, an NC channel."""
    folder = hwmon_monitor(
        tmp_path,
        "1-0040",
        {1: "VDD_IN", 2: "VDD_CPU_GPU_CV", 3: "VDD_SOC", 7: "sum of shunt voltages"},
        "hwmon1",
    )
    hwmon_monitor(tmp_path, "1-0041", {1: "NC"}, "hwmon2")
    return folder


def test_jetpack6_hwmon_integrates_vdd_in_alone(tmp_path: Path, orin_nano: Path) -> None:
    def readings(vdd_in_ma: int, cpu_gpu_ma: int) -> dict[int, tuple[int, int]]:
        return {1: (5000, vdd_in_ma), 2: (5000, cpu_gpu_ma), 3: (5000, 200), 7: (40, 9999)}

    set_hwmon(orin_nano, readings(1000, 400))  # VDD_IN 5 W, CPU_GPU_CV 2 W, SOC 1 W
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0, 2.0))
    assert meter.source == "measured: ina3221/VDD_IN"
    meter.begin()
    set_hwmon(orin_nano, readings(1400, 600))  # 7 W, 3 W
    meter.sample()
    set_hwmon(orin_nano, readings(1200, 500))  # 6 W, 2.5 W
    result = meter.end()

    # issue 16: the sub-rails are reported apart from the total, which is not among them
    assert result.components == {"VDD_CPU_GPU_CV": 5.25, "VDD_SOC": 2.0}
    assert not result.components_summed
    assert result.energy_j == 12.5  # the input rail only, not 19.75
    assert (result.duration_s, result.avg_power_w, result.samples) == (2.0, 6.25, 3)
    assert (result.source, result.measured) == ("measured: ina3221/VDD_IN", True)


def test_jetpack4_iio_reads_power_directly(tmp_path: Path) -> None:
    folder = tmp_path / "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    for n, name in enumerate(["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]):
        write(folder / f"rail_name_{n}", name)
        write(folder / f"in_voltage{n}_input", 5000)
    powers = [folder / f"in_power{n}_input" for n in range(3)]

    def set_power(*mw: int) -> None:
        for file, value in zip(powers, mw, strict=True):
            write(file, value)

    set_power(2000, 300, 600)
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 0.5))
    meter.begin()
    set_power(4000, 900, 1000)
    result = meter.end()
    assert result.source == "measured: ina3221/POM_5V_IN"
    assert result.energy_j == 1.5
    assert result.components == {"POM_5V_GPU": 0.3, "POM_5V_CPU": 0.4}  # sub-rails only


def test_agx_two_monitors_sum_without_a_total_rail(tmp_path: Path) -> None:
    first = hwmon_monitor(
        tmp_path, "1-0040", {1: "VDD_GPU_SOC", 2: "VDD_CPU_CV", 3: "VIN_SYS_5V0"}, "hwmon1"
    )
    second = hwmon_monitor(tmp_path, "1-0041", {1: "NC", 2: "VDDQ_VDD2_1V8AO", 3: "NC"}, "hwmon2")
    set_hwmon(first, {1: (5000, 1000), 2: (5000, 400), 3: (5000, 2000)})
    set_hwmon(second, {2: (1800, 500)})

    # issue 16: no input rail -> the sum of the rails, as jtop takes it (was a SensorError)
    summed = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 2.0))
    summed.begin()
    total = summed.end()
    assert total.source == ("measured: sum of rails (VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0, "
                            "VDDQ_VDD2_1V8AO)")
    assert total.energy_j == pytest.approx(35.8) and total.components_summed

    meter = Ina3221Meter("VIN_SYS_5V0", root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 2.0))
    meter.begin()
    result = meter.end()
    assert result.energy_j == 20.0
    assert result.components == {  # a named total rail is used alone, its sub-rails beside it
        "VDD_GPU_SOC": 10.0,
        "VDD_CPU_CV": 4.0,
        "VDDQ_VDD2_1V8AO": 1.8,
    }


def test_hwmon_update_interval_sets_the_sampling_interval(tmp_path: Path, orin_nano: Path) -> None:
    """The driver's update_interval (ms) is the default period; an explicit one wins; both the
    interval used and the sensor's are recorded in the measurement."""
    write(orin_nano / "update_interval", 7)  # 3 channels x 1 sample x (1.1 + 1.1) ms, rounded
    set_hwmon(orin_nano, {1: (5000, 1000)})
    meter = Ina3221Meter(root=tmp_path, clock=ticks(0.0, 1.0))
    assert (meter.interval_s, meter.update_interval_s) == (0.007, 0.007)
    assert Ina3221Meter(root=tmp_path, interval_s=0.5).interval_s == 0.5
    meter.interval_s = NEVER  # keep the thread quiet; the result records what the meter used
    meter.begin()
    result = meter.end()
    assert (result.interval_s, result.update_interval_s) == (NEVER, 0.007)
    assert result.to_dict()["update_interval_s"] == 0.007


def test_iio_layout_has_no_update_interval(tmp_path: Path) -> None:
    folder = tmp_path / "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    write(folder / "rail_name_0", "POM_5V_IN")
    write(folder / "in_power0_input", 2000)
    meter = Ina3221Meter(root=tmp_path)
    assert (meter.interval_s, meter.update_interval_s) == (0.05, None)


def run_vdd_in(tmp_path: Path, folder: Path, currents_ma: list[int], step_s: float):
    """VDD_IN at 5 V with one current per reading, read every ``step_s``."""
    times = [i * step_s for i in range(len(currents_ma))]
    set_hwmon(folder, {1: (5000, currents_ma[0])})
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(*times))
    meter.begin()
    for current in currents_ma[1:-1]:
        set_hwmon(folder, {1: (5000, current)})
        meter.sample()
    set_hwmon(folder, {1: (5000, currents_ma[-1])})
    return meter.end()


def test_stale_repeated_readings_are_flagged(tmp_path: Path, orin_nano: Path) -> None:
    """20 readings 10 ms apart of a monitor that updates every 10 ms: one change is stale."""
    write(orin_nano / "update_interval", 10)
    result = run_vdd_in(tmp_path, orin_nano, [1000] * 10 + [1010] * 10, 0.01)
    assert "values look stale" in (result.warning or "")
    assert "only 1 of 20 sensor readings changed" in (result.warning or "")


def test_steady_load_with_conversion_noise_is_not_flagged(tmp_path: Path, orin_nano: Path) -> None:
    """A constant load still changes by the monitor's noise at every update: no warning, even
    where a few neighbouring readings happen to agree or are read faster than the updates."""
    write(orin_nano / "update_interval", 10)
    noisy = [1000, 1004, 996, 1000, 1000, 1008, 992, 1004, 1000, 996] * 2
    assert run_vdd_in(tmp_path, orin_nano, noisy, 0.01).warning is None
    # read every 2 ms, the 10 ms monitor changes every 5th reading: still not stale
    slow = [1000 + 4 * (i // 5 % 2) for i in range(40)]
    assert run_vdd_in(tmp_path, orin_nano, slow, 0.002).warning is None


def test_sensor_frozen_part_of_the_window_is_flagged(tmp_path: Path, orin_nano: Path) -> None:
    write(orin_nano / "update_interval", 10)
    currents = [1000 + 4 * (i % 2) for i in range(20)] + [1000] * 30  # frozen for 0.29 s
    warning = run_vdd_in(tmp_path, orin_nano, currents, 0.01).warning or ""
    assert "held one value for 0.29 s, more than 20 of its 10 ms updates" in warning


def test_one_value_all_window_flagged_without_update_interval(tmp_path: Path) -> None:
    folder = tmp_path / "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    write(folder / "rail_name_0", "POM_5V_IN")
    power = write(folder / "in_power0_input", 2000)
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(*range(12)))
    meter.begin()
    for _ in range(10):
        meter.sample()
    result = meter.end()
    assert "all 12 sensor readings in the window hold one value (2000)" in (result.warning or "")
    write(power, 2001)  # one change anywhere and, without an update interval, no verdict
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(*range(12)))
    meter.begin()
    for _ in range(10):
        meter.sample()
    write(power, 2000)
    assert meter.end().warning is None


def test_missing_total_rail_lists_the_rails(tmp_path: Path, orin_nano: Path) -> None:
    with pytest.raises(SensorError, match="POM_5V_IN not found .*VDD_IN, VDD_CPU_GPU_CV, VDD_SOC"):
        Ina3221Meter("POM_5V_IN", root=tmp_path)


def test_malformed_rail_file_is_named(tmp_path: Path, orin_nano: Path) -> None:
    write(orin_nano / "curr1_input", "n/a")  # the total rail (issue 16: a sub-rail is left out)
    with pytest.raises(SensorError, match=f"{orin_nano / 'curr1_input'}"):
        Ina3221Meter(root=tmp_path)


def test_no_ina3221(tmp_path: Path) -> None:
    assert not jetson.available(tmp_path)
    with pytest.raises(SensorError, match="no INA3221 power monitor"):
        Ina3221Meter(root=tmp_path)


# -- NVML (recorded readings; no GPU here) ----------------------------------------------------


class RecordedGpu:
    """Replays NVML readings in call order: the counter (mJ, None before Volta), the instant power
    field (mW, None where the driver lacks it) and nvmlDeviceGetPowerUsage (mW); records calls."""

    def __init__(
        self, energy_mj: list[int] | None, power_mw: list[int], instant_mw: list[int] | None = None
    ) -> None:
        self._energy = iter(energy_mj) if energy_mj is not None else None
        self._power = iter(power_mw)
        self._instant = iter(instant_mw) if instant_mw is not None else None
        self.calls: list[str] = []
        self.closed = False

    def total_energy_mj(self) -> int | None:
        self.calls.append("energy")
        return next(self._energy) if self._energy is not None else None

    def instant_power_mw(self) -> int | None:
        self.calls.append("instant")
        return next(self._instant) if self._instant is not None else None

    def power_mw(self) -> int:
        self.calls.append("power")
        return next(self._power)

    def close(self) -> None:
        self.closed = True


def run_nvml(gpu: RecordedGpu, times: tuple[float, ...]) -> EnergyMeasurement:
    """Trial read, then begin, one sample per time between the first and last, end."""
    meter = NvmlMeter(device=gpu, interval_s=NEVER, clock=ticks(*times))
    meter.begin()
    for _ in times[1:-1]:
        meter.sample()
    return meter.end()


def test_nvml_counter_for_a_long_enough_window() -> None:
    gpu = RecordedGpu([100_000, 100_000, 101_000, 103_000], [50_000, 60_000, 70_000, 80_000])
    result = run_nvml(gpu, (0.0, 1.0, 2.0))
    assert (result.energy_j, result.source) == (3.0, "measured: nvml/energy counter")
    assert (result.components, result.samples, result.note) == ({"gpu0": 3.0}, 3, None)


def test_nvml_short_window_without_the_instant_field_reads_the_counter() -> None:
    """Issue 45, defect 5: a 0.3 s window integrated from nvmlDeviceGetPowerUsage (a 1 s
    average) read 68 % low; where the GPU has the counter (Volta and newer), it is read."""
    gpu = RecordedGpu([5_000, 5_000, 5_030, 5_060], [1, 30_000, 30_000, 30_000])
    result = run_nvml(gpu, (0.0, 0.15, 0.3))
    assert (result.energy_j, result.source) == (0.06, "measured: nvml/energy counter")
    assert "window of 0.3 s read from the energy counter" in (result.note or "")
    assert "averages over" not in (result.warning or "") and result.measured


def test_nvml_short_window_of_averaged_power_only_carries_a_warning() -> None:
    """Without a counter (before Volta) or with one that did not advance, the 1 s average is
    all there is: a window shorter than its averaging period says so."""
    for energy in (None, [5_000] * 4):
        result = run_nvml(RecordedGpu(energy, [1, 100_000, 150_000, 110_000]), (0.0, 0.25, 0.5))
        assert (result.energy_j, result.source) == (63.75, "measured: nvml/average power")
        assert "shorter than the 1 s that nvmlDeviceGetPowerUsage averages over" in (
            result.warning or "")
    long = run_nvml(RecordedGpu(None, [1, 30_000, 30_000]), (0.0, 4.0))
    assert long.source == "measured: nvml/average power"
    assert "averages over" not in (long.warning or "")  # only the few-readings one


def test_nvml_counter_that_did_not_advance_falls_back_to_polling() -> None:
    gpu = RecordedGpu([7_000] * 3, [1, 100_000, 100_000])
    result = run_nvml(gpu, (0.0, 2.0))
    assert (result.energy_j, result.source) == (200.0, "measured: nvml/average power")
    assert "did not advance" in (result.note or "")


def test_nvml_without_counter_polls() -> None:
    gpu = RecordedGpu(None, [1, 30_000, 30_000])
    meter = NvmlMeter(device=gpu, interval_s=NEVER, clock=ticks(0.0, 4.0))
    assert meter.source == "measured: nvml/average power"
    meter.begin()
    result = meter.end()
    assert result.energy_j == 120.0
    assert "no energy counter" in (result.note or "")
    meter.close()
    assert not gpu.closed  # the caller's device: the caller closes it


def test_nvml_short_window_integrates_the_instant_power_field() -> None:
    """Under 1 s the instant field is polled, not nvmlDeviceGetPowerUsage's 1 s average."""
    gpu = RecordedGpu([5_000] * 4, [], instant_mw=[1, 100_000, 150_000, 110_000])
    result = run_nvml(gpu, (0.0, 0.25, 0.5))
    assert (result.energy_j, result.source) == (63.75, "measured: nvml/instant power")
    assert "power" not in gpu.calls
    assert "shorter than 1 s" in (result.note or "") and "average" not in (result.note or "")


def test_nvml_without_the_instant_field_polls_average_power_and_says_so() -> None:
    gpu = RecordedGpu([5_000] * 4, [1, 100_000, 150_000, 110_000])
    result = run_nvml(gpu, (0.0, 0.25, 0.5))
    assert (result.energy_j, result.source) == (63.75, "measured: nvml/average power")
    assert gpu.calls[:3] == ["energy", "instant", "power"]  # tried the field first
    assert "1 s average" in (result.note or "")


def test_nvml_long_window_still_uses_the_counter_with_the_instant_field() -> None:
    gpu = RecordedGpu([100_000, 100_000, 102_000], [], instant_mw=[1, 10_000, 10_000])
    result = run_nvml(gpu, (0.0, 2.0))
    assert (result.energy_j, result.source) == (2.0, "measured: nvml/energy counter")


class FakePynvml(types.ModuleType):
    """Stands in for nvidia-ml-py where no GPU exists: its names and error codes, the calls
    recorded. ``instant`` None: the driver answers the field with NVML_ERROR_NOT_SUPPORTED."""

    NVML_SUCCESS = 0
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_FI_DEV_POWER_INSTANT = 186

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    def __init__(self, instant_mw: int | None, energy_step_mj: int = 0) -> None:
        super().__init__("pynvml")
        self.instant_mw = instant_mw
        self.energy_mj, self.energy_step_mj = 1_000, energy_step_mj  # added at each read
        self.calls: list[str] = []

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.calls.append("nvmlDeviceGetHandleByIndex")
        return f"gpu{index}"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        self.calls.append("nvmlDeviceGetTotalEnergyConsumption")
        self.energy_mj += self.energy_step_mj
        return self.energy_mj

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        self.calls.append("nvmlDeviceGetPowerUsage")
        return 40_000

    def nvmlDeviceGetFieldValues(self, handle: str, field_ids: list[int]) -> list[Any]:
        self.calls.append(f"nvmlDeviceGetFieldValues{field_ids}")
        ok = self.instant_mw is not None
        return [types.SimpleNamespace(
            fieldId=field_ids[0],
            nvmlReturn=self.NVML_SUCCESS if ok else self.NVML_ERROR_NOT_SUPPORTED,
            value=types.SimpleNamespace(uiVal=self.instant_mw or 0),
        )]


@pytest.mark.parametrize(("instant_mw", "source"), [(55_000, "measured: nvml/instant power"),
                                                    (None, "measured: nvml/average power")])
def test_nvml_passed_in_handle_is_read_and_never_shut_down(
    monkeypatch: pytest.MonkeyPatch, instant_mw: int | None, source: str
) -> None:
    nvml = FakePynvml(instant_mw)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = NvmlMeter(handle="callers-gpu", interval_s=NEVER, clock=ticks(0.0, 0.5))
    meter.begin()
    result = meter.end()
    meter.close()
    assert result.source == source
    assert "nvmlDeviceGetFieldValues[186]" in nvml.calls
    assert (instant_mw is None) == ("nvmlDeviceGetPowerUsage" in nvml.calls)
    assert "nvmlInit" not in nvml.calls and "nvmlShutdown" not in nvml.calls


def test_pynvml_without_the_instant_field_reads_a_short_window_from_the_counter(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through the pynvml module's own calls: the field answers NOT_SUPPORTED, the
    counter advances 12 J per read (40 W over 0.3 s), the 1 s average says 40 W too late."""
    nvml = FakePynvml(None, energy_step_mj=12_000)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = NvmlMeter(interval_s=NEVER, clock=ticks(0.0, 0.3))
    meter.begin()
    result = meter.end()
    meter.close()
    assert (result.source, result.energy_j) == ("measured: nvml/energy counter", 12.0)
    assert "nvmlDeviceGetFieldValues[186]" in nvml.calls
    assert "averages over" not in (result.warning or "")


def test_nvml_session_the_meter_started_is_shut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakePynvml(55_000)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    NvmlMeter(interval_s=NEVER).close()
    assert (nvml.calls.count("nvmlInit"), nvml.calls.count("nvmlShutdown")) == (1, 1)


@pytest.mark.skipif(HAS_PYNVML, reason="pynvml is installed")
def test_nvml_without_pynvml_says_what_to_install() -> None:
    with pytest.raises(MissingDependencyError, match=r"nvidia-ml-py \(pip install edgekit\[gpu\]"):
        NvmlMeter()


# -- estimates ----------------------------------------------------------------------------------


def test_estimate_uses_the_default_power_mode() -> None:
    profile = make_profile(
        kind="jetson",
        sensor="ina3221",
        tdp_w=25.0,
        modes=[PowerMode("7W", 7.0), PowerMode("15W", 15.0)],
        default_mode="15W",
    )
    with EstimatedMeter(profile, clock=ticks(1.0, 3.0)).window() as window:
        assert window.result is None  # filled in only when the window closes
    result = window.result
    assert result is not None
    assert (result.energy_j, result.source, result.measured) == (30.0, "estimated: tdp", False)
    assert result.samples == 0
    assert result.note == (
        "TDP of power mode 15W (15 W) assumed for the whole window: "
        "a power budget, not a measurement"
    )


def test_estimate_falls_back_to_tdp() -> None:
    meter = EstimatedMeter(make_profile(tdp_w=65.0), clock=ticks(0.0, 0.5))
    meter.begin()
    result = meter.end()
    assert result.energy_j == 32.5
    assert (result.note or "").startswith("TDP 65 W assumed")


def test_estimate_without_any_power_figure_fails() -> None:
    with pytest.raises(SensorError, match="no TDP or power mode"):
        EstimatedMeter(make_profile(tdp_w=None))


def test_null_meter_reports_no_figure_and_valid_json() -> None:
    meter = NullMeter("energy measurement switched off", clock=ticks(0.0, 1.0))
    meter.begin()
    result = meter.end()
    assert math.isnan(result.energy_j) and not result.measured
    data = result.to_dict()
    assert (data["energy_j"], data["avg_power_w"]) == (None, None)
    assert data["source"] == "unavailable: energy measurement switched off"
    json.dumps(data, allow_nan=False)


def test_to_dict_carries_units_and_method() -> None:
    result = EnergyMeasurement(10.0, 4.0, "measured: rapl", True, 5, {"package-0": 10.0})
    assert result.to_dict() == {
        "energy_j": 10.0,
        "duration_s": 4.0,
        "avg_power_w": 2.5,
        "source": "measured: rapl",
        "measured": True,
        "samples": 5,
        "components": {"package-0": 10.0},
        "components_summed": True,
        "note": None,
    }
    assert EnergyMeasurement(1.0, 0.0, "x", True, 1).avg_power_w == 0.0


# -- open_meter --------------------------------------------------------------------------------


def test_unknown_meter_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError, match="unknown energy meter 'joulescope'.*auto, estimate"):
        open_meter(None, "joulescope")
    assert meter_names() == ("auto", "ina3221", "nvml", "rapl", "estimate", "none")


def test_auto_uses_the_profile_sensor(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = open_meter(make_profile(), root=tmp_path, interval_s=0.5)
    assert isinstance(meter, RaplMeter) and meter.interval_s == 0.5


def test_auto_falls_back_to_the_estimate_and_says_why(tmp_path: Path) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    energy.write_text("")
    meter = open_meter(make_profile(tdp_w=65.0), root=tmp_path)
    assert isinstance(meter, EstimatedMeter)
    meter.begin()
    result = meter.end()
    assert result.source == "estimated: tdp" and not result.measured
    note = result.note or ""
    assert note.startswith(f"rapl unavailable: cannot read {energy}: expected an integer")
    assert "TDP 65 W assumed" in note


def test_auto_on_a_jetson_without_sysfs_estimates(tmp_path: Path) -> None:
    profile = make_profile(kind="jetson", sensor="ina3221", total_rail="VDD_IN", tdp_w=15.0)
    meter = open_meter(profile, root=tmp_path)
    assert isinstance(meter, EstimatedMeter)
    assert meter.note.startswith("ina3221 unavailable: no INA3221 power monitor under")


def test_auto_with_no_sensor_and_no_tdp_gives_no_figure(tmp_path: Path) -> None:
    meter = open_meter(make_profile(sensor="none", tdp_w=None), root=tmp_path)
    assert isinstance(meter, NullMeter)
    assert meter.source == "unavailable: no sensor and no TDP in profile"
    assert meter.note == "profile test-device lists no power sensor"


def test_auto_without_profile_finds_the_jetson_rails(tmp_path: Path, orin_nano: Path) -> None:
    meter = open_meter(None, root=tmp_path)
    assert isinstance(meter, Ina3221Meter) and meter.source == "measured: ina3221/VDD_IN"


def test_auto_passes_the_profile_total_rail(tmp_path: Path, orin_nano: Path) -> None:
    profile = make_profile(kind="jetson", sensor="ina3221", total_rail="VDD_SOC")
    meter = open_meter(profile, root=tmp_path)
    assert meter.source == "measured: ina3221/VDD_SOC"


@pytest.mark.parametrize(
    ("request_name", "message"), [("rapl", "no RAPL zones"), ("ina3221", "no INA3221")]
)
def test_explicit_request_for_a_missing_sensor_fails(
    tmp_path: Path, request_name: str, message: str
) -> None:
    with pytest.raises(SensorError, match=message) as info:
        open_meter(make_profile(), request_name, root=tmp_path)
    assert "or use the energy meter 'auto' or 'estimate' instead" in str(info.value)


@pytest.mark.skipif(HAS_PYNVML, reason="pynvml is installed")
def test_explicit_nvml_without_pynvml_fails(tmp_path: Path) -> None:
    with pytest.raises(MissingDependencyError):
        open_meter(make_profile(kind="gpu", sensor="nvml"), "nvml", root=tmp_path)


def test_explicit_estimate_and_none() -> None:
    assert isinstance(open_meter(make_profile(), "estimate"), EstimatedMeter)
    assert isinstance(open_meter(None, "none"), NullMeter)
    with pytest.raises(SensorError, match="needs a device profile"):
        open_meter(None, "estimate")


# -- the window and its sampler thread -------------------------------------------------------


def test_background_thread_samples_and_stops(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = RaplMeter(tmp_path, interval_s=0.01)
    with meter.window() as window:
        assert sampler_threads()
        time.sleep(0.2)
    assert window.result is not None and window.result.samples >= 5
    assert window.result.duration_s > 0.15  # covers the 0.2 s slept inside the window
    assert not sampler_threads()


def test_error_in_the_thread_is_raised_from_end(tmp_path: Path) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = RaplMeter(tmp_path, interval_s=0.005)
    meter.begin()
    write(energy, "broken")
    deadline = time.monotonic() + 5
    while sampler_threads() and time.monotonic() < deadline:  # the thread stops on its error
        time.sleep(0.005)
    write(energy, 10)  # readable again: end()'s own read would succeed
    with pytest.raises(SensorError, match=f"{energy}: expected an integer"):
        meter.end()
    assert not sampler_threads()


def test_window_state_is_checked(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = RaplMeter(tmp_path, interval_s=NEVER)
    with pytest.raises(UsageError, match="ended before it began"):
        meter.end()
    with pytest.raises(UsageError, match="outside a window"):
        meter.sample()
    meter.begin()
    with pytest.raises(UsageError, match="already open"):
        meter.begin()
    meter.end()
    with pytest.raises(UsageError, match="must be positive"):
        RaplMeter(tmp_path, interval_s=0)


def test_error_inside_a_window_stops_the_sampler(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = RaplMeter(tmp_path, interval_s=0.01)
    with pytest.raises(KeyError), meter.window() as window:
        raise KeyError("model failed")
    assert window.result is None
    assert not sampler_threads()
    meter.begin()  # the meter is usable again
    meter.end()
