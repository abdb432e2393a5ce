"""Measure what this machine achieves, for the generic profiles that have no datasheet.

A datasheet profile's peaks are the vendor's and are never replaced. A generic profile (any
x86-64 or arm64 CPU, any NVIDIA GPU) has none, so ``edgekit devices --calibrate`` measures them:
dense square GEMMs per precision, sized up until one call is long enough to time, and a large
tensor copy for memory bandwidth, counted as bytes read + bytes written (STREAM's "copy"
convention). Each figure is the best of repeated timings, since a peak is a maximum; the median
is stored beside it. The results go to ``calibration.json`` in the edgekit home, keyed by profile
name, and the loader applies them to generic profiles only.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from edgekit.errors import UnknownNameError, UsageError
from edgekit.fileio import atomic_write_json
from edgekit.precisions import all_names, calibrated_names, get_precision, list_precisions
from edgekit.profiles.detect import best_match, detect_profile
from edgekit.profiles.device_profile import DeviceProfile
from edgekit.profiles.loader import calibration_path, list_profiles, load_profile, read_calibration
from edgekit.provenance import machine

_MAX_N = {"cpu": 2048, "cuda": 8192}  # 2048: ~0.1 s per fp32 GEMM on 2 cores
_COPY_BYTES = {"cpu": 256 << 20, "cuda": 1 << 30}  # well beyond any cache
_BANDWIDTH_SHARE = 0.2  # of duration_s; the GEMMs share the rest
_MIN_REPEATS = 3
_SLOW_RATIO = 0.5  # a precision slower than half of fp32 has no fast kernel here


def generic_profile_for(profile: DeviceProfile) -> DeviceProfile:
    """The generic profile that calibration measures on a machine detected as ``profile``.

    A datasheet GPU is measured as a generic NVIDIA GPU; a Jetson or any other machine by its
    CPU architecture.
    """
    if profile.generic:
        return profile
    generic = [p for p in list_profiles() if p.generic]
    if profile.kind == "gpu":
        match = next((p for p in generic if p.kind == "gpu"), None)
    else:
        match = best_match([p for p in generic if p.kind == "cpu"], "machine", profile.arch)
    if match is None:
        raise UsageError(f"no generic profile can stand in for {profile.name}")
    return match


def _target(profile_name: str | None) -> DeviceProfile:
    if profile_name is None:
        return generic_profile_for(detect_profile())
    profile = load_profile(profile_name)
    if not profile.generic:
        generic = ", ".join(p.name for p in list_profiles() if p.generic)
        raise UsageError(f"{profile.name} is a datasheet profile; its figures are not calibrated",
                         hint=f"calibrate a generic profile: {generic}")
    return profile


def _device(profile: DeviceProfile, torch: Any) -> str:
    """Where to measure: the GPU for a GPU profile, else the CPU, which must be the profile's."""
    if profile.kind == "gpu":
        if not torch.cuda.is_available():
            raise UsageError(f"{profile.name} is measured on a CUDA GPU and torch sees none",
                             hint="install a CUDA build of torch, or calibrate a CPU profile")
        return "cuda"
    this = machine()["machine"]
    if best_match([profile], "machine", this) is None:
        raise UsageError(f"{profile.name} describes {profile.arch} machines; this one is {this}")
    return "cpu"


def _timed(sync: Callable[[], None], call: Callable[[], Any]) -> float:
    sync()
    start = time.perf_counter()
    call()
    sync()
    return time.perf_counter() - start


def _repeat(sync: Callable[[], None], call: Callable[[], Any], deadline: float,
            times: list[float]) -> list[float]:
    """Time ``call`` until the deadline, at least ``_MIN_REPEATS`` times in all."""
    while len(times) < _MIN_REPEATS or time.perf_counter() < deadline:
        times.append(_timed(sync, call))
    return times


@contextlib.contextmanager
def _tf32(torch: Any, device: str, enabled: bool) -> Iterator[None]:
    """TF32 on or off for CUDA matmuls, restored afterwards (a library leaves global state be)."""
    if device != "cuda":
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _dtypes() -> dict[str, str]:
    """The torch dtype each precision's GEMM runs in, read when asked (plugins add some)."""
    return {p.name: p.torch_dtype for p in list_precisions() if p.torch_dtype}


def _operands(torch: Any, device: str, dtype: Any, n: int) -> tuple[Any, Any]:
    if dtype == torch.int8:
        return tuple(torch.randint(-128, 128, (n, n), dtype=dtype, device=device)
                     for _ in range(2))  # type: ignore[return-value]
    return tuple(torch.randn(n, n, device=device).to(dtype) for _ in range(2))  # type: ignore


def _gemm(torch: Any, device: str, sync: Callable[[], None], precision: str,
          budget_s: float) -> dict[str, Any]:
    """Best and median FLOP/s of an n x n GEMM; n doubles until a call is long enough to time
    (an eighth of the budget for the next size) or reaches the device's cap."""
    deadline = time.perf_counter() + budget_s
    dtype = getattr(torch, _dtypes()[precision])
    with _tf32(torch, device, precision == "tf32"):
        n = 128
        while True:
            a, b = _operands(torch, device, dtype, n)
            # int8 x int8 -> int32, the kernel an int8 model's matmuls run in (oneDNN's VNNI
            # path on x86, cuBLASLt's IMMA on NVIDIA GPUs)
            call = functools.partial(torch._int_mm if dtype == torch.int8 else torch.mm, a, b)
            _timed(sync, call)  # warm-up: workspaces, thread pool
            seconds = _timed(sync, call)
            if n >= _MAX_N[device] or seconds * 8 > budget_s / 8:
                break
            n *= 2
        times = _repeat(sync, call, deadline, [seconds])
    flops = 2.0 * n**3
    best, median = min(times), statistics.median(times)
    return {"n": n, "repeats": len(times), "best_s": best, "median_s": median,
            "flops_best": flops / best, "flops_median": flops / median}


