"""The profiler's own cost: the timing loop's overhead per iteration, and how much a running
energy-sampler thread moves the latency it measures (target: under 2 %).

1. Loop overhead: the timing loop around a runner that does nothing, against a bare Python loop
   that only calls ``perf_counter`` twice: the difference is what the loop adds per iteration.
2. Sampler effect: a real model profiled with no meter and with a meter whose background thread
   reads real sysfs files (an INA3221 layout rebuilt in a temporary folder, sampled every 10 ms,
   ten times more often than the default) in interleaved rounds; medians of p50 and their ratio.

    python benchmarks/profiler_overhead.py [--rounds R] [--duration S]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from common import markdown_table, median, write_result

from edgekit.backends.base import Runner
from edgekit.energy.jetson import Ina3221Meter
from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiler.timing import TimingPlan, timed_phase


class NoOpRunner(Runner):
    name = "noop"

    def _activate_impl(self) -> None: ...
    def _prepare_impl(self, feed): return None
    def _run_impl(self, prepared) -> Any: return None
    def _to_host(self, out): return {}


def loop_overhead(iterations: int) -> dict[str, float]:
    runner = NoOpRunner()
    runner.activate()
    recorded, wall = timed_phase(runner, None, TimingPlan(iterations=iterations))
    perf = time.perf_counter
    bare = []
    for _ in range(iterations):
        t0 = perf()
        t1 = perf()
        bare.append(t1 - t0)
    return {"recorded_per_iteration_us": median(recorded) * 1e6,
            "bare_perf_counter_pair_us": median(bare) * 1e6,
            "wall_per_iteration_us": wall / iterations * 1e6}


def fake_ina3221(root: Path) -> None:
    """A JetPack 6 hwmon layout with three rails; the meter reads it like a real Jetson."""
    hw = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
    hw.mkdir(parents=True)
    for ch, (label, mv, ma) in enumerate([("VDD_IN", 5000, 1200), ("VDD_CPU_GPU_CV", 5000, 400),
                                          ("VDD_SOC", 5000, 300)], start=1):
        (hw / f"in{ch}_label").write_text(label + "\n")
        (hw / f"in{ch}_input").write_text(f"{mv}\n")
        (hw / f"curr{ch}_input").write_text(f"{ma}\n")


def sampler_effect(model: str, rounds: int, duration: float, interval_s: float) -> dict[str, Any]:
    plan = TimingPlan(warmup_s=0.2, duration_s=duration)
    settings = ProfileSettings(threads=1, plan=plan, energy="none")
    base, sampled, samples = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        fake_ina3221(Path(tmp))
        for _ in range(rounds):
            base.append(profile(model, settings)["latency_ms"]["p50"])
            meter = Ina3221Meter("VDD_IN", root=Path(tmp), interval_s=interval_s)
            report = profile(model, settings, meter=meter)
            sampled.append(report["latency_ms"]["p50"])
            samples.append(report["energy"]["samples"])
    b, s = median(base), median(sampled)
    return {"model": model, "interval_s": interval_s, "no_meter_p50_ms": base,
            "sampling_p50_ms": sampled, "sensor_reads_per_window": samples,
            "median_no_meter_ms": b, "median_sampling_ms": s, "change_pct": (s / b - 1) * 100}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=1.0)
    parser.add_argument("--interval", type=float, default=0.01)
    args = parser.parse_args()
    overhead = loop_overhead(20000)
    print(f"timing loop: {overhead['recorded_per_iteration_us']:.3f} us recorded per empty "
          f"iteration, {overhead['wall_per_iteration_us']:.3f} us wall; bare perf_counter pair "
          f"{overhead['bare_perf_counter_pair_us']:.3f} us")
    effects = [sampler_effect(m, args.rounds, args.duration, args.interval)
               for m in ("mlp:small", "ds-cnn")]
    rows = [[e["model"], f"{e['median_no_meter_ms']:.4f}", f"{e['median_sampling_ms']:.4f}",
             f"{e['change_pct']:+.2f}%", median(e["sensor_reads_per_window"])] for e in effects]
    table = markdown_table(["model (torch, 1 thread)", "p50 no meter (ms)",
                            f"p50 sampling every {args.interval * 1e3:.0f} ms (ms)", "change",
                            "sensor reads / window"], rows)
    print(table)
    write_result("profiler_overhead", {"settings": vars(args), "loop": overhead,
                                       "sampler": effects, "table": table})


if __name__ == "__main__":
    main()
