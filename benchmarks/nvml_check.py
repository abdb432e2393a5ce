"""edgekit's NVML meter against the GPU's energy counter read by hand, on a known busy load.

The load is a loop of bf16 8192^3 matrix products (the GPU at full power, steadily). Checks:

  1. a window of ``--busy-s`` seconds (>= 1 s: the meter uses the energy counter): the meter's
     energy against nvmlDeviceGetTotalEnergyConsumption read by hand right inside the window,
     within 5 %;
  2. windows of 0.2 and 0.5 s (under 1 s: the meter integrates instantaneous power instead):
     the meter's energy against the hand-read counter's average power over check 1 times the
     window's length (the load is the same), within 15 %, and the source must say
     ``instant power`` (or ``average power`` where the driver lacks the field, said in a note).

    python benchmarks/nvml_check.py [--busy-s 3]
"""
from __future__ import annotations

import argparse
import time

import torch
from common import write_result

from edgekit.energy.nvml import INSTANT_SOURCE, NvmlMeter


def busy(seconds: float, a: torch.Tensor, b: torch.Tensor) -> int:
    """Matrix products until ``seconds`` have passed (synchronised); returns how many."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()
        n += 4
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy-s", type=float, default=3.0)
    args = parser.parse_args()
    import pynvml

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    busy(0.5, a, b)  # clocks up before anything is measured
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    meter = NvmlMeter(handle=handle, interval_s=0.01)
    idle_mw = pynvml.nvmlDeviceGetPowerUsage(handle)

    meter.begin()
    c0, t0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.perf_counter()
    products = busy(args.busy_s, a, b)
    c1, t1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.perf_counter()
    long = meter.end()
    hand_j, hand_s = (c1 - c0) / 1000, t1 - t0
    hand_w = hand_j / hand_s
    checks = [{"claim": f"meter vs counter by hand over a {hand_s:.2f} s busy window",
               "value": round(long.energy_j / hand_j, 4),
               "met": abs(long.energy_j / hand_j - 1) <= 0.05,
               "meter_j": long.energy_j, "hand_j": hand_j, "meter_source": long.source,
               "hand_w": hand_w, "products": products}]
    for window in (0.2, 0.5):
        meter.begin()
        t0 = time.perf_counter()
        busy(window, a, b)
        span = time.perf_counter() - t0
        short = meter.end()
        expected = hand_w * span
        ratio = short.energy_j / expected
        checks.append({"claim": f"meter on a {span:.2f} s window vs the hand-read average power "
                                "x its length", "value": round(ratio, 4),
                       "met": abs(ratio - 1) <= 0.15 and short.source == INSTANT_SOURCE,
                       "meter_j": short.energy_j, "expected_j": expected,
                       "meter_source": short.source, "note": short.note,
                       "samples": short.samples})
    meter.close()
    pynvml.nvmlShutdown()
    for c in checks:
        print(f"{c['claim']}: {c['value']} ({'met' if c['met'] else 'NOT met'}; "
              f"{c['meter_source']})")
    write_result("nvml_check", {"device": torch.cuda.get_device_name(0),
                                "idle_power_w_before": idle_mw / 1000, "busy_power_w": hand_w,
                                "checks": checks})


if __name__ == "__main__":
    main()
