"""NVIDIA GPU energy through NVML: the total-energy counter, or polled power where it is too coarse.

``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded, Volta and newer) is the
better figure, but it only advances every 20-100 ms, so over a short window its two reads can be
off by up to one update period each. The meter therefore polls power (mW) on its thread in every
window and decides at ``end()``: the counter when the window lasted at least
``min_counter_window_s`` (1 s: the error is then at most ~10 %) and the counter advanced;
otherwise the trapezoidal integral of the polled power, with the reason in the note.

The polled power is the instantaneous field ``NVML_FI_DEV_POWER_INSTANT``
(``nvmlDeviceGetFieldValues``), as zeus 0.9+ reads it: on Ampere and newer
``nvmlDeviceGetPowerUsage`` is an average over the last second, which smears a short window over
the idle time before it (a 0.3 s window read 68 % low). Where the driver does not support the
field, a short window is read from the counter all the same (Volta and newer have one, and zeus
reads it), since its update granularity errs far less than a 1 s average; only a GPU with
neither (before Volta), or a counter that did not advance, falls back to polling
``nvmlDeviceGetPowerUsage``, and a window shorter than its averaging period then carries a
``warning``. The source says which was used: ``measured: nvml/energy counter``,
``measured: nvml/instant power`` or ``measured: nvml/average power``.

The meter shuts down only an NVML session it started: a handle (or device) the caller passes in
stays open when the meter is closed.

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

COUNTER_SOURCE = "measured: nvml/energy counter"
INSTANT_SOURCE = "measured: nvml/instant power"
AVERAGE_SOURCE = "measured: nvml/average power"
AVERAGE_PERIOD_S = 1.0  # nvmlDeviceGetPowerUsage averages over this on Ampere and newer


class NvmlDevice(Protocol):
    """The NVML calls the meter needs, for one GPU."""

    def total_energy_mj(self) -> int | None:
        """Energy counter in mJ, or None where this GPU has none (before Volta)."""

    def instant_power_mw(self) -> int | None:
        """Instantaneous board power in mW, or None where the driver lacks the field."""

    def power_mw(self) -> int:
        """Board power in mW from nvmlDeviceGetPowerUsage (a 1 s average on Ampere and newer)."""

    def close(self) -> None: ...


def _import_pynvml() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise MissingDependencyError(
            "NVML energy measurement needs nvidia-ml-py", hint="pip install edgekit[gpu]"
        ) from None


class PynvmlDevice:
    """``NvmlDevice`` backed by pynvml (package nvidia-ml-py); every NVML error is a SensorError.

    ``handle``: a device handle from the caller's own NVML session; then this object neither
    starts NVML nor shuts it down."""

    def __init__(self, index: int = 0, *, handle: Any = None) -> None:
        self._nvml = _import_pynvml()
        self._owns_session = handle is None
        self._handle: Any = handle
        if handle is not None:
            return
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise SensorError(
                f"NVML could not start: {exc}",
                hint="NVML needs an NVIDIA GPU and its driver",
            ) from exc
        try:
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
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

    def instant_power_mw(self) -> int | None:
        nvml = self._nvml
        field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)  # nvidia-ml-py 12.535+
        unsupported = (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                       nvml.NVML_ERROR_INVALID_ARGUMENT)  # an older driver: unknown field id
        if field is None:
            return None
        try:
            value = nvml.nvmlDeviceGetFieldValues(self._handle, [field])[0]
        except nvml.NVMLError as exc:
            if exc.value in unsupported:
                return None
            raise SensorError(f"NVML instant power read failed: {exc}") from exc
        if value.nvmlReturn in unsupported:
            return None
        if value.nvmlReturn != nvml.NVML_SUCCESS:
            raise SensorError(f"NVML instant power read failed: {nvml.NVMLError(value.nvmlReturn)}")
        return int(value.value.uiVal)

    def power_mw(self) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetPowerUsage(self._handle))
        except self._nvml.NVMLError as exc:
            raise SensorError(f"NVML power read failed: {exc}") from exc

    def close(self) -> None:
        """Shut NVML down if this object started it (reference-counted: once per nvmlInit)."""
        if self._handle is not None and self._owns_session:
            self._nvml.nvmlShutdown()
        self._handle = None


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
    """One GPU's energy: the NVML counter for windows it can resolve, polled power otherwise.

    ``handle``: an NVML device handle from the caller's session, or ``device``: a ready
    ``NvmlDevice``; the meter closes neither. Without them it opens GPU ``device_index`` itself
    and shuts NVML down on ``close()``."""

    def __init__(
        self,
        device_index: int = 0,
        *,
        device: NvmlDevice | None = None,
        handle: Any = None,
        interval_s: float = 0.05,
        clock: Clock = time.perf_counter,
        min_counter_window_s: float = 1.0,
    ) -> None:
        super().__init__(interval_s=interval_s, clock=clock)
        self.device_index = device_index
        self.min_counter_window_s = min_counter_window_s
        self._owns_device = device is None
        if device is None:
            device = PynvmlDevice(device_index, handle=handle)
        self._device = device
        try:  # trial read: fails here, not mid-profile
            self.has_counter = self._device.total_energy_mj() is not None
            self.has_instant = self._device.instant_power_mw() is not None
            if not self.has_instant:
                self._device.power_mw()
        except SensorError:
            self._close()
            raise
        self.polling_source = INSTANT_SOURCE if self.has_instant else AVERAGE_SOURCE
        self.source = COUNTER_SOURCE if self.has_counter else self.polling_source
        self._averaged = not self.has_instant
        self._integral = PowerIntegral()
        self._counter = CounterTrace()
        self._first_mj = self._last_mj = 0

    def _begin(self, now: float) -> None:
        self._integral = PowerIntegral()
        self._counter = CounterTrace()
        self._averaged = not self.has_instant
        self._read(now)
        self._first_mj = self._last_mj

    def _read(self, now: float) -> None:
        if self.has_counter:
            energy_mj = self._device.total_energy_mj()
            # a counter that stops answering mid-window reads as "did not advance" -> polling
            self._last_mj = self._first_mj if energy_mj is None else energy_mj
            self._counter.add(now, self._last_mj)
        power_mw = self._device.instant_power_mw() if self.has_instant else None
        if power_mw is None:  # no instant field, or it stopped answering: the averaged power
            self._averaged = True
            power_mw = self._device.power_mw()
        self._integral.add(now, power_mw)

    def _fallback_reason(self, duration_s: float) -> str | None:
        """Why the counter cannot be used for this window, or None when it can."""
        if not self.has_counter:
            return "this GPU has no energy counter (before Volta); polled power was integrated"
        if duration_s < self.min_counter_window_s and not self._averaged:  # instant power beats it
            return (
                f"window of {duration_s:.3g} s is shorter than {self.min_counter_window_s:g} s and "
                "the energy counter advances only every 20-100 ms; polled power was integrated"
            )
        if self._last_mj <= self._first_mj:
            return "the energy counter did not advance over the window; polled power was integrated"
        return None

    def _result(self, duration_s: float, samples: int) -> EnergyMeasurement:
        reason = self._fallback_reason(duration_s)
        warning = None
        if reason is None and self._whole:
            energy_j, source = (self._last_mj - self._first_mj) / 1000, COUNTER_SOURCE
        elif reason is None:
            energy_j, source = self._counter.between(*self._span) / 1000, COUNTER_SOURCE
        else:
            energy_j = self._charge(self._integral)
            source = AVERAGE_SOURCE if self._averaged else INSTANT_SOURCE
            if self._averaged:
                reason = (f"{reason}; nvmlDeviceGetPowerUsage was polled, as the driver gives no "
                           "instantaneous power field: on Ampere and newer it is a 1 s average")
        if source == COUNTER_SOURCE and duration_s < self.min_counter_window_s:
            reason = (f"window of {duration_s:.3g} s read from the energy counter (it advances "
                      f"every 20-100 ms): the driver gives no instantaneous power field, and "
                      f"nvmlDeviceGetPowerUsage averages over {AVERAGE_PERIOD_S:g} s")
        if source == AVERAGE_SOURCE and duration_s < AVERAGE_PERIOD_S:
            warning = (f"window of {duration_s:.3g} s is shorter than the {AVERAGE_PERIOD_S:g} s "
                       f"that nvmlDeviceGetPowerUsage averages over on Ampere and newer: the "
                       f"figure mixes in the power before the window; profile for longer "
                       f"(--duration)")
        return EnergyMeasurement(
            energy_j=energy_j,
            duration_s=duration_s,
            source=source,
            measured=True,
            samples=samples,
            components={f"gpu{self.device_index}": energy_j},
            note=reason,
            warning=warning,
        )

    def _attribution(self, result: EnergyMeasurement) -> str:
        if result.source == COUNTER_SOURCE:
            return ("energy counter interpolated linearly at the timed interval's ends, between "
                    "the reads around each end")
        return super()._attribution(result)

    def _close(self) -> None:
        if self._owns_device:  # never what the caller passed in
            self._device.close()


register_meter(MeterSpec(name="nvml", priority=20, sensor=True, probe=lambda root: available(),
                         open=lambda profile, root, options: NvmlMeter(**options)))
