"""The measurement window every energy meter shares, and the result it returns.

A meter reads its sensor at ``begin()``, on a background thread every ``interval_s`` while the
window is open, and once more at ``end()`` (zeus's begin/end window). Reading during the window,
not only at its ends, is what lets RAPL count counter wrap-arounds and lets power-only sensors
(INA3221, NVML power) be integrated over time. Subclasses implement three hooks: ``_begin``,
``_read`` and ``_result``; the base class owns the thread, the lock and the state checks.
"""
from __future__ import annotations

import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgekit.errors import SensorError, UsageError

Clock = Callable[[], float]


@dataclass(frozen=True)
class EnergyMeasurement:
    """Energy over one window. ``source`` says how it was obtained; estimates are never measured."""

    energy_j: float  # joules over the window; NaN when nothing could be measured or estimated
    duration_s: float  # seconds of the window, by the meter's clock
    source: str  # "measured: rapl", "measured: ina3221/VDD_IN", "estimated: tdp", ...
    measured: bool  # False for estimates and for "unavailable", always
    samples: int  # sensor reads taken in the window, begin and end included
    components: dict[str, float] = field(default_factory=dict)  # per zone/rail/GPU, joules
    note: str | None = None  # the assumption behind an estimate, or why a fallback was taken

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN (no figure) becomes None, since JSON has no NaN."""
        data = asdict(self)
        data["avg_power_w"] = self.avg_power_w
        for key in ("energy_j", "avg_power_w"):
            if math.isnan(data[key]):
                data[key] = None
        return data


@dataclass
class Window:
    """What ``EnergyMeter.window()`` yields; ``result`` is filled in when the block exits."""

    result: EnergyMeasurement | None = None


class PowerIntegral:
    """Trapezoidal integral of power readings (mW) over their timestamps (s), in joules."""

    def __init__(self) -> None:
        self.energy_j = 0.0
        self._last: tuple[float, float] | None = None

    def add(self, t_s: float, power_mw: float) -> None:
        if self._last is not None:
            last_t, last_mw = self._last
            self.energy_j += (last_mw + power_mw) / 2 * (t_s - last_t) / 1000
        self._last = (t_s, power_mw)


class EnergyMeter(ABC):
    """One sensor, one window at a time. ``source`` names the method the meter intends to use;
    the returned measurement's ``source`` is the one that was actually used."""

    source: str
    samples_in_background = True  # False for meters that read no sensor (estimates)

    def __init__(self, *, interval_s: float, clock: Clock = time.perf_counter) -> None:
        if not interval_s > 0:
            raise UsageError(f"energy sampling interval must be positive, got {interval_s}")
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None
        self._open = False
        self._t0 = 0.0
        self._samples = 0

    # -- the hooks a sensor implements ------------------------------------------------------

    @abstractmethod
    def _begin(self, now: float) -> None:
        """Reset the accumulators and take the first reading at time ``now``."""

    @abstractmethod
    def _read(self, now: float) -> None:
        """Take one reading at time ``now`` and accumulate it (called under the lock)."""

    @abstractmethod
    def _result(self, duration_s: float, samples: int) -> EnergyMeasurement:
        """The window's measurement, after the final reading."""

    def _close(self) -> None:  # noqa: B027  (optional hook; no-op unless overridden)
        """Release the sensor (NVML handle); most sensors hold nothing."""

    # -- the window ---------------------------------------------------------------------------

    def begin(self) -> None:
        """Read the sensor once and start the background sampler."""
        if self._open:
            raise UsageError("energy window already open", hint="call end() before begin()")
        with self._lock:
            self._error = None
            self._t0 = self._clock()
            self._begin(self._t0)
            self._samples = 1
        self._open = True
        if self.samples_in_background:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name=f"edgekit-energy-{type(self).__name__}", daemon=True
            )
            self._thread.start()

    def sample(self) -> None:
        """One reading, accumulated; the sampler thread calls this every ``interval_s``."""
        if not self._open:
            raise UsageError("energy meter sampled outside a window", hint="call begin() first")
        with self._lock:
            self._read(self._clock())
            self._samples += 1

    def end(self) -> EnergyMeasurement:
        """Stop the sampler, read once more, and return the window's energy."""
        if not self._open:
            raise UsageError("energy window ended before it began", hint="call begin() first")
        self._abandon()
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, SensorError):
                raise error
            raise SensorError(f"energy sampler failed: {type(error).__name__}: {error}") from error
        with self._lock:
            t1 = self._clock()
            self._read(t1)
            self._samples += 1
            return self._result(t1 - self._t0, self._samples)

    @contextmanager
    def window(self) -> Iterator[Window]:
        """``with meter.window() as w: ...`` then ``w.result``; an error inside discards it."""
        holder = Window()
        self.begin()
        try:
            yield holder
        except BaseException:
            self._abandon()
            raise
        holder.result = self.end()

    def close(self) -> None:
        """Stop any sampler still running and release the sensor."""
        self._abandon()
        self._close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception as exc:  # kept, and raised from end() as a SensorError
                self._error = exc
                return

    def _abandon(self) -> None:
        """Close the window without a result: stop and join the sampler thread."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._open = False


def read_sysfs(path: Path, permission_hint: str | None = None) -> str:
    """A sysfs file's text; any failure is a SensorError naming the file."""
    try:
        return path.read_text().strip()
    except PermissionError as exc:
        raise SensorError(f"cannot read {path}: permission denied", hint=permission_hint) from exc
    except FileNotFoundError as exc:
        raise SensorError(f"cannot read {path}: no such file") from exc
    except OSError as exc:
        raise SensorError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_sysfs_int(path: Path, permission_hint: str | None = None) -> int:
    """A sysfs file holding one integer (energy in uJ, voltage in mV, current in mA, ...)."""
    text = read_sysfs(path, permission_hint)
    try:
        return int(text)
    except ValueError:
        raise SensorError(f"cannot read {path}: expected an integer, found {text[:40]!r}") from None
