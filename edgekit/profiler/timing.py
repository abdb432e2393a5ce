"""The timing loop: warm-up by time, then a timed phase by duration or by count.

Each iteration runs and synchronises the backend and records its own wall time with
``perf_counter``; nothing else happens inside the loop.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgekit.backends import Runner
from edgekit.errors import UsageError


@dataclass(frozen=True)
class TimingPlan:
    warmup_s: float = 0.2
    min_warmup_iterations: int = 3
    duration_s: float = 3.0
    min_iterations: int = 10
    iterations: int | None = None  # a fixed count overrides duration

    def __post_init__(self) -> None:
        # Written so that nan fails too (every comparison with nan is false), and an infinite
        # warm-up or duration, which would never end, is refused with it.
        if not 0 <= self.warmup_s < math.inf:
            raise UsageError(f"--warmup must be a finite number >= 0 seconds, "
                             f"got {self.warmup_s}")
        if self.iterations is not None and not self.iterations >= 1:
            raise UsageError(f"--iterations must be at least 1, got {self.iterations}")
        if self.iterations is None and not 0 < self.duration_s < math.inf:
            raise UsageError(f"--duration must be a finite number > 0 seconds, "
                             f"got {self.duration_s}")

    def describe(self) -> dict[str, Any]:
        return {"warmup_s": self.warmup_s, "min_warmup_iterations": self.min_warmup_iterations,
                "duration_s": None if self.iterations else self.duration_s,
                "min_iterations": self.min_iterations, "iterations": self.iterations}


def timed_call(runner: Runner, prepared: Any) -> float:
    start = time.perf_counter()
    runner.run(prepared)
    runner.synchronize()
    return time.perf_counter() - start


def warm_up(runner: Runner, prepared: Any, plan: TimingPlan) -> int:
    deadline = time.perf_counter() + plan.warmup_s
    count = 0
    while count < plan.min_warmup_iterations or time.perf_counter() < deadline:
        runner.run(prepared)
        runner.synchronize()
        count += 1
    return count


def timed_phase(runner: Runner, prepared: Any, plan: TimingPlan,
                on_iteration: Callable[[float], None] | None = None) -> tuple[list[float], float]:
    """Per-iteration latencies and the phase's wall time, in seconds.

    ``on_iteration`` gets the elapsed fraction, for a progress bar.
    """
    samples: list[float] = []
    perf = time.perf_counter
    start = perf()
    while True:
        t0 = perf()
        runner.run(prepared)
        runner.synchronize()
        t1 = perf()
        samples.append(t1 - t0)
        if plan.iterations is not None:
            done = len(samples) >= plan.iterations
            fraction = len(samples) / plan.iterations
        else:
            done = len(samples) >= plan.min_iterations and t1 - start >= plan.duration_s
            fraction = min(1.0, (t1 - start) / plan.duration_s)
        if on_iteration is not None:
            on_iteration(fraction)
        if done:
            return samples, perf() - start
