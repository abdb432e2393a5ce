"""Device profiles from the TOML files in this folder and the user's: load, validate, list.

A user adds a device with one TOML file in ``$EDGEKIT_HOME/profiles`` (see ``user_profile_dir``),
checked exactly as the packaged ones are. A user file may not take a packaged profile's name: the
packaged profiles cite a datasheet for every figure, and reports name the profile they were
measured against, so two different files answering to one name would make two reports that
claim the same device disagree. Such a clash is refused in one line naming both files (rename
the user's copy, e.g. ``jetson-nano-mine``); ``profile_source`` tells which folder a profile
came from, and ``edgekit devices`` shows it.

The files keep the datasheets' units (TFLOP/s, TOPS, GiB, GB/s, W) so a reader can check each
figure against its source; the loader converts them to FLOP/s and bytes once, here. Validation is
strict, unknown keys included, because a typo in a profile would otherwise silently turn a figure
into "unknown". Generic profiles (no datasheet) get the figures that ``calibrate`` stored.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from edgekit.backends.registry import backend_names
from edgekit.errors import ProfileError, ProfileWarning, UnknownNameError, UsageError
from edgekit.paths import edgekit_home
from edgekit.precisions import all_names
from edgekit.profiles.device_profile import (
    DEVICE_KINDS,
    ENERGY_EVENTS,
    SENSOR_KINDS,
    DeviceProfile,
    PowerMode,
    PowerSensor,
)
from edgekit.schema import ANY_OBJECT, NUMBER, STR, MapOf, Object, Optional, check

PROFILE_DIR = Path(__file__).resolve().parent
CALIBRATION_FILE = "calibration.json"
ARCHES = ("x86_64", "aarch64")
NEUROMORPHIC_ARCHES = ("loihi",)
DETECT_KEYS = ("device_tree_model", "nv_tegra_release", "nvml_name", "machine")

_FIELDS = {
    "": ("name", "display_name", "kind", "arch", "generic", "cpu_cores", "preferred_backends",
         "preferred_precisions", "peak", "memory", "storage", "power", "detect", "energy",
         "sources"),
    "memory.": ("size_gib", "bandwidth_gbs"),
    "storage.": ("bandwidth_gbs",),
    "power.": ("modes", "default_mode", "tdp_w", "idle_w", "core_w", "sensor"),
    "power.sensor.": ("kind", "total_rail"),
    "energy.": tuple(f"{event}_pj" for event in ENERGY_EVENTS),
}
_TERA, _GIGA, _GIB, _PICO = 1e12, 1e9, 2**30, 1e-12
_CALIBRATE_HINT = "delete it and run 'edgekit devices --calibrate' again"


def _error(path: Path, field: str, problem: str) -> ProfileError:
    return ProfileError(f"{path}: field '{field}' {problem}")


def _check_keys(path: Path, table: dict[str, Any], prefix: str) -> None:
    known = _FIELDS[prefix]
    for key in table:
        if key not in known:
            raise _error(path, prefix + key, f"is not a known field (known: {', '.join(known)})")


def _table(path: Path, parent: dict[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
    value = parent.get(key, {})
    if not isinstance(value, dict):
        raise _error(path, prefix + key, f"must be a table, got {value!r}")
    return value


def _string(path: Path, table: dict[str, Any], key: str, prefix: str = "",
            required: bool = True, choices: tuple[str, ...] | None = None) -> str | None:
    value = table.get(key)
    if value is None:
        if required:
            raise _error(path, prefix + key, "is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise _error(path, prefix + key, f"must be a non-empty string, got {value!r}")
    if choices is not None and value not in choices:
        raise _error(path, prefix + key, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def _positive(path: Path, field: str, value: Any, integer: bool = False) -> float:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value < math.inf:
        what = "a positive integer" if integer else "a positive number"
        raise _error(path, field, f"must be {what}, got {value!r}")
    return value


def _number(path: Path, table: dict[str, Any], key: str, prefix: str = "",
            required: bool = False) -> float | None:
    if key not in table:
        if required:
            raise _error(path, prefix + key, "is required")
        return None
    return float(_positive(path, prefix + key, table[key]))


def _strings(path: Path, table: dict[str, Any], key: str, prefix: str = "",
             choices: tuple[str, ...] | None = None) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _error(path, prefix + key, f"must be a list of non-empty strings, got {value!r}")
    for item in value:
        if choices is not None and item not in choices:
            raise _error(path, prefix + key,
                         f"entries must be among {', '.join(choices)}, got {item!r}")
    return tuple(value)


def _peaks(path: Path, data: dict[str, Any], generic: bool,
           neuromorphic: bool = False) -> dict[str, float]:
    peak = _table(path, data, "peak")
    if neuromorphic:
        if peak:
            raise _error(path, "peak", "must be absent in a neuromorphic profile (it has no "
                         "FLOP/s peak; its costs are per event, in [energy])")
        return {}
    if generic and peak:
        raise _error(path, "peak", "must be absent in a generic profile "
                     "(its peaks come from 'edgekit devices --calibrate')")
    if not generic and not peak:
        raise _error(path, "peak", "is required: at least one precision's datasheet peak")
    for precision, value in peak.items():
        if precision not in all_names():
            raise _error(path, f"peak.{precision}",
                         f"is not a known precision (known: {', '.join(all_names())})")
        _positive(path, f"peak.{precision}", value)
    return {precision: value * _TERA for precision, value in peak.items()}


def _power(path: Path, data: dict[str, Any]) -> tuple[tuple[PowerMode, ...], str | None,
                                                     float | None, float | None, float | None,
                                                     PowerSensor]:
    power = _table(path, data, "power")
    _check_keys(path, power, "power.")
    modes_table = _table(path, power, "modes", "power.")
    modes = tuple(PowerMode(name, float(_positive(path, f"power.modes.{name}", watts)))
                  for name, watts in modes_table.items())
    default = _string(path, power, "default_mode", "power.", required=bool(modes))
    if default is not None and default not in modes_table:
        names = ", ".join(modes_table) or "(none)"
        raise _error(path, "power.default_mode",
                     f"must name one of the power modes ({names}), got {default!r}")
    tdp = _number(path, power, "tdp_w", "power.")
    if tdp is not None and modes:
        raise _error(path, "power.tdp_w", "must be absent when power modes are given "
                     "(the TDP is the default mode's watts)")
    if modes:
        tdp = float(modes_table[default])
    if "sensor" not in power:
        raise _error(path, "power.sensor", "is required (use kind = \"none\" for no sensor)")
    sensor_table = _table(path, power, "sensor", "power.")
    _check_keys(path, sensor_table, "power.sensor.")
    sensor = PowerSensor(
        kind=_string(path, sensor_table, "kind", "power.sensor.", choices=SENSOR_KINDS),
        total_rail=_string(path, sensor_table, "total_rail", "power.sensor.", required=False),
    )
    return (modes, default, tdp, _number(path, power, "idle_w", "power."),
            _number(path, power, "core_w", "power."), sensor)


def _energy(path: Path, data: dict[str, Any], neuromorphic: bool) -> dict[str, float]:
    """A neuromorphic chip's energy per event, pJ in the file, joules in the profile."""
    table = _table(path, data, "energy")
    if not neuromorphic:
        if table:
            raise _error(path, "energy", "is only for kind = \"neuromorphic\" profiles")
        return {}
    _check_keys(path, table, "energy.")
    if "synaptic_op_pj" not in table:
        raise _error(path, "energy.synaptic_op_pj", "is required in a neuromorphic profile")
    return {key[:-3]: _positive(path, f"energy.{key}", value) * _PICO
            for key, value in table.items()}


