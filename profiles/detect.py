"""Which device is this? A Jetson by its device tree, a GPU by NVML, else the CPU by architecture.

Each profile's ``[detect]`` table lists glob patterns (case-insensitive) per source of identity.
The most specific match wins (most literal characters), so ``*Orin Nano*Super*`` beats
``*Orin Nano*``, and a profile whose pattern is ``*`` is the fallback for its source.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import platform
from collections.abc import Iterator
from pathlib import Path

import psutil

from edgekit.errors import UsageError
from edgekit.profiles.device_profile import DeviceProfile
from edgekit.profiles.loader import list_profiles

_FROM_MACHINE = "read from this machine"


def best_match(profiles: list[DeviceProfile], key: str, value: str) -> DeviceProfile | None:
    """The profile whose ``detect[key]`` pattern matches ``value`` most specifically."""
    best, best_score = None, -1
    for profile in profiles:
        for pattern in profile.detect.get(key, ()):
            if fnmatch.fnmatchcase(value.lower(), pattern.lower()):
                score = len(pattern) - pattern.count("*") - pattern.count("?")
                if score > best_score:
                    best, best_score = profile, score
    return best


def _read_text(path: Path) -> str | None:
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    return raw.decode("utf-8", "replace").replace("\x00", " ").strip() or None


def jetson_identity(root: Path) -> Iterator[tuple[str, str]]:
    """The device-tree model (names the module), then the L4T release line (names the SoC)."""
    model = _read_text(root / "proc/device-tree/model")
    if model:
        yield "device_tree_model", model
    release = _read_text(root / "etc/nv_tegra_release")
    if release:
        yield "nv_tegra_release", release.splitlines()[0]


def nvml_gpus() -> list[tuple[str, int]]:
    """(name, memory bytes) of each NVIDIA GPU; [] without pynvml or a working driver."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name  # bytes before 11.5
            gpus.append((name, int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)))
        return gpus
    except pynvml.NVMLError:
        return []
    finally:
        pynvml.nvmlShutdown()


def _with_this_cpu(profile: DeviceProfile) -> DeviceProfile:
    """A generic CPU profile has no datasheet: its cores and memory are this machine's."""
    sources = {**profile.sources,
               "cpu_cores": f"{_FROM_MACHINE} (os.cpu_count, logical CPUs)",
               "memory.size_gib": f"{_FROM_MACHINE} (psutil.virtual_memory)"}
    cores = os.cpu_count() or 1
    tdp = profile.tdp_w
    if tdp is None and profile.core_power_w is not None:
        tdp = profile.core_power_w * cores  # an assumption, shown as such in every estimate
        sources["power.tdp_w"] = (f"assumed: {cores} cores x {profile.core_power_w:g} W/core "
                                  f"({sources.get('power.core_w', 'profile figure')})")
    return dataclasses.replace(profile, cpu_cores=cores, tdp_w=tdp,
                               memory_bytes=psutil.virtual_memory().total, sources=sources)


def _with_this_gpu(profile: DeviceProfile, gpu_name: str, memory_bytes: int) -> DeviceProfile:
    sources = {**profile.sources, "memory.size_gib": f"{_FROM_MACHINE} (NVML, {gpu_name})"}
    return dataclasses.replace(profile, display_name=f"{profile.display_name}: {gpu_name}",
                               memory_bytes=memory_bytes, sources=sources)


def detect_profile(root: Path = Path("/"), *, machine: str | None = None) -> DeviceProfile:
    """The profile of the machine this runs on.

    ``root`` relocates the Jetson files (tests rebuild them in a temporary folder); ``machine``
    replaces ``platform.machine()``. Only the first NVIDIA GPU is considered: edgekit measures
    on one device.
    """
    profiles = list_profiles()
    for key, value in jetson_identity(root):
        match = best_match(profiles, key, value)
        if match is not None:
            return match
    for gpu_name, memory_bytes in nvml_gpus()[:1]:
        match = best_match(profiles, "nvml_name", gpu_name)
        if match is not None:
            return _with_this_gpu(match, gpu_name, memory_bytes) if match.generic else match
    arch = machine or platform.machine()
    match = best_match(profiles, "machine", arch)
    if match is None:
        names = ", ".join(p.name for p in profiles)
        raise UsageError(f"no device profile matches this machine ({arch})",
                         hint=f"name one with --device; valid: {names}")
    return _with_this_cpu(match) if match.generic else match
