"""Device profiles: every shipped file validates and cites its figures; bad files fail with the
file and the field named; detection from rebuilt device files; calibration; ``edgekit devices``."""
from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

import edgekit.profiles.detect as detect
from edgekit.cli import cli
from edgekit.errors import ProfileError, UnknownNameError, UsageError
from edgekit.precisions import all_names
from edgekit.profiles import (
    calibrate,
    detect_profile,
    generic_profile_for,
    list_profiles,
    load_profile,
    profile_names,
)
from edgekit.profiles.claim import measured_on, mismatch
from edgekit.profiles.device_profile import DEVICE_KINDS, SENSOR_KINDS
from edgekit.profiles.loader import PROFILE_DIR

NAMES = profile_names()


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection must not depend on whether the test machine has an NVIDIA GPU."""
    monkeypatch.setattr(detect, "nvml_gpus", lambda: [])


def test_the_required_profiles_ship() -> None:
    required = {"jetson-orin-nano-8gb", "jetson-orin-nano-8gb-super", "jetson-orin-nx-16gb",
                "jetson-agx-orin-64gb", "jetson-xavier-nx", "jetson-nano", "generic-x86-64-cpu",
                "generic-arm64-cpu", "generic-nvidia-gpu", "nvidia-h200", "nvidia-h100-sxm",
                "loihi"}
    assert required <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_profile_loads_and_validates(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name and profile.path == PROFILE_DIR / f"{name}.toml"
    assert profile.kind in DEVICE_KINDS and profile.power_sensor.kind in SENSOR_KINDS
    assert set(profile.peak_flops) <= set(all_names())
    assert profile.generic == name.startswith("generic-") and not profile.calibrated
    if profile.default_power_mode is not None:
        assert profile.power_mode().watts == profile.tdp_w


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_is_positive_and_cited(name: str) -> None:
    profile = load_profile(name)
    figures = {f"peak.{p}": v for p, v in profile.peak_flops.items()}
    figures.update({
        "memory.size_gib": profile.memory_bytes,
        "memory.bandwidth_gbs": profile.memory_bandwidth_bytes_s,
        "storage.bandwidth_gbs": profile.storage_bandwidth_bytes_s,
        "power.tdp_w": profile.tdp_w,
        "power.idle_w": profile.idle_power_w,
        "cpu_cores": profile.cpu_cores,
    })
    figures.update({f"power.modes.{m.name}": m.watts for m in profile.power_modes})
    figures.update({f"energy.{e}_pj": j for e, j in profile.energy_per_event_j.items()})
    for field, value in figures.items():
        if value is None:
            continue
        assert value > 0, field
        cited = "power.modes" if field.startswith("power.modes.") else field
        assert profile.sources.get(cited, "").strip(), f"{name}: {field} has no source"
    if profile.kind == "neuromorphic":  # a cost table: energy per event, no FLOP/s or sensor
        assert profile.energy_per_event_j and not profile.peak_flops
        assert profile.power_sensor.kind == "none" and profile.tdp_w is None
    elif not profile.generic:
        assert profile.peak_flops and profile.memory_bytes and profile.memory_bandwidth_bytes_s
        assert not profile.energy_per_event_j


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_line_has_a_comment(name: str) -> None:
    """The TOML itself says where each number comes from, beside the number."""
    lines = (PROFILE_DIR / f"{name}.toml").read_text().splitlines()
    for number, line in enumerate(lines):
        if re.match(r"\s*[\w\"]+\s*=\s*([0-9.]+|\{.*\d.*\})\s*(#|$)", line):
            assert "#" in line or lines[number - 1].lstrip().startswith("#"), line


def test_datasheet_figures_are_dense_and_rails_right() -> None:
    """Spot checks against the datasheets: NVIDIA's sparse INT8 TOPS are halved."""
    nano = load_profile("jetson-orin-nano-8gb")
    nano_super = load_profile("jetson-orin-nano-8gb-super")
    assert nano.peak_for("int8") == 20e12 and nano_super.peak_for("int8") == 33.5e12
    assert nano.memory_bandwidth_bytes_s == 68e9 and nano_super.memory_bandwidth_bytes_s == 102e9
    assert nano.memory_bytes == 8 * 2**30 and nano.power_mode("7W").watts == 7
    assert nano_super.default_power_mode == "MAXN_SUPER" and nano_super.tdp_w == 25
    assert load_profile("nvidia-h200").peak_for("bf16") == 989.5e12
    rails = {n: (load_profile(n).power_sensor.kind, load_profile(n).power_sensor.total_rail)
             for n in NAMES}
    assert rails["jetson-orin-nano-8gb"] == ("ina3221", "VDD_IN")
    assert rails["jetson-xavier-nx"] == ("ina3221", "VDD_IN")
    assert rails["jetson-nano"] == ("ina3221", "POM_5V_IN")
    assert rails["nvidia-h200"] == ("nvml", None) and rails["generic-x86-64-cpu"][0] == "rapl"