def _detect(path: Path, data: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    table = _table(path, data, "detect")
    for key in table:
        if key not in DETECT_KEYS:
            raise _error(path, f"detect.{key}",
                         f"is not a known detection source (known: {', '.join(DETECT_KEYS)})")
    return {key: _strings(path, table, key, "detect.") for key in table}


def _sources(path: Path, data: dict[str, Any], cited: list[str]) -> dict[str, str]:
    """Every figure cites its source, and every citation belongs to a figure the file has."""
    sources = _table(path, data, "sources")
    for key, value in sources.items():
        if isinstance(value, dict):
            raise _error(path, f"sources.{key}", "must be a string: quote dotted keys, "
                         f"\"{key}.{next(iter(value), '...')}\" = \"...\"")
        if not isinstance(value, str) or not value.strip():
            raise _error(path, f"sources.{key}", f"must be a non-empty string, got {value!r}")
        if key not in cited:
            raise _error(path, f"sources.{key}", "cites a figure the profile does not have")
    for field in cited:
        if field not in sources:
            raise _error(path, field, f"has no source (add \"{field}\" = \"...\" to [sources])")
    return dict(sources)


def _parse(path: Path) -> DeviceProfile:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:  # tomllib decodes UTF-8 itself and lets this through
        raise ProfileError(f"{path}: invalid TOML: not UTF-8 text ({exc.reason} at byte "
                           f"{exc.start})") from exc
    except RecursionError as exc:  # tables or arrays nested thousands deep
        raise ProfileError(f"{path}: invalid TOML: nested too deeply") from exc
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from exc
    _check_keys(path, data, "")
    name = _string(path, data, "name")
    if name != path.stem:
        raise _error(path, "name", f"must equal the file name '{path.stem}', got {name!r}")
    generic = data.get("generic", False)
    if not isinstance(generic, bool):
        raise _error(path, "generic", f"must be true or false, got {generic!r}")
    kind = _string(path, data, "kind", choices=DEVICE_KINDS)
    neuromorphic = kind == "neuromorphic"
    if neuromorphic and generic:
        raise _error(path, "generic", "must be false in a neuromorphic profile")
    cores = data.get("cpu_cores")
    if cores is not None:
        _positive(path, "cpu_cores", cores, integer=True)
    peak_flops = _peaks(path, data, generic, neuromorphic)
    energy = _energy(path, data, neuromorphic)
    memory = _table(path, data, "memory")
    _check_keys(path, memory, "memory.")
    size = _number(path, memory, "size_gib", "memory.", required=not (generic or neuromorphic))
    bandwidth = _number(path, memory, "bandwidth_gbs", "memory.")
    storage = _table(path, data, "storage")
    _check_keys(path, storage, "storage.")
    storage_bandwidth = _number(path, storage, "bandwidth_gbs", "storage.")
    modes, default, tdp, idle, core_w, sensor = _power(path, data)

    present = {"cpu_cores": cores, "memory.size_gib": size, "memory.bandwidth_gbs": bandwidth,
               "storage.bandwidth_gbs": storage_bandwidth, "power.modes": modes or None,
               "power.tdp_w": None if modes else tdp, "power.idle_w": idle, "power.core_w": core_w,
               "power.sensor": None if sensor.kind == "none" else sensor}
    cited = ([f"peak.{p}" for p in peak_flops] + [f"energy.{e}_pj" for e in energy]
             + [k for k, v in present.items() if v is not None])
    sources = _sources(path, data, cited)
    if modes:
        sources["power.tdp_w"] = (f"watts of the default power mode {default}; "
                                  f"{sources['power.modes']}")

    return DeviceProfile(
        name=name,
        display_name=_string(path, data, "display_name"),
        kind=kind,
        arch=_string(path, data, "arch", choices=NEUROMORPHIC_ARCHES if neuromorphic else ARCHES),
        peak_flops=peak_flops,
        memory_bytes=None if size is None else round(size * _GIB),
        memory_bandwidth_bytes_s=None if bandwidth is None else bandwidth * _GIGA,
        storage_bandwidth_bytes_s=None if storage_bandwidth is None else storage_bandwidth * _GIGA,
        tdp_w=tdp,
        idle_power_w=idle,
        power_modes=modes,
        default_power_mode=default,
        power_sensor=sensor,
        preferred_backends=_strings(path, data, "preferred_backends", choices=backend_names()),
        preferred_precisions=_strings(path, data, "preferred_precisions", choices=all_names()),
        cpu_cores=cores,
        sources=sources,
        detect=_detect(path, data),
        core_power_w=core_w,
        energy_per_event_j=energy,
        generic=generic,
        path=path,
    )


def _stamp(path: Path) -> tuple[int, int, int]:
    """What changes when a file is rewritten (atomic writes give a new inode), for the caches."""
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


@functools.lru_cache(maxsize=128)
def _parse_cached(path: Path, stamp: tuple[int, int, int]) -> DeviceProfile:
    return _parse(path)


def calibration_path() -> Path:
    return edgekit_home() / CALIBRATION_FILE


def _calibration_error(path: Path, field: str, problem: str) -> ProfileError:
    return ProfileError(f"{path}: field '{field}' {problem}", hint=_CALIBRATE_HINT)


# calibration.json's shape (edgekit.schema); what the figures mean is checked below.
_CALIBRATION_SCHEMA = Object({"profiles": MapOf(Object({
    "date": STR,
    "machine": Optional(ANY_OBJECT),
    "peak_flops": MapOf(NUMBER),
    "memory_bandwidth_bytes_s": Optional(NUMBER),
}))})


def _validate_calibration(path: Path, document: Any) -> dict[str, dict[str, Any]]:
    check(document, _CALIBRATION_SCHEMA, str(path), hint=_CALIBRATE_HINT, error=ProfileError)
    entries = document["profiles"]
    for name, entry in entries.items():
        prefix = f"profiles.{name}"
        if not entry["peak_flops"]:  # a calibration measures at least one peak
            raise _calibration_error(path, f"{prefix}.peak_flops", "holds no precision")
        numbers = {f"peak_flops.{p}": v for p, v in entry["peak_flops"].items()}
        if entry.get("memory_bandwidth_bytes_s") is not None:
            numbers["memory_bandwidth_bytes_s"] = entry["memory_bandwidth_bytes_s"]
        for field, value in numbers.items():
            if field.startswith("peak_flops.") and field.split(".", 1)[1] not in all_names():
                raise _calibration_error(path, f"{prefix}.{field}", "is not a known precision")
            if not 0 < value < math.inf:
                raise _calibration_error(path, f"{prefix}.{field}",
                                         f"must be a positive number, got {value!r}")
    return entries


@functools.lru_cache(maxsize=8)
def _read_calibration_cached(path: Path, stamp: tuple[int, int, int]) -> dict[str, dict[str, Any]]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, column "
                           f"{exc.colno})", hint=_CALIBRATE_HINT) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read: {exc}", hint=_CALIBRATE_HINT) from exc
    except RecursionError as exc:
        raise ProfileError(f"{path}: invalid JSON: nested too deeply",
                           hint=_CALIBRATE_HINT) from exc
    return _validate_calibration(path, document)


