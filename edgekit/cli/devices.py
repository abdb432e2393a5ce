"""``edgekit devices``: the device profiles, which one this machine is, and calibration."""
from __future__ import annotations

from typing import Any

import click
from rich import box
from rich.table import Table

from edgekit.cli.common import JSON_FILE, console, write_json
from edgekit.precisions import get_precision, list_precisions
from edgekit.profiles import (
    DeviceProfile,
    calibrate,
    detect_profile,
    generic_profile_for,
    list_profiles,
    load_profile,
    profile_source,
    profile_to_dict,
)
from edgekit.provenance import report_document

_DASH = "-"


def _figure(value: float | None, unit: float) -> str:
    """Three significant digits, never an exponent: 0.236, 42.6, 1979."""
    if value is None:
        return _DASH
    scaled = value / unit
    return f"{scaled:.0f}" if scaled >= 100 else f"{scaled:.3g}"


def _tera(value: float | None) -> str:
    return _figure(value, 1e12)


def _gib(value: int | None) -> str:
    return _DASH if value is None else f"{value / 2**30:.1f}"


def _gbs(value: float | None) -> str:
    return _figure(value, 1e9)


def _power(profile: DeviceProfile) -> str:
    """The default mode's watts (the TDP), with the range of the power modes."""
    if profile.tdp_w is None:
        return _DASH
    watts = [m.watts for m in profile.power_modes]
    spread = f" ({min(watts):g}-{max(watts):g})" if len(watts) > 1 else ""
    return f"{profile.tdp_w:g}{spread}"


def _sensor(profile: DeviceProfile) -> str:
    sensor = profile.power_sensor
    return f"{sensor.kind} {sensor.total_rail}" if sensor.total_rail else sensor.kind


def _figures(profile: DeviceProfile) -> str:
    if not profile.generic:
        return "datasheet"
    return "measured" if profile.calibrated else "not calibrated"


