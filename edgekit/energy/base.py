"""The measurement window every energy meter shares, and the result it returns.

A meter reads its sensor at ``begin()``, on a background thread every ``interval_s`` while the
window is open, and once more at ``end()`` (zeus's begin/end window). Reading during the window,
not only at its ends, is what lets RAPL count counter wrap-arounds and lets power-only sensors
(INA3221, NVML power) be integrated over time. Subclasses implement three hooks: ``_begin``,
``_read`` and ``_result``; the base class owns the thread, the lock and the state checks.

The window is wider than the work it measures: it also covers the first read, the sampler's start,
its join and the last read. ``end(timed=(t_start, t_end))`` (times from ``meter.clock``) charges
only the timed interval: power is integrated over exactly that interval (the trapezoids clipped to
it, power interpolated linearly at its ends), and an energy counter is interpolated linearly at its
ends between the reads around them. On a short run this is what keeps the begin/join overhead out
of the energy per inference.

Every measurement records the sampling interval it used (``interval_s``) and, where the sensor
says how often it produces a new value, that update interval (``update_interval_s``). A sensor
that keeps returning the same value (a stuck driver, a cached file) is flagged in ``warning``
by ``stale_warning``; the rule is in its docstring.
"""
from __future__ import annotations

import math
import threading
import time
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from edgekit.errors import SensorError, UsageError

Clock = Callable[[], float]
MIN_SAMPLES = 10  # fewer reads than this in a window and the figure gets a warning
STALE_CHANGE_FRACTION = 0.1  # fewer changes than this share of the sensor's updates: stale
STALE_RUN_UPDATES = 20  # one value held across more of the sensor's updates than this: stale
SLOWEST_UPDATE_S = 0.1  # sensors update at least this often (NVML 20-100 ms, INA3221 faster)