def read_calibration() -> dict[str, dict[str, Any]]:
    """Stored calibrations by profile name ({} when none); ProfileError if the file is corrupt."""
    path = calibration_path()
    try:
        stamp = _stamp(path)
    except FileNotFoundError:
        return {}
    return dict(_read_calibration_cached(path, stamp))


def _with_calibration(profile: DeviceProfile) -> DeviceProfile:
    """A fresh copy (callers may edit its dicts); generic profiles get their stored figures.

    Datasheet profiles are never changed by a calibration, even one stored under their name.
    """
    entry = read_calibration().get(profile.name) if profile.generic else None
    if entry is None:
        return dataclasses.replace(profile, peak_flops=dict(profile.peak_flops),
                                   sources=dict(profile.sources),
                                   energy_per_event_j=dict(profile.energy_per_event_j))
    host = entry.get("machine", {}).get("hostname") or "unknown host"
    cite = f"measured: edgekit devices --calibrate on {entry['date']} ({host})"
    peaks = {p: float(v) for p, v in entry["peak_flops"].items()}
    sources = {**profile.sources, **{f"peak.{p}": cite for p in peaks}}
    bandwidth = entry.get("memory_bandwidth_bytes_s")
    if bandwidth is not None:
        sources["memory.bandwidth_gbs"] = cite
    return dataclasses.replace(
        profile, peak_flops=peaks, sources=sources, calibrated=True,
        memory_bandwidth_bytes_s=float(bandwidth) if bandwidth is not None else None,
    )