def _copy_bandwidth(torch: Any, device: str, sync: Callable[[], None],
                    budget_s: float) -> dict[str, Any]:
    nbytes = _COPY_BYTES[device]
    source = torch.ones(nbytes // 4, dtype=torch.float32, device=device)  # pages touched
    target = torch.zeros_like(source)
    deadline = time.perf_counter() + budget_s
    call = functools.partial(target.copy_, source)
    _timed(sync, call)  # warm-up
    times = _repeat(sync, call, deadline, [])
    moved = 2.0 * nbytes  # read + written
    best, median = min(times), statistics.median(times)
    return {"bytes_copied": nbytes, "repeats": len(times), "best_s": best, "median_s": median,
            "bytes_s_best": moved / best, "bytes_s_median": moved / median}


def _skip_reason(precision: str, device: str) -> str | None:
    dtypes = _dtypes()
    if precision not in dtypes:
        return (f"not measured: calibration times GEMMs in torch's dtypes only "
                f"({', '.join(dtypes)}); {precision} needs a kernel of its own")
    if get_precision(precision).gpu_only and device != "cuda":
        return "not measured: TF32 is an NVIDIA tensor-core mode; CPUs have no TF32 GEMM"
    return None


def _measure(torch: Any, device: str, precisions: Sequence[str],
             duration_s: float) -> dict[str, Any]:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    skipped = {p: reason for p in precisions if (reason := _skip_reason(p, device))}
    measured = [p for p in precisions if p not in skipped]
    gemm_budget = duration_s * (1 - _BANDWIDTH_SHARE) / max(len(measured), 1)
    gemm: dict[str, Any] = {}
    for precision in measured:
        try:
            gemm[precision] = _gemm(torch, device, sync, precision, gemm_budget)
        except RuntimeError as exc:  # e.g. no kernel for this dtype on this device
            skipped[precision] = f"torch cannot run a {precision} GEMM here: {exc}"
    notes = {}
    fp32 = gemm.get("fp32", {}).get("flops_best")
    for precision, result in gemm.items():
        if fp32 and result["flops_best"] < _SLOW_RATIO * fp32:
            notes[precision] = (f"{result['flops_best'] / fp32:.1%} of the fp32 rate: torch "
                                f"has no fast {precision} kernel for this processor; not "
                                f"stored as a peak")
    try:
        bandwidth = _copy_bandwidth(torch, device, sync, duration_s * _BANDWIDTH_SHARE)
    except RuntimeError as exc:  # out of memory on a small device
        bandwidth = None
        skipped["memory_bandwidth"] = f"copy benchmark failed: {exc}"
    return {"gemm": gemm, "bandwidth": bandwidth, "skipped": skipped, "notes": notes}


def calibrate(profile_name: str | None = None, *, duration_s: float = 8.0,
              precisions: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure peak FLOP/s per precision and memory bandwidth, store them, return the record.

    ``profile_name`` must be a generic profile describing this machine; None calibrates the
    detected profile, or the generic one that stands in for a detected datasheet profile.
    ``precisions`` defaults to every precision marked ``calibrate``. ``duration_s`` bounds the
    timed work (set-up adds about a second).
    """
    if not duration_s > 0:
        raise UsageError(f"calibration duration must be positive, got {duration_s}")
    precisions = calibrated_names() if precisions is None else precisions
    for precision in precisions:
        if precision not in all_names():
            raise UnknownNameError("precision", precision, all_names())
    profile = _target(profile_name)
    read_calibration()  # a corrupt file fails here, before the measurement, not after it
    import torch  # heavy: only when measuring

    device = _device(profile, torch)
    measured = _measure(torch, device, precisions, duration_s)
    gemm, bandwidth = measured["gemm"], measured["bandwidth"]
    record = {
        "profile": profile.name,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "method": {
            "gemm": "torch.mm of two random n x n matrices (int8: torch._int_mm, int32 "
                    "results), n doubled from 128 until one call is long enough to time; "
                    "FLOPs (OPs) = 2 n^3; peak = best of repeats",
            "memory_bandwidth": "torch copy_ of a float32 tensor of bytes_copied; bytes read + "
                                "written per copy; peak = best of repeats",
        },
        # a precision with no fast kernel here is no peak: runtimes compute it in fp32 (ONNX
        # Runtime's CPU fp16), so a roofline from its slow GEMM would be off by its slowness
        "peak_flops": {p: r["flops_best"] for p, r in gemm.items() if p not in measured["notes"]},
        "memory_bandwidth_bytes_s": bandwidth["bytes_s_best"] if bandwidth else None,
        **measured,
    }
    path = calibration_path()
    atomic_write_json(path, {"schema_version": 1,
                             "profiles": {**read_calibration(), profile.name: record}})
    return {**record, "stored_in": str(path)}
