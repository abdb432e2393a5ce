"""Peak resident memory of this process during a run.

On Linux the kernel keeps the high-water mark (VmHWM in /proc/self/status) and lets a process
reset it by writing "5" to /proc/self/clear_refs, so the peak of a window is exact and needs no
polling thread. Elsewhere the lifetime peak from getrusage is reported and labelled as such.
"""
from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def current_rss_bytes() -> int:
    return psutil.Process().memory_info().rss


def _vm_hwm_bytes() -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class MemoryWindow:
    baseline_bytes: int
    peak_bytes: int
    method: str

    @property
    def increase_bytes(self) -> int:
        return max(0, self.peak_bytes - self.baseline_bytes)

    def to_dict(self) -> dict:
        mib = 1 << 20
        return {"baseline_rss_mib": round(self.baseline_bytes / mib, 1),
                "peak_rss_mib": round(self.peak_bytes / mib, 1),
                "increase_mib": round(self.increase_bytes / mib, 1), "method": self.method}


class PeakMemoryTracker:
    """``start()`` records the baseline and resets the peak; ``stop()`` returns the window."""

    def __init__(self) -> None:
        self._baseline = 0
        self._method = "getrusage lifetime peak"

    def start(self) -> None:
        self._baseline = current_rss_bytes()
        try:
            _CLEAR_REFS.write_text("5")
            if _vm_hwm_bytes() is not None:
                self._method = "VmHWM (reset at start)"
        except OSError:
            self._method = "getrusage lifetime peak"

    def stop(self) -> MemoryWindow:
        if self._method.startswith("VmHWM"):
            peak = _vm_hwm_bytes() or current_rss_bytes()
        else:
            scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
        return MemoryWindow(self._baseline, max(peak, current_rss_bytes()), self._method)