@dataclass(frozen=True)
class EnergyMeasurement:
    """Energy over one window. ``source`` says how it was obtained; estimates are never measured."""

    energy_j: float  # joules over the window; NaN when nothing could be measured or estimated
    duration_s: float  # seconds of the window, by the meter's clock
    source: str  # "measured: rapl", "measured: ina3221/VDD_IN", "estimated: tdp", ...
    measured: bool  # False for estimates and for "unavailable", always
    samples: int  # sensor reads taken in the window, begin and end included
    # Per zone/rail/GPU, joules. ``components_summed``: True when energy_j is their sum (RAPL
    # zones, a sum of rails); False when they are sub-rails of a total rail measured beside them
    # (the total is not among them, and adding them to energy_j would count them twice).
    components: dict[str, float] = field(default_factory=dict)
    components_summed: bool = True
    omitted: dict[str, str] = field(default_factory=dict)  # rail/zone -> why it was not read
    note: str | None = None  # the assumption behind an estimate, or why a fallback was taken
    warning: str | None = None  # why the figure may be off (too few samples); None when fine
    window_s: float | None = None  # the whole sampler window, when energy_j covers a timed
    # interval inside it (then duration_s is that interval); None: energy_j is the whole window
    attribution: str | None = None  # how energy_j was attributed to the timed interval
    interval_s: float | None = None  # seconds between the sampler's reads; None: no sampler
    update_interval_s: float | None = None  # seconds between the sensor's own new values,
    # where the sensor reports it (INA3221's update_interval); None: unknown

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN (no figure) becomes None, since JSON has no NaN. The optional fields
        (warning, window_s, attribution, omitted, interval_s, update_interval_s) appear only
        when set."""
        data = asdict(self)
        data["avg_power_w"] = self.avg_power_w
        for key in ("energy_j", "avg_power_w"):
            if math.isnan(data[key]):
                data[key] = None
        for key in ("warning", "window_s", "attribution", "omitted", "interval_s",
                    "update_interval_s"):
            if data[key] is None or data[key] == {}:
                del data[key]
        return data


@dataclass
class Window:
    """What ``EnergyMeter.window()`` yields; ``result`` is filled in when the block exits."""

    result: EnergyMeasurement | None = None


class PowerIntegral:
    """Trapezoidal integral of power readings (mW) over their timestamps (s), in joules.

    ``energy_j`` covers every reading; ``between(a, b)`` only [a, b], with the trapezoids clipped
    to it and the power interpolated linearly where a or b falls between two readings."""

    def __init__(self) -> None:
        self.energy_j = 0.0
        self._times: list[float] = []
        self._mw: list[float] = []

    def add(self, t_s: float, power_mw: float) -> None:
        if self._times:
            self.energy_j += (self._mw[-1] + power_mw) / 2 * (t_s - self._times[-1]) / 1000
        self._times.append(t_s)
        self._mw.append(power_mw)

    @property
    def readings(self) -> tuple[list[float], list[float]]:
        """The readings so far: (times in s, power in mW)."""
        return self._times, self._mw

    def _power_at(self, t_s: float) -> float:
        return _interpolate(self._times, self._mw, t_s)

    def between(self, a_s: float, b_s: float) -> float:
        """Joules over [a_s, b_s], which must lie within the first and last reading."""
        times, mw = self._times, self._mw
        _check_span(times, a_s, b_s)
        points = [(a_s, self._power_at(a_s))]
        points += [(t, p) for t, p in zip(times, mw, strict=True) if a_s < t < b_s]
        points.append((b_s, self._power_at(b_s)))
        return sum((p0 + p1) / 2 * (t1 - t0) / 1000
                   for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False))


class CounterTrace:
    """An energy counter's cumulative readings (in any unit) over time; ``between(a, b)`` is the
    increase over [a, b], the counter interpolated linearly at a and b between the reads around
    them (the average power of that gap, charged pro rata)."""

    def __init__(self) -> None:
        self._times: list[float] = []
        self._totals: list[float] = []

    def add(self, t_s: float, total: float) -> None:
        self._times.append(t_s)
        self._totals.append(total)

    def between(self, a_s: float, b_s: float) -> float:
        _check_span(self._times, a_s, b_s)
        return (_interpolate(self._times, self._totals, b_s)
                - _interpolate(self._times, self._totals, a_s))


def _check_span(times: list[float], a_s: float, b_s: float) -> None:
    if not times or not times[0] <= a_s <= b_s <= times[-1]:
        span = f"{times[0]:.6f}..{times[-1]:.6f}" if times else "no readings"
        raise UsageError(f"timed interval {a_s:.6f}..{b_s:.6f} s is not inside the energy "
                         f"window ({span})",
                         hint="take the interval's times from meter.clock, between begin() "
                              "and end()")


def _interpolate(times: list[float], values: list[float], t_s: float) -> float:
    """``values`` at ``t_s``, linear between the readings around it (times ascending)."""
    i = bisect_right(times, t_s)
    if i == 0:
        return values[0]
    if i == len(times):
        return values[-1]
    t0, t1 = times[i - 1], times[i]
    v0, v1 = values[i - 1], values[i]
    return v0 + (v1 - v0) * (t_s - t0) / (t1 - t0) if t1 > t0 else v1


def stale_warning(
    times_s: Sequence[float], values: Sequence[float], update_interval_s: float | None
) -> str | None:
    """Why a sensor's readings look stale (repeated, not re-measured), or None when they do not.

    The rule, chosen so that a genuinely constant load does not raise it: a power monitor that
    re-measures adds conversion noise, so its readings differ from one update to the next even
    under a steady load; a stuck driver repeats one value exactly. With ``u`` the sensor's update
    interval, the readings over ``T`` seconds could have shown ``fresh = min(readings - 1, T / u)``
    new values. They are flagged when ``fresh`` is at least MIN_SAMPLES (enough to judge) and

    - fewer than STALE_CHANGE_FRACTION (1/10) of them differ from the reading before, or
    - one value was held, over consecutive readings, for longer than STALE_RUN_UPDATES (20)
      update intervals (a sensor that froze part way through the window).

    When the update interval is unknown (``None``) only the blunt case is flagged: at least
    MIN_SAMPLES readings that all hold one value over at least MIN_SAMPLES x SLOWEST_UPDATE_S
    (1 s), long enough for any sensor here to have updated ten times. A sysfs file's mtime is no
    help: sysfs attributes keep their creation time whatever value they return.
    """
    readings = len(values)
    if readings < MIN_SAMPLES:
        return None  # too few to judge; end() warns about the count itself
    changes = sum(1 for a, b in zip(values, values[1:], strict=False) if a != b)
    if update_interval_s is None:
        if changes == 0 and times_s[-1] - times_s[0] >= MIN_SAMPLES * SLOWEST_UPDATE_S:
            return (f"all {readings} sensor readings in the window hold one value "
                    f"({values[0]:g}): the sensor may not be updating")
        return None
    span_s = times_s[-1] - times_s[0]
    fresh = min(readings - 1, span_s / update_interval_s)
    if fresh < MIN_SAMPLES:
        return None
    if changes < STALE_CHANGE_FRACTION * fresh:
        return (f"only {changes} of {readings} sensor readings changed over {span_s:.3g} s, where "
                f"the sensor updates every {update_interval_s * 1000:g} ms: its values look "
                "stale (repeated, not re-measured)")
    longest, start = 0.0, 0
    for i in range(1, readings + 1):
        if i == readings or values[i] != values[start]:
            longest = max(longest, times_s[i - 1] - times_s[start])
            start = i
    if longest > STALE_RUN_UPDATES * update_interval_s:
        return (f"the sensor held one value for {longest:.3g} s, more than {STALE_RUN_UPDATES} "
                f"of its {update_interval_s * 1000:g} ms updates: its values look stale")
    return None


class EnergyMeter(ABC):
    """One sensor, one window at a time. ``source`` names the method the meter intends to use;
    the returned measurement's ``source`` is the one that was actually used."""

    source: str
    samples_in_background = True  # False for meters that read no sensor (estimates)
    update_interval_s: float | None = None  # the sensor's own update interval, where known

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
        self._span = (0.0, 0.0)  # what _result charges: the window, or the timed interval
        self._whole = True  # the span is the whole window (totals as summed, no interpolation)

    @property
    def clock(self) -> Clock:
        """The meter's clock: the times given to ``end(timed=...)`` must come from it."""
        return self._clock

    # -- the hooks a sensor implements ------------------------------------------------------

    @abstractmethod
    def _begin(self, now: float) -> None:
        """Reset the accumulators and take the first reading at time ``now``."""

    @abstractmethod
    def _read(self, now: float) -> None:
        """Take one reading at time ``now`` and accumulate it (called under the lock)."""

    @abstractmethod
    def _result(self, duration_s: float, samples: int) -> EnergyMeasurement:
        """The measurement over ``self._span`` (the window, or the timed interval inside it),
        after the final reading; ``duration_s`` is the span's length."""

    def _attribution(self, result: EnergyMeasurement) -> str:
        """How ``result`` charged the timed interval alone (recorded in the measurement)."""
        return ("power integrated over the timed interval only: trapezoids clipped to it, power "
                "interpolated linearly at its ends")

    def _charge(self, trace: PowerIntegral) -> float:
        """The integral's energy over the span ``_result`` must report (see ``end``)."""
        return trace.energy_j if self._whole else trace.between(*self._span)

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

    def end(self, timed: tuple[float, float] | None = None) -> EnergyMeasurement:
        """Stop the sampler, read once more, and return the energy.

        ``timed``: the (start, end) times, by ``self.clock``, of the work the energy belongs to;
        the energy is then that interval's alone (module docstring), not the whole window's.
        """
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
            self._whole = timed is None
            if timed is None:
                self._span = (self._t0, t1)
                result = self._result(t1 - self._t0, self._samples)
            else:
                start, stop = timed
                if not self._t0 <= start <= stop <= t1:
                    raise UsageError(
                        f"timed interval {start:.6f}..{stop:.6f} s is not inside the energy "
                        f"window {self._t0:.6f}..{t1:.6f} s",
                        hint="take the interval's times from meter.clock, between begin() "
                             "and end()")
                self._span = (start, stop)
                result = self._result(stop - start, self._samples)
                result = replace(result, window_s=t1 - self._t0,
                                 attribution=self._attribution(result))
        if self.samples_in_background:
            result = replace(result, interval_s=self.interval_s,
                             update_interval_s=self.update_interval_s)
        if result.measured and result.samples < MIN_SAMPLES:
            result = _add_warning(result, (
                f"only {result.samples} sensor readings in the energy window (fewer than "
                f"{MIN_SAMPLES}): power that changes between them is missed; lengthen the timed "
                "phase (--duration, --iterations) or sample more often"))
        return result

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


def _add_warning(result: EnergyMeasurement, warning: str) -> EnergyMeasurement:
    joined = warning if result.warning is None else f"{result.warning}; {warning}"
    return replace(result, warning=joined)


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