def test_loihi_costs_are_davies_2018_table_2() -> None:
    """Davies et al., IEEE Micro 2018, Table 2, converted from pJ to joules."""
    loihi = load_profile("loihi")
    assert loihi.kind == "neuromorphic" and loihi.arch == "loihi"
    expected = {"synaptic_op": 23.6, "neuron_update_active": 81.0, "neuron_update_inactive": 52.0,
                "spike_within_tile": 1.7, "tile_hop_ew": 3.0, "tile_hop_ns": 4.0}
    assert loihi.energy_per_event_j == pytest.approx({k: v * 1e-12 for k, v in expected.items()})
    assert all("Table 2" in loihi.sources[f"energy.{k}_pj"] for k in expected)
    assert "loihi" not in {detect_profile(Path("/nonexistent"), machine=m).name
                           for m in ("x86_64", "aarch64")}


NEUROMORPHIC = """\
name = "my-chip"
display_name = "My chip"
kind = "neuromorphic"
arch = "loihi"

[energy]
synaptic_op_pj = 23.6  # made up

[power.sensor]
kind = "none"

[sources]
"energy.synaptic_op_pj" = "test"
"""


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t, None),
    (lambda t: t.replace("[energy]", "[peak]\nfp32 = 1.0  # x\n\n[energy]"),
     "field 'peak' must be absent in a neuromorphic profile"),
    (lambda t: t.replace("synaptic_op_pj = 23.6", "spike_within_tile_pj = 1.7"),
     "field 'energy.synaptic_op_pj' is required"),
    (lambda t: t.replace("synaptic_op_pj = 23.6", "synaptic_op_pj = 23.6\nsynop_pj = 1"),
     "field 'energy.synop_pj' is not a known field"),
    (lambda t: t.replace("synaptic_op_pj = 23.6", "synaptic_op_pj = -1"),
     "field 'energy.synaptic_op_pj' must be a positive number"),
    (lambda t: t.replace('arch = "loihi"', 'arch = "x86_64"'), "field 'arch' must be one of loihi"),
    (lambda t: t.replace('"energy.synaptic_op_pj" = "test"', ""),
     "field 'energy.synaptic_op_pj' has no source"),
])
def test_neuromorphic_profile_validation(tmp_path: Path, edit, message) -> None:
    path = tmp_path / "my-chip.toml"
    path.write_text(edit(NEUROMORPHIC))
    if message is None:
        assert load_profile(path).energy_per_event_j == {"synaptic_op": pytest.approx(23.6e-12)}
        return
    with pytest.raises(ProfileError, match=message):
        load_profile(path)


def test_energy_table_only_in_neuromorphic_profiles(tmp_path: Path) -> None:
    path = tmp_path / "my-board.toml"
    path.write_text(GOOD.replace("[sources]", "[energy]\nsynaptic_op_pj = 1  # x\n\n[sources]"))
    with pytest.raises(ProfileError, match="field 'energy' is only for kind"):
        load_profile(path)


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("generic-")])
def test_generic_profiles_have_no_datasheet_figures(name: str) -> None:
    profile = load_profile(name)
    assert profile.peak_flops == {} and profile.memory_bandwidth_bytes_s is None
    assert profile.memory_bytes is None


def test_load_by_path_and_list(tmp_path: Path) -> None:
    path = tmp_path / "my-board.toml"
    path.write_text(GOOD)
    assert load_profile(path).name == "my-board"
    assert load_profile(str(path)).peak_for("fp32") == 1e12
    assert [p.name for p in list_profiles()] == NAMES


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_profile("jetson-orin-nono")
    assert info.value.exit_code == 2
    assert "jetson-orin-nono" in str(info.value) and "jetson-orin-nano-8gb" in str(info.value)


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_profile(tmp_path / "absent.toml")