def user_profile_dir() -> Path:
    """Where a user's own device profiles live: ``$EDGEKIT_HOME/profiles/*.toml``."""
    return edgekit_home() / "profiles"


def profile_source(profile: DeviceProfile) -> str:
    """"packaged", "user" (``user_profile_dir``) or "file" (loaded by path)."""
    folder = profile.path.parent.resolve() if profile.path is not None else None
    if folder == PROFILE_DIR:
        return "packaged"
    return "user" if folder == user_profile_dir().resolve() else "file"


def _skip(error: ProfileError) -> None:
    """Leave a user's profile file out of a listing, with a warning naming it."""
    warnings.warn(f"{error}; left out of the device profiles", ProfileWarning, stacklevel=1)


def _profile_files(listing: bool = False) -> dict[str, Path]:
    """Every profile file by name. A user file with a packaged profile's name is refused, or,
    when ``listing``, left out with a warning (one stray file must not stop every command)."""
    files = {path.stem: path for path in sorted(PROFILE_DIR.glob("*.toml"))}
    user_dir = user_profile_dir()
    try:
        user_files = sorted(p for p in user_dir.glob("*.toml") if p.is_file())
    except OSError as exc:  # EDGEKIT_HOME a file, or an unreadable folder
        raise ProfileError(f"cannot list user profiles in {user_dir}: {exc.strerror}",
                           hint="point EDGEKIT_HOME at a folder") from exc
    for path in user_files:
        if path.stem in files:
            error = ProfileError(f"{path}: user profile '{path.stem}' would shadow the packaged "
                                 f"{files[path.stem]}; rename the user file (and its name field)")
            if not listing:
                raise error
            _skip(error)
            continue
        files[path.stem] = path
    return files