def _print_table(profiles: list[DeviceProfile], detected: DeviceProfile) -> None:
    columns = [p for p in list_precisions() if p.column]
    integer = ", ".join(p.name for p in columns if p.integer)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False,
                  caption=f"peaks dense, TFLOP/s ({integer}: TOPS); power: default mode W "
                          "(range of modes); generic profiles: measured by --calibrate, '-' until "
                          "then; --show NAME cites every figure", caption_justify="left")
    table.add_column("", no_wrap=True)
    table.add_column("name", no_wrap=True)
    for header in (*(p.name for p in columns), "GiB", "GB/s", "power W"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("sensor", overflow="fold")
    table.add_column("from", no_wrap=True)
    for p in profiles:
        table.add_row("*" if p.name == detected.name else "", p.name,
                      *(_tera(p.peak_for(c.name)) for c in columns), _gib(p.memory_bytes),
                      _gbs(p.memory_bandwidth_bytes_s), _power(p), _sensor(p),
                      profile_source(p))
    console.print(table)
    cores = f"{detected.cpu_cores} cores" if detected.cpu_cores else "cores unknown"
    console.print(f"* detected: {detected.name} ({detected.arch}, {cores}, "
                  f"{_gib(detected.memory_bytes)} GiB; figures: {_figures(detected)})")


def _optional(value: Any, unit: str) -> str:
    return _DASH if value is None else f"{value:g} {unit}"


def _details(profile: DeviceProfile) -> list[tuple[str, str, str]]:
    """(field, value, source) rows; the field is the TOML key its source is filed under."""
    if profile.kind == "neuromorphic":  # a cost table: pJ per event, nothing to run on
        rows = [("name", profile.name), ("display name", profile.display_name),
                ("kind", f"{profile.kind} ({profile.arch})"),
                *((f"energy.{event}_pj", f"{joules * 1e12:g} pJ per event")
                  for event, joules in profile.energy_per_event_j.items()),
                ("file", f"{profile.path} ({profile_source(profile)})")]
        return [(field, value, profile.sources.get(field, "")) for field, value in rows]
    modes = ", ".join(f"{m.name} {m.watts:g} W" for m in profile.power_modes)
    rows = [
        ("name", profile.name), ("display name", profile.display_name),
        ("kind", f"{profile.kind} ({profile.arch})"), ("figures", _figures(profile)),
        *((f"peak.{p}", f"{v / 1e12:g} T{get_precision(p).unit}/s dense")
          for p, v in profile.peak_flops.items()),
        ("memory.size_gib", f"{_gib(profile.memory_bytes)} GiB"),
        ("memory.bandwidth_gbs", f"{_gbs(profile.memory_bandwidth_bytes_s)} GB/s"),
        ("storage.bandwidth_gbs", f"{_gbs(profile.storage_bandwidth_bytes_s)} GB/s"),
        ("power.modes", f"{modes} (default {profile.default_power_mode})" if modes else _DASH),
        ("power.tdp_w", _optional(profile.tdp_w, "W")),
        ("power.idle_w", _optional(profile.idle_power_w, "W")),
        ("power.sensor", _sensor(profile)),
        ("cpu_cores", _optional(profile.cpu_cores, "")),
        ("preferred", f"{', '.join(profile.preferred_backends)}; "
                      f"{', '.join(profile.preferred_precisions)}"),
        ("detect", "; ".join(f"{k}: {', '.join(v)}" for k, v in profile.detect.items()) or _DASH),
        ("file", f"{profile.path} ({profile_source(profile)})"),
    ]
    return [(field, value, profile.sources.get(field, "")) for field, value in rows]


def _print_details(profile: DeviceProfile) -> None:
    table = Table(title=profile.display_name, title_justify="left", show_lines=True)
    for header in ("field", "value", "source"):
        table.add_column(header, overflow="fold")
    for row in _details(profile):
        table.add_row(*row)
    console.print(table)


def _run_calibration(detected: DeviceProfile) -> dict[str, Any]:
    target = generic_profile_for(detected)
    if target.name != detected.name:
        console.print(f"{detected.name} is a datasheet profile: its figures are never "
                      f"overwritten. Calibrating {target.name} for this machine instead.")
    with console.status(f"measuring GEMM rates and memory bandwidth for {target.name}..."):
        result = calibrate(target.name)
    table = Table(title=f"calibration of {target.name} on {result['device']} "
                        f"({result['threads']} threads, torch {result['torch']})",
                  title_justify="left")
    for header in ("measure", "size", "best", "median"):
        table.add_column(header, no_wrap=True)
    table.add_column("note", overflow="fold")
    for precision, gemm in result["gemm"].items():
        unit = f"T{get_precision(precision).unit}/s"  # TOP/s for an integer GEMM
        table.add_row(f"{precision} GEMM", f"n={gemm['n']} x{gemm['repeats']}",
                      f"{gemm['flops_best'] / 1e12:.3g} {unit}",
                      f"{gemm['flops_median'] / 1e12:.3g} {unit}",
                      result["notes"].get(precision, ""))
    bandwidth = result["bandwidth"]
    if bandwidth:
        table.add_row("memory copy", f"{bandwidth['bytes_copied'] >> 20} MiB "
                      f"x{bandwidth['repeats']}", f"{bandwidth['bytes_s_best'] / 1e9:.3g} GB/s",
                      f"{bandwidth['bytes_s_median'] / 1e9:.3g} GB/s", "read + written")
    for what, reason in result["skipped"].items():
        table.add_row(what, _DASH, _DASH, _DASH, reason)
    console.print(table)
    console.print(f"stored in {result['stored_in']}; {target.name} now uses the best figures")
    return result


@click.command("devices")
@click.option("--show", metavar="NAME", help="Print one profile in full, with every source.")
@click.option("--calibrate", "run_calibration", is_flag=True,
              help="Measure this machine's GEMM FLOP/s and memory bandwidth (about 10 s) "
                   "for its generic profile.")
@click.option("--json", "json_path", metavar="FILE", type=JSON_FILE,
              help="Also write the result as a JSON report to FILE.")
def devices(show: str | None, run_calibration: bool, json_path: str | None) -> None:
    """List device profiles; mark the one detected here."""
    if show is not None:
        load_profile(show)  # an unknown name fails now, not after a calibration
    body: dict[str, Any] = {}
    if run_calibration:
        body["calibration"] = _run_calibration(detect_profile())
    detected = detect_profile()
    if show is not None:
        shown = detected if show == detected.name else load_profile(show)
        _print_details(shown)
        profiles = [shown]
    else:
        profiles = [detected if p.name == detected.name else p for p in list_profiles()]
        if not run_calibration:
            _print_table(profiles, detected)
    body = {"detected": detected.name,
            "profiles": [{**profile_to_dict(p), "source": profile_source(p)} for p in profiles],
            **body}
    write_json(json_path, report_document("devices", body))