# A valid profile; each bad-file case below breaks it in one way.
GOOD = """\
name = "my-board"
display_name = "My board"
kind = "jetson"
arch = "aarch64"
cpu_cores = 6

[peak]
fp32 = 1.0  # made up for the test

[memory]
size_gib = 8          # made up
bandwidth_gbs = 68    # made up

[power]
default_mode = "15W"
modes = { 15W = 15, 7W = 7 }

[power.sensor]
kind = "ina3221"
total_rail = "VDD_IN"

[sources]
cpu_cores = "test"
"peak.fp32" = "test"
"memory.size_gib" = "test"
"memory.bandwidth_gbs" = "test"
"power.modes" = "test"
"power.sensor" = "test"
"""


def _sub(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text
        return text.replace(old, new)
    return edit


BAD_FILES = {
    "missing field": (_sub('kind = "jetson"\n', ""), "field 'kind' is required"),
    "wrong type": (_sub("size_gib = 8 ", 'size_gib = "8"'),
                   "field 'memory.size_gib' must be a positive number, got '8'"),
    "negative number": (_sub("bandwidth_gbs = 68", "bandwidth_gbs = -3"),
                        "field 'memory.bandwidth_gbs' must be a positive number, got -3"),
    "unknown kind": (_sub('kind = "jetson"', 'kind = "tpu"'), "field 'kind' must be one of"),
    "unknown precision": (_sub("fp32 = 1.0", "fp8 = 1.0"),
                          "field 'peak.fp8' is not a known precision"),
    "unknown sensor kind": (_sub('kind = "ina3221"', 'kind = "ina219"'),
                            "field 'power.sensor.kind' must be one of"),
    "default mode not a mode": (_sub('default_mode = "15W"', 'default_mode = "25W"'),
                                "field 'power.default_mode' must name one of the power modes"),
    "unknown top-level key": (_sub("cpu_cores = 6", "cpu_cores = 6\nmemroy = 1"),
                              "field 'memroy' is not a known field"),
    "unknown table": (_sub("[memory]", "[memroy]"), "field 'memroy' is not a known field"),
    "unknown nested key": (_sub("bandwidth_gbs = 68", "bandwith_gbs = 68"),
                           "field 'memory.bandwith_gbs' is not a known field"),
    "toml syntax": (_sub("cpu_cores = 6", "cpu_cores = = 6"), "invalid TOML: .*line 5"),
    "figure without source": (_sub('"peak.fp32" = "test"\n', ""),
                              "field 'peak.fp32' has no source"),
    "source without figure": (_sub('cpu_cores = "test"', 'cpu_cores = "test"\n"peak.fp16" = "x"'),
                              "field 'sources.peak.fp16' cites a figure the profile does not"),
    "unquoted dotted source key": (_sub('"peak.fp32" = "test"', 'peak.fp32 = "test"'),
                                   "field 'sources.peak' must be a string: quote dotted keys"),
    "name is not the file name": (_sub('name = "my-board"', 'name = "other"'),
                                  "field 'name' must equal the file name 'my-board'"),
    "fractional cores": (_sub("cpu_cores = 6", "cpu_cores = 6.5"),
                         "field 'cpu_cores' must be a positive integer"),
    "unknown backend": (_sub('cpu_cores = 6', 'cpu_cores = 6\npreferred_backends = ["tensorflow"]'),
                        "field 'preferred_backends' entries must be among"),
    "peaks in a generic profile": (_sub("cpu_cores = 6", "cpu_cores = 6\ngeneric = true"),
                                   "field 'peak' must be absent in a generic profile"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_names_file_and_field(tmp_path: Path, case: str) -> None:
    edit, message = BAD_FILES[case]
    path = tmp_path / "my-board.toml"
    path.write_text(edit(GOOD))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}: ")
    assert re.search(message, str(info.value)), str(info.value)


def test_edited_file_is_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "my-board.toml"
    path.write_text(GOOD)
    assert load_profile(path).peak_for("fp32") == 1e12
    path.write_text(GOOD.replace("fp32 = 1.0", "fp32 = 2.0"))
    assert load_profile(path).peak_for("fp32") == 2e12


def _fake_root(tmp_path: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    return tmp_path


@pytest.mark.parametrize(("model", "expected"), [
    ("NVIDIA Jetson Orin Nano Developer Kit\x00", "jetson-orin-nano-8gb"),
    ("NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super\x00",
     "jetson-orin-nano-8gb-super"),
    ("NVIDIA Jetson Orin NX Engineering Reference Developer Kit\x00", "jetson-orin-nx-16gb"),
    ("Jetson AGX Orin Developer Kit\x00", "jetson-agx-orin-64gb"),
    ("NVIDIA Jetson Xavier NX Developer Kit\x00", "jetson-xavier-nx"),
    ("NVIDIA Jetson Nano Developer Kit\x00", "jetson-nano"),
])
def test_jetson_detected_by_device_tree_model(tmp_path: Path, model: str, expected: str) -> None:
    root = _fake_root(tmp_path, {"proc/device-tree/model": model})
    assert detect_profile(root, machine="aarch64").name == expected


def test_jetson_nano_detected_by_nv_tegra_release(tmp_path: Path) -> None:
    release = "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64\n"
    root = _fake_root(tmp_path, {"etc/nv_tegra_release": release})
    assert detect_profile(root, machine="aarch64").name == "jetson-nano"


def test_unknown_arm_board_falls_back_to_its_cpu(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, {"proc/device-tree/model": "Raspberry Pi 4 Model B Rev 1.4\x00"})
    assert detect_profile(root, machine="aarch64").name == "generic-arm64-cpu"


@pytest.mark.parametrize(("machine", "expected"), [
    ("x86_64", "generic-x86-64-cpu"), ("AMD64", "generic-x86-64-cpu"),
    ("aarch64", "generic-arm64-cpu"), ("arm64", "generic-arm64-cpu"),
])
def test_cpu_detected_by_machine_reads_this_machine(tmp_path: Path, machine: str,
                                                    expected: str) -> None:
    profile = detect_profile(tmp_path, machine=machine)
    assert profile.name == expected
    assert profile.cpu_cores == os.cpu_count()
    assert profile.memory_bytes == psutil.virtual_memory().total
    assert profile.sources["memory.size_gib"].startswith("read from this machine")
    assert profile.sources["cpu_cores"].startswith("read from this machine")


def test_unknown_machine_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="riscv64"):
        detect_profile(tmp_path, machine="riscv64")


@pytest.mark.parametrize(("gpu", "expected"), [
    ("NVIDIA H200", "nvidia-h200"),
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-sxm"),
    ("NVIDIA H100 PCIe", "generic-nvidia-gpu"),
    ("NVIDIA H200 NVL", "generic-nvidia-gpu"),
    ("NVIDIA GeForce RTX 4090", "generic-nvidia-gpu"),
])
def test_gpu_detected_by_nvml_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: str,
                                   expected: str) -> None:
    monkeypatch.setattr(detect, "nvml_gpus", lambda: [(gpu, 24 << 30)])
    profile = detect_profile(tmp_path, machine="x86_64")
    assert profile.name == expected
    if profile.generic:
        assert profile.memory_bytes == 24 << 30 and gpu in profile.display_name
    else:
        assert profile.memory_bytes != 24 << 30  # a datasheet profile keeps its own figures


def _this_cpu_profile() -> str:
    return generic_profile_for(detect_profile()).name


def test_calibration_applies_to_generic_profiles_only(edgekit_home: Path) -> None:
    name = _this_cpu_profile()
    result = calibrate(name, duration_s=0.3, precisions=("fp32", "tf32", "int8"))
    stored = json.loads((edgekit_home / "calibration.json").read_text())
    assert stored["profiles"][name]["peak_flops"] == result["peak_flops"]
    assert result["stored_in"] == str(edgekit_home / "calibration.json")
    assert set(result["skipped"]) == {"tf32"} and result["peak_flops"]["fp32"] > 0
    assert result["gemm"]["fp32"]["repeats"] >= 3 and result["memory_bandwidth_bytes_s"] > 0
    # int8 timed by torch._int_mm; a rate under half of fp32's (no fast kernel) is no peak
    assert result["gemm"]["int8"]["n"] >= 128
    assert ("int8" in result["peak_flops"]) == ("int8" not in result["notes"])

    profile = load_profile(name)
    assert profile.calibrated and profile.peak_for("fp32") == result["peak_flops"]["fp32"]
    assert profile.memory_bandwidth_bytes_s == result["memory_bandwidth_bytes_s"]
    assert profile.sources["peak.fp32"].startswith("measured: edgekit devices --calibrate on ")
    assert not load_profile("jetson-orin-nano-8gb").calibrated


def test_calibration_under_a_datasheet_name_is_ignored(edgekit_home: Path) -> None:
    entry = {"date": "2025-01-01", "machine": {}, "peak_flops": {"int8": 1.0}}
    (edgekit_home / "calibration.json").write_text(
        json.dumps({"profiles": {"jetson-orin-nano-8gb": entry}}))
    profile = load_profile("jetson-orin-nano-8gb")
    assert profile.peak_for("int8") == 20e12 and not profile.calibrated


def test_datasheet_and_foreign_profiles_are_not_calibrated() -> None:
    with pytest.raises(UsageError, match="datasheet profile"):
        calibrate("nvidia-h200", duration_s=0.1)
    other = "generic-arm64-cpu" if _this_cpu_profile() == "generic-x86-64-cpu" \
        else "generic-x86-64-cpu"
    with pytest.raises(UsageError, match="describes"):
        calibrate(other, duration_s=0.1)
    with pytest.raises(UnknownNameError):
        calibrate(None, duration_s=0.1, precisions=("fp7",))


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not valid JSON: .*line 1"),
    ('{"profiles": {"generic-x86-64-cpu": {"date": "d", "peak_flops": {"fp32": -1}}}}',
     "field 'profiles.generic-x86-64-cpu.peak_flops.fp32' must be a positive number"),
    ('{"profiles": []}', "field 'profiles' must be an object, got list"),
    ('{"profiles": {"generic-x86-64-cpu": {"peak_flops": {"fp32": 1}}}}',
     "field 'profiles\\[\"generic-x86-64-cpu\"\\].date' is missing"),
    # issue 45: no figure at all was accepted and shown as "figures: measured"
    ('{"profiles": {"generic-x86-64-cpu": {"date": "d", "peak_flops": {}}}}',
     "field 'profiles.generic-x86-64-cpu.peak_flops' holds no precision"),
])
def test_corrupt_calibration_file_is_a_profile_error(edgekit_home: Path, text: str,
                                                     message: str) -> None:
    path = edgekit_home / "calibration.json"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile("generic-x86-64-cpu")
    assert str(info.value).startswith(f"{path}: ") and re.search(message, str(info.value))
    assert load_profile("jetson-nano").name == "jetson-nano"  # datasheet profiles still load
    result = CliRunner().invoke(cli, ["devices"])
    assert result.exit_code == 2 and str(path) in result.output