def _resolve(name_or_path: str | os.PathLike[str]) -> Path:
    text = os.fspath(name_or_path)
    if text.endswith(".toml") or os.sep in text or (os.altsep and os.altsep in text):
        path = Path(text).expanduser()
        if not path.is_file():
            raise UsageError(f"device profile file {path} does not exist")
        return path
    files = _profile_files()
    if text not in files:
        raise UnknownNameError("device profile", text, files)
    return files[text]


def load_profile(name_or_path: str | os.PathLike[str]) -> DeviceProfile:
    """A shipped or user profile by name (``jetson-orin-nano-8gb``) or any profile file by path."""
    path = _resolve(name_or_path)
    return _with_calibration(_parse_cached(path, _stamp(path)))


def profile_names() -> list[str]:
    return sorted(_profile_files(listing=True))


def list_profiles() -> list[DeviceProfile]:
    """Every shipped and user profile, sorted by name, as device detection and the listings
    see them. A user's file that does not load is left out with a ``ProfileWarning`` naming it,
    so one broken file does not stop every command that detects the device (loading it by
    name still raises its ProfileError); a packaged file that does not load raises."""
    profiles = []
    for _, path in sorted(_profile_files(listing=True).items()):
        try:
            profiles.append(load_profile(path))
        except ProfileError as error:
            if path.parent.resolve() == PROFILE_DIR:
                raise
            _skip(error)
    return profiles


def profile_to_dict(profile: DeviceProfile) -> dict[str, Any]:
    """The profile as JSON-ready data (SI units: FLOP/s, bytes, bytes/s, W) for reports."""
    document = dataclasses.asdict(profile)
    document["path"] = str(profile.path) if profile.path is not None else None
    return document
