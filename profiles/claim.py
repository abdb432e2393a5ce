"""Is this machine the device a profile describes? ``--device NAME`` claims that it is.

Timings, memory and energy are always this machine's, whatever profile names them: measured on
an x86 VM under ``jetson-nano`` they would be reported as a Nano's, beside the Nano's peaks and
power budget. So a claimed profile is checked against what identifies this machine, by the
sources that detect it (``detect.py``): a Jetson's device tree or L4T release line, the NVIDIA
GPU's NVML name, the CPU architecture, under the root the energy sensors are read from (a
container that mounts the host's filesystem elsewhere checks the host). A mismatch is refused
in one line. ``--as-device NAME``
says plainly that this machine's figures are to be labelled with another profile (a fleet
rehearsed on one box); the report then names the machine they came from, and its peaks and
energy are this machine's (``measured_on``), never the other device's datasheet.
"""
from __future__ import annotations

import fnmatch
import platform
from pathlib import Path

from edgekit.errors import UsageError
from edgekit.profiles import detect
from edgekit.profiles.device_profile import DeviceProfile

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
_JETSON_KEYS = ("device_tree_model", "nv_tegra_release")


def _arch(name: str) -> str:
    return _ARCH_ALIASES.get(name.lower(), name.lower())


def _matches(patterns: tuple[str, ...], value: str) -> bool:
    return any(fnmatch.fnmatchcase(value.lower(), p.lower()) for p in patterns)


def check_runnable(profile: DeviceProfile) -> None:
    """A neuromorphic profile is a cost table, not a device a model runs (or is exported) on."""
    if profile.kind == "neuromorphic":
        raise UsageError(f"{profile.name} is a neuromorphic cost table, not a device edgekit "
                         f"can run a model on",
                         hint=f"price a spiking net's events with 'edgekit simulate MODEL "
                              f"--chip {profile.name}'")


def mismatch(profile: DeviceProfile, root: Path = Path("/"), *, machine: str | None = None,
             gpus: list[tuple[str, int]] | None = None) -> str | None:
    """Why this machine is not a ``profile`` device, or None when it is one.

    Any of the profile's own detection patterns may match (the Super dev kit is still an Orin
    Nano); a profile without patterns for its kind (a user's file) needs the kind's identity
    (a Jetson device tree, an NVIDIA GPU); a CPU profile needs its architecture. ``root``,
    ``machine`` and ``gpus`` stand in for ``/``, ``platform.machine()`` and NVML, as in
    ``detect_profile``.
    """
    if profile.kind == "jetson":
        identity = dict(detect.jetson_identity(root))
        if not identity:
            return "it has no Jetson device tree (/proc/device-tree/model, /etc/nv_tegra_release)"
        keys = [k for k in _JETSON_KEYS if profile.detect.get(k) and k in identity]
        if keys and not any(_matches(profile.detect[k], identity[k]) for k in keys):
            return f"it is a '{next(iter(identity.values()))}'"
        return None  # the device tree names the module, and so its (Arm) CPU
    if profile.kind == "gpu":  # the GPU is what is measured: its host's CPU does not matter
        names = [name for name, _ in (detect.nvml_gpus() if gpus is None else gpus)]
        if not names:
            return "NVML finds no NVIDIA GPU"
        patterns = profile.detect.get("nvml_name")
        if patterns and not _matches(patterns, names[0]):  # edgekit measures the first GPU
            return f"its GPU is an '{names[0]}'"
        return None
    arch = _arch(machine or platform.machine())
    if _arch(profile.arch) != arch:
        return f"its CPU is {arch}, the profile's is {profile.arch}"
    return None


def measured_on(profile: DeviceProfile, *, as_device: bool, root: Path = Path("/"),
                machine: str | None = None) -> DeviceProfile | None:
    """The profile whose figures a run under ``profile`` really has: None when this machine is
    a ``profile`` device; this machine's detected profile when it is not and ``as_device`` says
    so; a one-line refusal otherwise."""
    check_runnable(profile)
    why = mismatch(profile, root, machine=machine)
    if why is None:
        return None
    if not as_device:
        raise UsageError(f"this machine is not a {profile.name} ({profile.kind}): {why}",
                         hint=f"leave out --device to measure under the detected profile, or "
                              f"say --as-device {profile.name} to label this machine's "
                              f"figures with it")
    return detect.detect_profile(root, machine=machine)
