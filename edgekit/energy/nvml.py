"""NVIDIA GPU energy through NVML: the total-energy counter, or polled power where it is too coarse.

``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded, Volta and newer) is the
better figure, but it only advances every 20-100 ms, so over a short window its two reads can be
off by up to one update period each. The meter therefore polls ``nvmlDeviceGetPowerUsage`` (mW)
on its thread in every window and decides at ``end()``: the counter when the window lasted at
least ``min_counter_window_s`` (1 s: the error is then at most ~10 %) and the counter advanced;
otherwise the trapezoidal integral of the polled power, with the reason in the note.

NVML calls go through a small device adapter (``PynvmlDevice``), so the decision logic runs in
tests against recorded readings without a GPU. The caller synchronises the GPU before
``begin()`` and ``end()`` (zeus does the same), so the window covers the queued work.
"""
from __future__ import annotations

import importlib
import time
from typing import Any, Protocol

from edgekit.energy.base import (
    Clock,
    CounterTrace,
    EnergyMeasurement,
    EnergyMeter,
    PowerIntegral,
)
from edgekit.energy.registry import MeterSpec, register_meter
from edgekit.errors import MissingDependencyError, SensorError

COUNTER_SOURCE = "measured: nvml/total-energy"
POLLING_SOURCE = "measured: nvml/power-polling"


class NvmlDevice(Protocol):
    """The three NVML calls the meter needs, for one GPU."""

    def total_energy_mj(self) -> int | None:
        """Energy counter in mJ, or None where this GPU has none (before Volta)."""

    def power_mw(self) -> int:
        """Current board power draw in mW."""

    def close(self) -> None: ...


def _import_pynvml() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise MissingDependencyError(
            "NVML energy measurement needs nvidia-ml-py", hint="pip install edgekit[gpu]"
        ) from None


class PynvmlDevice:
    """``NvmlDevice`` backed by pynvml (package nvidia-ml-py); every NVML error is a SensorError."""

    def __init__(self, index: int = 0) -> None:
        self._nvml = _import_pynvml()
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise SensorError(
                f"NVML could not start: {exc}",
                hint="NVML needs an NVIDIA GPU and its driver",
            ) from exc
        try:
            self._handle: Any = self._nvml.nvmlDeviceGetHandleByIndex(index)
        except self._nvml.NVMLError as exc:
            self._nvml.nvmlShutdown()
            raise SensorError(f"NVML has no GPU with index {index}: {exc}") from exc

    def total_energy_mj(self) -> int | None:
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except nvml.NVMLError as exc:
            if exc.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                return None
            raise SensorError(f"NVML energy counter read failed: {exc}") from exc

    def power_mw(self) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetPowerUsage(self._handle))
        except self._nvml.NVMLError as exc:
            raise SensorError(f"NVML power read failed: {exc}") from exc

    def close(self) -> None:
        if self._handle is not None:  # nvmlShutdown is reference-counted: once per nvmlInit
            self._handle = None
            self._nvml.nvmlShutdown()


def available() -> bool:
    """Whether pynvml is installed and NVML sees at least one GPU."""
    try:
        nvml = _import_pynvml()
        nvml.nvmlInit()
    except Exception:  # no package, no driver, no GPU: all mean "not available"
        return False
    try:
        count: int = nvml.nvmlDeviceGetCount()
        return count > 0
    finally:
        nvml.nvmlShutdown()


class NvmlMeter(EnergyMeter):
    """One GPU's energy: the NVML counter for windows it can resolve, polled power otherwise."""

    def __init__(
        self,
        device_index: int = 0,
        *,
        device: NvmlDevice | None = None,
        interval_s: float = 0.05,
        clock: Clock = time.perf_counter,
        min_counter_window_s: float = 1.0,
    ) -> None:
        super().__init__(interval_s=interval_s, clock=clock)
        self.device_index = device_index
        self.min_counter_window_s = min_counter_window_s
        self._device = device if device is not None else PynvmlDevice(device_index)
        try:  # trial read: fails here, not mid-profile
            self.has_counter = self._device.total_energy_mj() is not None
            self._device.power_mw()
        except SensorError:
            self._device.close()
            raise
        self.source = COUNTER_SOURCE if self.has_counter else POLLING_SOURCE
        self._integral = PowerIntegral()
        self._counter = CounterTrace()
        self._first_mj = self._last_mj = 0

    def _begin(self, now: float) -> None:
        self._integral = PowerIntegral()
        self._counter = CounterTrace()
        self._read(now)
        self._first_mj = self._last_mj

    def _read(self, now: float) -> None:
        if self.has_counter:
            energy_mj = self._device.total_energy_mj()
            # a counter that stops answering mid-window reads as "did not advance" -> polling
            self._last_mj = self._first_mj if energy_mj is None else energy_mj
            self._counter.add(now, self._last_mj)
        self._integral.add(now, self._device.power_mw())

    def _fallback_reason(self, duration_s: float) -> str | None:
        """Why the counter cannot be used for this window, or None when it can."""
        if not self.has_counter:
            return "this GPU has no energy counter (before Volta); polled power was integrated"
        if duration_s < self.min_counter_window_s:
            return (
                f"window of {duration_s:.3g} s is shorter than {self.min_counter_window_s:g} s and "
                "the energy counter advances only every 20-100 ms; polled power was integrated"
            )
        if self._last_mj <= self._first_mj:
            return "the energy counter did not advance over the window; polled power was integrated"
        return None

    def _result(self, duration_s: float, samples: int) -> EnergyMeasurement:
        reason = self._fallback_reason(duration_s)
        if reason is None and self._whole:
            energy_j, source = (self._last_mj - self._first_mj) / 1000, COUNTER_SOURCE
        elif reason is None:
            energy_j, source = self._counter.between(*self._span) / 1000, COUNTER_SOURCE
        else:
            energy_j, source = self._charge(self._integral), POLLING_SOURCE
        return EnergyMeasurement(
            energy_j=energy_j,
            duration_s=duration_s,
            source=source,
            measured=True,
            samples=samples,
            components={f"gpu{self.device_index}": energy_j},
            note=reason,
        )

    def _attribution(self, result: EnergyMeasurement) -> str:
        if result.source == COUNTER_SOURCE:
            return ("energy counter interpolated linearly at the timed interval's ends, between "
                    "the reads around each end")
        return super()._attribution(result)

    def _close(self) -> None:
        self._device.close()


register_meter(MeterSpec(name="nvml", priority=20, sensor=True, probe=lambda root: available(),
                         open=lambda profile, root, options: NvmlMeter(**options)))
