"""The device profile: what edgekit knows about a device, every figure with its source.

A profile is loaded from one TOML file in this folder (see ``loader.py``); this module only
defines the typed, frozen object the rest of edgekit reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEVICE_KINDS = ("jetson", "gpu", "cpu", "neuromorphic")
SENSOR_KINDS = ("ina3221", "nvml", "rapl", "none")
# What a neuromorphic profile's [energy] table prices, each in pJ per event in the TOML file.
ENERGY_EVENTS = ("synaptic_op", "neuron_update_active", "neuron_update_inactive",
                 "spike_within_tile", "tile_hop_ew", "tile_hop_ns")


@dataclass(frozen=True)
class PowerSensor:
    """Where the device's power sensors live and which rail is the total (never a sub-rail sum)."""

    kind: str  # one of SENSOR_KINDS
    total_rail: str | None = None  # e.g. "VDD_IN" (JetPack 5/6) or "POM_5V_IN" (JetPack 4)


@dataclass(frozen=True)
class PowerMode:
    name: str  # e.g. "15W", "MAXN_SUPER"
    watts: float  # module power budget of this mode


@dataclass(frozen=True)
class DeviceProfile:
    name: str  # file stem, the CLI name: "jetson-orin-nano-8gb"
    display_name: str
    kind: str  # one of DEVICE_KINDS
    arch: str  # "aarch64" | "x86_64"; a neuromorphic chip's architecture ("loihi")
    peak_flops: dict[str, float]  # precision -> dense peak in FLOP/s (int8: OP/s)
    memory_bytes: int | None  # None: a generic profile not (yet) read from this machine
    memory_bandwidth_bytes_s: float | None
    storage_bandwidth_bytes_s: float | None
    tdp_w: float | None  # power of the default mode, the basis of "estimated: tdp"
    idle_power_w: float | None
    power_modes: tuple[PowerMode, ...]
    default_power_mode: str | None
    power_sensor: PowerSensor
    preferred_backends: tuple[str, ...]
    preferred_precisions: tuple[str, ...]
    cpu_cores: int | None
    sources: dict[str, str]  # field -> citation (datasheet, URL, "measured: edgekit calibrate")
    detect: dict[str, tuple[str, ...]] = field(default_factory=dict)  # how to recognise it
    core_power_w: float | None = None  # generic CPUs: assumed watts per core, for estimates
    energy_per_event_j: dict[str, float] = field(default_factory=dict)  # neuromorphic: event -> J
    generic: bool = False  # no datasheet: cores/memory read from the machine, peaks calibrated
    calibrated: bool = False  # peaks/bandwidth come from `edgekit devices --calibrate`
    path: Path | None = None

    def peak_for(self, precision: str) -> float | None:
        """Peak FLOP/s for ``precision``, or None where the profile has no figure for it."""
        return self.peak_flops.get(precision)

    def power_mode(self, name: str | None = None) -> PowerMode | None:
        wanted = name or self.default_power_mode
        return next((m for m in self.power_modes if m.name == wanted), None)
