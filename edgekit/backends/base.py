"""The runner interface every backend shares (after Polygraphy's runners).

The profiler never branches on the backend: it calls ``prepare`` once (outside the timed loop:
host arrays become the backend's native inputs), then ``run`` and ``synchronize`` per iteration.
A runner that can time the phases of an inference (a GPU's copies and compute) records them with
``record_phase``; the profiler reads ``phase_samples`` and reports each phase beside the latency.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

Feed = dict[str, np.ndarray]


class Runner(ABC):
    name: str = "runner"

    def __init__(self) -> None:
        self.active = False
        self._phases: dict[str, list[float]] = {}

    def __enter__(self) -> Runner:
        self.activate()
        return self

    def __exit__(self, *exc: object) -> None:
        self.deactivate()

    def activate(self) -> None:
        """Create the session / load the model; the profiler times this as creation time."""
        self._activate_impl()
        self.active = True

    def deactivate(self) -> None:
        if self.active:
            self._deactivate_impl()
            self.active = False

    def prepare(self, feed: Feed) -> Any:
        """Turn host arrays into whatever ``run`` consumes (done once, not timed)."""
        self._check_active()
        return self._prepare_impl(feed)

    def run(self, prepared: Any) -> Any:
        """One inference on prepared inputs; may return before the device finishes."""
        return self._run_impl(prepared)

    def infer(self, feed: Feed) -> Feed:
        """One synchronous inference from host arrays to host arrays, for validation."""
        self._check_active()
        out = self.run(self.prepare(feed))
        self.synchronize()
        return self._to_host(out)

    def synchronize(self) -> None:  # noqa: B027  (optional hook; no-op unless overridden)
        """Wait for queued work; a no-op on synchronous CPU backends."""

    def describe(self) -> dict[str, Any]:
        """Settings that belong in the report (threads, providers, precision)."""
        return {"backend": self.name}

    def record_phase(self, phase: str, seconds: float) -> None:
        """One iteration's time in ``phase`` ("h2d", "compute", ...), for ``phase_samples``."""
        self._phases.setdefault(phase, []).append(seconds)

    def phase_samples(self) -> dict[str, list[float]]:
        """Per-phase times in seconds, one per iteration since the last reset; empty where the
        backend does not split an inference into phases."""
        return {k: list(v) for k, v in self._phases.items()}

    def reset_phase_samples(self) -> None:
        self._phases.clear()

    def _check_active(self) -> None:
        if not self.active:
            raise RuntimeError(f"{self.name} runner used before activate()")

    @abstractmethod
    def _activate_impl(self) -> None: ...

    def _deactivate_impl(self) -> None:
        return None

    @abstractmethod
    def _prepare_impl(self, feed: Feed) -> Any: ...

    @abstractmethod
    def _run_impl(self, prepared: Any) -> Any: ...

    @abstractmethod
    def _to_host(self, out: Any) -> Feed: ...
