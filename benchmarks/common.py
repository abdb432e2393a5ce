"""Shared by the benchmark scripts: machine description, JSON output, markdown tables."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import statistics
import time
import warnings
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from edgekit.fileio import atomic_write_json
from edgekit.provenance import report_document

# EDGEKIT_BENCH_RESULTS: another folder (device_check.py gives each step its own)
RESULTS = Path(os.environ.get("EDGEKIT_BENCH_RESULTS")
               or Path(__file__).resolve().parent / "results")


def write_result(name: str, body: dict[str, Any]) -> Path:
    path = atomic_write_json(RESULTS / f"{name}.json", report_document(f"benchmark/{name}", body))
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return path


def median(values: list[float]) -> float:
    return statistics.median(values)


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def export_module(module: Any, x: Any, path: Path) -> None:
    """Export a one-input, one-output module to ONNX quietly (dynamo exporter, opset 18)."""
    import torch

    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"],
                          opset_version=18, dynamo=True, external_data=False)


def export_as_edgekit(module: Any, x: Any, path: Path) -> None:
    """Export a one-input, one-output module the way ``edgekit export`` does (``export_graph``:
    dynamo exporter, opset 18, node-lean spiking neurons, onnxslim, the ONNX checker), so that
    a latency measured on the file is the latency of what edgekit ships."""
    import torch

    from edgekit.exporters.onnx import export_graph

    with torch.no_grad():
        export_graph(module, (x,), path, opset=18, input_names=["x"], output_names=["y"],
                     dynamo=True)


def time_call(fn: Callable[[], Any], min_time: float, min_iters: int,
              slow_s: float | None = None) -> float:
    """Median seconds per call after one warm-up call, over at least min_iters and min_time.

    With ``slow_s``, a case whose warm-up call took longer is timed by one more call only.
    """
    t0 = time.perf_counter()
    fn()
    if slow_s is not None and time.perf_counter() - t0 > slow_s:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return median(times)


def run_rounds(cases: dict, rounds: int, min_time: float, min_iters: int,
               before: Callable[[Any], None] | None = None,
               slow_s: float | None = None, energy: dict | None = None) -> tuple[dict, list]:
    """Time every case once per round, rotating which goes first so drift hits all alike;
    returns per-case samples and the 1-minute load average at the start of each round.

    ``energy``: a dict that receives, per case, the joules per call of each round, measured by
    the GPU's NVML meter around the timing (cases must then synchronise: see ``synchronised``).
    """
    import torch

    meter = gpu_meter() if energy is not None else None
    keys = list(cases)
    samples: dict = {k: [] for k in keys}
    loads = []
    with torch.inference_mode():
        for r in range(rounds):
            loads.append(os.getloadavg()[0])
            shift = r * len(keys) // rounds
            for key in keys[shift:] + keys[:shift]:
                if before is not None:
                    before(key)
                if meter is None:
                    samples[key].append(time_call(cases[key], min_time, min_iters, slow_s))
                    continue
                calls = [0]

                def counted(fn=cases[key], calls=calls) -> None:
                    fn()
                    calls[0] += 1
                meter.begin()
                samples[key].append(time_call(counted, min_time, min_iters, slow_s))
                got = meter.end()
                energy.setdefault(key, {"source": got.source, "j_per_call": []})
                energy[key]["j_per_call"].append(got.energy_j / max(1, calls[0]))
            print(f"round {r + 1}/{rounds} done (load {loads[-1]:.2f})", flush=True)
    if meter is not None:
        meter.close()
    return samples, loads


def alternating_rounds(groups: list[dict[Hashable, Callable[[], Any]]], rounds: int,
                       calls: int) -> tuple[dict[Hashable, list[float]], list[float]]:
    """Per case, the median seconds of a call in each round. Within a group the cases alternate
    call by call (``calls`` each), so a change in the host's speed reaches them alike; the
    order of the groups rotates between rounds. Returns the samples and the 1-minute load
    average at the start of each round."""
    import torch

    samples: dict[Hashable, list[float]] = {k: [] for group in groups for k in group}
    loads = []
    with torch.inference_mode():
        for group in groups:  # warm-up
            for fn in group.values():
                fn()
        for r in range(rounds):
            loads.append(os.getloadavg()[0])
            shift = r % len(groups)
            for group in groups[shift:] + groups[:shift]:
                seconds: dict[Hashable, list[float]] = {k: [] for k in group}
                for _ in range(calls):
                    for key, fn in group.items():
                        t0 = time.perf_counter()
                        fn()
                        seconds[key].append(time.perf_counter() - t0)
                for key, values in seconds.items():
                    samples[key].append(median(values))
            print(f"round {r + 1}/{rounds} done (load {loads[-1]:.2f})", flush=True)
    return samples, loads


def add_device_argument(parser: Any) -> None:
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where torch runs (cuda: GPU timings synchronised, NVML energy "
                             "per case, no ONNX Runtime rows: the GPU machine's is a CPU build)")


def synchronised(fn: Callable[[], Any], device: str) -> Callable[[], Any]:
    """``fn`` that waits for the GPU's queued work, so a wall-clock timer sees its cost."""
    if device != "cuda":
        return fn
    import torch

    def call() -> Any:
        out = fn()
        torch.cuda.synchronize()
        return out
    return call


def gpu_meter() -> Any:
    """edgekit's NVML meter on GPU 0 (counter for windows >= 1 s, instant power below)."""
    from edgekit.energy.nvml import NvmlMeter

    return NvmlMeter(0, interval_s=0.01)


def energy_rows(energy: dict) -> dict:
    """Median joules per call per case key (as a string), with the meter's source."""
    return {str(k): {"source": v["source"], "j_per_call": median(v["j_per_call"]),
                     "j_per_call_per_round": v["j_per_call"]} for k, v in energy.items()}