def test_cli_lists_profiles_and_marks_the_detected_one() -> None:
    result = CliRunner().invoke(cli, ["devices"])
    assert result.exit_code == 0, result.output
    detected = detect_profile().name
    assert f"* detected: {detected}" in result.output
    marked = [line for line in result.output.splitlines() if line.lstrip().startswith("* ")]
    assert any(detected in line for line in marked)
    for name in NAMES:
        assert name in result.output


def test_cli_json_report(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(cli, ["devices", "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["kind"] == "devices" and document["schema_version"] == 1
    assert document["detected"] == detect_profile().name
    assert [p["name"] for p in document["profiles"]] == NAMES
    nano = next(p for p in document["profiles"] if p["name"] == "jetson-orin-nano-8gb")
    assert nano["peak_flops"]["int8"] == 20e12 and nano["sources"]["peak.int8"]


def test_cli_show_prints_sources() -> None:
    result = CliRunner().invoke(cli, ["devices", "--show", "jetson-orin-nano-8gb"])
    assert result.exit_code == 0, result.output
    assert "DS-11105-001" in result.output and "VDD_IN" in result.output


def test_cli_show_unknown_name_exits_2_with_valid_names() -> None:
    result = CliRunner().invoke(cli, ["devices", "--show", "nope"])
    assert result.exit_code == 2
    assert "unknown device profile 'nope'" in result.output
    assert "jetson-orin-nano-8gb" in result.output and "generic-x86-64-cpu" in result.output


def test_cli_calibrate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from edgekit.cli import devices as devices_cli

    quick = functools.partial(calibrate, duration_s=0.2, precisions=("fp32",))
    monkeypatch.setattr(devices_cli, "calibrate", quick)
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(cli, ["devices", "--calibrate", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "fp32 GEMM" in result.output and "memory copy" in result.output
    document = json.loads(out.read_text())
    assert document["calibration"]["profile"] == _this_cpu_profile()
    detected = next(p for p in document["profiles"] if p["name"] == document["detected"])
    assert detected["calibrated"] and detected["peak_flops"]["fp32"] > 0


def test_generic_cpu_power_is_an_assumption_scaled_by_cores(tmp_path):
    import os

    from edgekit.energy import open_meter

    profile = detect_profile(tmp_path, machine="x86_64")
    assert profile.tdp_w == pytest.approx(profile.core_power_w * os.cpu_count())
    assert profile.sources["power.tdp_w"].startswith("assumed:")
    meter = open_meter(profile, "estimate")
    meter.begin()
    result = meter.end()
    assert result.measured is False and result.source == "estimated: tdp"


ORIN_NX_TREE = {"proc/device-tree/model":
                "NVIDIA Jetson Orin NX Engineering Reference Developer Kit\x00"}


@pytest.mark.parametrize(("name", "files", "machine", "why"), [
    ("jetson-nano", {}, "x86_64", "it has no Jetson device tree"),
    ("jetson-orin-nano-8gb", ORIN_NX_TREE, "aarch64",
     "it is a 'NVIDIA Jetson Orin NX Engineering Reference Developer Kit'"),
    ("jetson-orin-nx-16gb", ORIN_NX_TREE, "aarch64", None),
    ("jetson-orin-nano-8gb",  # the Super dev kit is an Orin Nano too (either profile's pattern)
     {"proc/device-tree/model": "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit "
                                "Super\x00"}, "aarch64", None),
    ("jetson-nano", {"etc/nv_tegra_release": "# R32 (release), REVISION: 7.1, BOARD: t210ref\n"},
     "aarch64", None),
    ("generic-arm64-cpu", {}, "x86_64", "its CPU is x86_64, the profile's is aarch64"),
    ("generic-x86-64-cpu", {}, "AMD64", None),
    ("generic-x86-64-cpu", ORIN_NX_TREE, "aarch64", "its CPU is aarch64"),
    ("nvidia-h100-sxm", {}, "x86_64", "NVML finds no NVIDIA GPU"),
])
def test_a_claimed_profile_is_checked_against_the_hardware(tmp_path: Path, name: str,
                                                           files: dict[str, str], machine: str,
                                                           why: str | None) -> None:
    """--device NAME claims this machine is such a device: its device tree, NVML name or CPU
    architecture must say so."""
    root = _fake_root(tmp_path, files)
    found = mismatch(load_profile(name), root, machine=machine)
    assert found == why if why is None else why in found


@pytest.mark.parametrize(("name", "gpu", "why"), [
    ("nvidia-h100-sxm", "NVIDIA H200", "its GPU is an 'NVIDIA H200'"),
    ("nvidia-h200", "NVIDIA H200", None),
    ("generic-nvidia-gpu", "NVIDIA GeForce RTX 4090", None),
    ("jetson-xavier-nx", "NVIDIA H200", "it has no Jetson device tree"),
])
def test_a_gpu_profile_is_checked_by_its_nvml_name(tmp_path: Path, name: str, gpu: str,
                                                   why: str | None) -> None:
    found = mismatch(load_profile(name), tmp_path, machine="x86_64", gpus=[(gpu, 141 << 30)])
    assert found == why if why is None else why in found


def test_another_devices_profile_is_refused_unless_said_plainly(tmp_path: Path) -> None:
    nano = load_profile("jetson-nano")
    with pytest.raises(UsageError, match="this machine is not a jetson-nano .*--as-device "
                                         "jetson-nano"):
        measured_on(nano, as_device=False, root=tmp_path, machine="x86_64")
    here = measured_on(nano, as_device=True, root=tmp_path, machine="x86_64")
    assert here is not None and here.name == "generic-x86-64-cpu"  # whose figures they are
    tree = _fake_root(tmp_path / "nano", {"proc/device-tree/model": "NVIDIA Jetson Nano "
                                                                     "Developer Kit\x00"})
    assert measured_on(nano, as_device=True, root=tree, machine="aarch64") is None  # it is one
    with pytest.raises(UsageError, match="neuromorphic cost table"):
        measured_on(load_profile("loihi"), as_device=True, root=tmp_path)
