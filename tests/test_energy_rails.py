"""Rail discovery and summing on each Jetson layout, partial sensors, and where /sys is (issue 16).

Every layout is rebuilt in tmp_path as the kernel lays it out (hwmon folders under the i2c
device, linked from the driver folder); no mocks. Rail names: Jetson Linux Developer Guide
(r35/r36), Platform Power and Performance; which rails make the total: jtop
(rbonghi/jetson_stats, jtop/core/power.py, ``total_power``): VDD_IN / POM_5V_IN when present,
else the sum of every connected rail.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.energy import EstimatedMeter, Ina3221Meter, RaplMeter, open_meter
from edgekit.errors import SensorError
from edgekit.profiles import load_profile

NEVER = 3600.0
AGX_RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")


def ticks(*times: float):
    return iter(times).__next__


def write(path: Path, value: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")
    return path


def monitor(root: Path, driver: str, address: str, hwmon: str,
            channels: dict[int, tuple[str, int, int]]) -> Path:
    """One hwmon power monitor: channel -> (label, bus mV, mA); returns its hwmon folder."""
    device = root / "sys/devices/platform/bus@0/c240000.i2c/i2c-1" / address
    link = root / "sys/bus/i2c/drivers" / driver / address
    device.mkdir(parents=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(device)
    folder = link / "hwmon" / hwmon
    for n, (label, mv, ma) in channels.items():
        write(folder / f"in{n}_label", label)
        write(folder / f"in{n}_input", mv)
        write(folder / f"curr{n}_input", ma)
    return folder


def agx_orin(root: Path) -> tuple[Path, Path]:
    """AGX Orin on JetPack 6: no input rail; 13.6 W over its four rails."""
    first = monitor(root, "ina3221", "1-0040", "hwmon1", {
        1: ("VDD_GPU_SOC", 5000, 1000),  # 5 W
        2: ("VDD_CPU_CV", 5000, 540),  # 2.7 W
        3: ("VIN_SYS_5V0", 5000, 1000),  # 5 W
        7: ("sum of shunt voltages", 40, 9999),
    })
    second = monitor(root, "ina3221", "1-0041", "hwmon2", {
        1: ("NC", 0, 0), 2: ("VDDQ_VDD2_1V8AO", 1800, 500), 3: ("NC", 0, 0),  # 0.9 W
    })
    return first, second


def orin_nx(root: Path) -> Path:
    """Orin NX / Orin Nano on JetPack 6: VDD_IN and the two rails it feeds."""
    return monitor(root, "ina3221", "1-0040", "hwmon1", {
        1: ("VDD_IN", 5000, 1600),  # 8 W
        2: ("VDD_CPU_GPU_CV", 5000, 600),  # 3 W
        3: ("VDD_SOC", 5000, 300),  # 1.5 W
        7: ("sum of shunt voltages", 40, 9999),
    })


def test_agx_orin_sums_its_module_rails(tmp_path: Path) -> None:
    agx_orin(tmp_path)
    picked = open_meter(load_profile("jetson-agx-orin-64gb"), root=tmp_path)
    assert isinstance(picked, Ina3221Meter)  # not the 60 W budget
    assert picked.source.startswith("measured: sum of rails")
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 2.0))
    meter.begin()
    result = meter.end()
    assert result.source == f"measured: sum of rails ({', '.join(AGX_RAILS)})"
    assert result.measured and result.components_summed
    assert result.avg_power_w == pytest.approx(13.6)
    assert result.energy_j == pytest.approx(sum(result.components.values()))
    assert list(result.components) == list(AGX_RAILS)


def test_orin_nx_total_is_vdd_in_and_sub_rails_stay_apart(tmp_path: Path) -> None:
    orin_nx(tmp_path)
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0))
    meter.begin()
    result = meter.end()
    assert result.source == "measured: ina3221/VDD_IN"
    assert result.energy_j == pytest.approx(8.0)  # never 8 + 3 + 1.5
    assert result.components == pytest.approx({"VDD_CPU_GPU_CV": 3.0, "VDD_SOC": 1.5})
    doc = result.to_dict()
    assert doc["components_summed"] is False and "VDD_IN" not in doc["components"]
    assert "omitted" not in doc


def test_thor_ina238_vin_is_the_total(tmp_path: Path) -> None:
    monitor(tmp_path, "ina238", "2-0044", "hwmon3", {1: ("VIN", 19000, 2000)})  # 38 W
    monitor(tmp_path, "ina3221", "2-0040", "hwmon1", {
        1: ("VDD_GPU", 5000, 2000),
        2: ("VDD_CPU_SOC_MSS", 5000, 1000),
        3: ("VIN_SYS_5V0", 5000, 800),
    })
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0))
    meter.begin()
    result = meter.end()
    assert result.source == "measured: ina238/VIN"
    assert result.energy_j == pytest.approx(38.0)
    assert set(result.components) == {"VDD_GPU", "VDD_CPU_SOC_MSS", "VIN_SYS_5V0"}
    assert not result.components_summed


def test_unreadable_sub_rail_is_left_out_and_named(tmp_path: Path) -> None:
    folder = orin_nx(tmp_path)
    write(folder / "curr2_input", "n/a")
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0))
    meter.begin()
    result = meter.end()
    assert result.energy_j == pytest.approx(8.0)
    assert list(result.components) == ["VDD_SOC"]
    assert str(folder / "curr2_input") in result.omitted["VDD_CPU_GPU_CV"]
    assert "VDD_CPU_GPU_CV" in result.to_dict()["omitted"]


def test_unreadable_rail_in_a_sum_is_named_in_source_and_note(tmp_path: Path) -> None:
    _, second = agx_orin(tmp_path)
    write(second / "curr2_input", "")
    meter = Ina3221Meter(root=tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0))
    meter.begin()
    result = meter.end()
    assert result.source == f"measured: sum of rails ({', '.join(AGX_RAILS[:3])})"
    assert result.avg_power_w == pytest.approx(12.7)
    assert set(result.omitted) == {"VDDQ_VDD2_1V8AO"}
    assert "VDDQ_VDD2_1V8AO" in (result.note or "")


def test_unreadable_total_rail_still_fails(tmp_path: Path) -> None:
    folder = orin_nx(tmp_path)
    write(folder / "curr1_input", "n/a")
    with pytest.raises(SensorError, match="curr1_input"):
        Ina3221Meter(root=tmp_path)


def rapl_zone(root: Path, zone: str, name: str, energy_uj: object) -> Path:
    folder = root / "sys/devices/virtual/powercap/intel-rapl" / zone
    write(folder / "name", name)
    write(folder / "max_energy_range_uj", 262143328850)
    write(folder / "energy_uj", energy_uj)
    link = root / "sys/class/powercap" / zone
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(folder)
    return link / "energy_uj"


@pytest.mark.parametrize("broken", ["energy_uj", "max_energy_range_uj"])
def test_unreadable_rapl_dram_leaves_the_packages(tmp_path: Path, broken: str) -> None:
    package = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    dram = rapl_zone(tmp_path, "intel-rapl:0:0", "dram", 0)
    write(dram.with_name(broken), "garbage")
    meter = RaplMeter(tmp_path, interval_s=NEVER, clock=ticks(0.0, 1.0))
    meter.begin()
    write(package, 3_000_000)
    result = meter.end()
    assert result.energy_j == 2.0 and result.components == {"package-0": 2.0}
    assert "garbage" in result.omitted["package-0/dram"]
    assert "DRAM" in (result.note or "")


def test_unreadable_rapl_package_still_fails(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", "garbage")
    rapl_zone(tmp_path, "intel-rapl:0:0", "dram", 0)
    with pytest.raises(SensorError, match="garbage"):
        RaplMeter(tmp_path)


def test_named_generic_profile_keeps_the_per_core_estimate(tmp_path: Path) -> None:
    profile = load_profile("generic-x86-64-cpu")  # named, not detected: no cores, no TDP
    meter = open_meter(profile, root=tmp_path)  # no RAPL under tmp_path
    assert isinstance(meter, EstimatedMeter)
    cores = os.cpu_count()
    assert meter.power_w == pytest.approx(cores * 5.0)
    assert f"{cores} cores x 5 W/core assumed" in meter.note
    assert meter.note.startswith("rapl unavailable")


def test_sysfs_root_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agx_orin(tmp_path)
    monkeypatch.setenv("EDGEKIT_SYSFS_ROOT", str(tmp_path))
    meter = open_meter(load_profile("jetson-agx-orin-64gb"))
    assert meter.source.startswith("measured: sum of rails")


def test_cli_profile_reads_the_rails_under_sysfs_root(tmp_path: Path) -> None:
    root = tmp_path / "host-sys"
    agx_orin(root)
    (root / "proc/device-tree").mkdir(parents=True)  # the host is an AGX Orin: --device holds
    (root / "proc/device-tree/model").write_text("Jetson AGX Orin Developer Kit\x00")
    out = tmp_path / "report.json"
    env = dict(os.environ, COLUMNS="200", EDGEKIT_HOME=str(tmp_path / "home"))
    env.pop("EDGEKIT_SYSFS_ROOT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit", "profile", "mlp:small", "--device",
         "jetson-agx-orin-64gb", "--energy", "auto", "--sysfs-root", str(root),
         "--warmup", "0", "--iterations", "20", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "measured: sum of rails" in proc.stdout
    assert "summed into the total" in proc.stdout
    energy = json.loads(out.read_text())["energy"]
    assert energy["source"].startswith("measured: sum of rails (VDD_GPU_SOC")
    assert energy["components_summed"] is True
    assert energy["avg_power_w"] == pytest.approx(13.6)
