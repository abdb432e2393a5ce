"""Profile a target on a backend: creation, first inference, latency, memory, FLOP/s, energy.

The same code measures every backend (it only sees the Runner interface). The energy is that of
exactly the timed phase: the meter is told the phase's start and end by its own clock and charges
that interval alone, not its sampler's start and join (``EnergyMeter.end(timed=...)``). Every
figure in the report says how it was obtained. A runner that times the phases of an inference
(TensorRT: host-to-device copy, compute, device-to-host copy) gets statistics per phase beside
the end-to-end latency.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.backends import BackendSpec, Runner, RunOptions, get_backend, list_backends
from edgekit.energy import EnergyMeasurement, EnergyMeter, open_meter
from edgekit.energy.select import sysfs_root
from edgekit.errors import UnknownNameError, UsageError
from edgekit.exporters import OnnxOptions, export_onnx, load_artifact
from edgekit.flops import model_cost
from edgekit.inputs import InputOverride, check_batch
from edgekit.profiler.memory import MemoryWindow, PeakMemoryTracker
from edgekit.profiler.stats import latency_stats
from edgekit.profiler.timing import TimingPlan, timed_call, timed_phase, warm_up
from edgekit.profiles import DeviceProfile, detect_profile, load_profile
from edgekit.profiles.claim import measured_on
from edgekit.progress import Progress, ProgressUpdate
from edgekit.targets import ArtifactTarget, ModelSource, OnnxFileTarget, Target, resolve_target
from edgekit.workdirs import owned_tempdir


@dataclass(frozen=True)
class ProfileSettings:
    backend: str = "torch"
    device: str | None = None  # profile name or path; None = detected
    as_device: bool = False  # this machine need not be a ``device``: its figures are labelled so
    batch: int = 1
    threads: int | None = None  # None = every core this process may use
    plan: TimingPlan = TimingPlan()
    energy: str = "auto"
    precision: str = "fp32"
    provider: str | None = None  # where onnxruntime / torch run: cpu | cuda | tensorrt (ORT only)
    cuda_graph: bool = False  # tensorrt, torch on cuda: replay a captured CUDA graph
    sysfs_root: str | None = None  # energy sensors' /sys; None: $EDGEKIT_SYSFS_ROOT or /

    def __post_init__(self) -> None:
        spec = get_backend(self.backend)
        backends = list_backends()
        if self.provider is not None:
            providers = {p for s in backends for p in s.providers}
            if self.provider not in providers:
                raise UnknownNameError("provider", self.provider, providers)
            if self.provider not in spec.providers:
                uses = ", ".join(f"{'|'.join(s.providers)} with --backend {s.name}"
                                 for s in backends if s.providers)
                raise UsageError(f"--provider {self.provider} does not apply to --backend "
                                 f"{self.backend}", hint=f"--provider {uses}")
        if self.cuda_graph and "cuda_graph" not in spec.options:
            takers = " or ".join(s.name for s in backends if "cuda_graph" in s.options)
            raise UsageError(f"--cuda-graph applies to --backend {takers}")
        check_batch(self.batch)
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {self.threads}")
        if self.as_device and self.device is None:
            raise UsageError("as_device labels figures with a named profile: give device too")


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(kw_only=True)
class _Prepared:
    """A runner ready to activate, with its inputs and what is known about the model."""

    runner: Runner
    feed: dict[str, np.ndarray]
    name: str
    source_record: dict[str, Any]  # where the model came from, as the report records it
    flops_per_sample: float | None
    params: int | None
    size_bytes: int
    size_source: str
    precision: str | None = None  # what the model runs at, where the artifact fixes it (engines)


@dataclass(frozen=True)
class _Measured:
    """What one profiling run measured, for its report."""

    backend: dict[str, Any]  # the runner's own description
    creation_s: float
    first_s: float
    warm_iters: int
    samples: list[float]  # the timed iterations' latencies
    timed_s: float
    energy: EnergyMeasurement
    mem: MemoryWindow


def _engine_batch_range(artifact: Any) -> tuple[int, int] | None:
    profile = (artifact.manifest.get("tensorrt") or {}).get("profile") or []
    if not profile or not artifact.manifest["tensorrt"].get("dynamic"):
        return None
    return int(profile[0]["min"][0]), int(profile[0]["max"][0])


def _options(settings: ProfileSettings, threads: int) -> RunOptions:
    return RunOptions(threads=threads, provider=settings.provider, precision=settings.precision,
                      batch=settings.batch, cuda_graph=settings.cuda_graph)


def _wrong_backend(what: Path, label: str, fmt: str, spec: BackendSpec) -> UsageError:
    """``what`` (``label``: what it is) holds a ``fmt`` model that ``spec`` cannot run: name the
    backends that can."""
    runners = [s.name for s in list_backends() if s.artifact_format == fmt]
    if not runners:
        return UsageError(f"{what} is {label}, which no backend runs",
                          hint=f"profile the model it came from on --backend {spec.name}")
    hint = None
    if spec.artifact_format is None:
        hint = f"or give the model name or checkpoint for --backend {spec.name}"
    return UsageError(f"{what} is {label}; profile it with --backend {' or '.join(runners)}",
                      hint=hint)


def _from_artifact(folder: Path, settings: ProfileSettings, threads: int, workdir: Path,
                   exported: bool = False) -> _Prepared:
    """A runner of ``settings.backend`` for an artifact; ``exported``: made for this run."""
    spec = get_backend(settings.backend)
    artifact = load_artifact(folder)
    convert = artifact.format == "onnx" and spec.build is not None
    if artifact.format != spec.artifact_format and not convert:
        raise _wrong_backend(folder, f"an artifact of format '{artifact.format}'",
                             artifact.format, spec)
    fixed = artifact.manifest.get("batch")
    batch_range = _engine_batch_range(artifact)
    if batch_range and not batch_range[0] <= settings.batch <= batch_range[1]:
        raise UsageError(f"{folder} was built for batch {batch_range[0]}..{batch_range[1]}, "
                         f"not {settings.batch}", hint="rebuild with --min-shape/--max-shape")
    if batch_range is None and isinstance(fixed, int) and fixed != settings.batch:
        raise UsageError(f"{folder} was exported for batch {fixed}, not {settings.batch}",
                         hint="re-export with --dynamic-batch or --batch N")
    if not exported:  # an export made for this run was validated a moment ago
        from edgekit.exporters.artifact_validation import check_reproduces_reference

        check_reproduces_reference(artifact)
    options = _options(settings, threads)
    size_source = spec.file_label + (" (exported for this run, validated)" if exported else "")
    if convert:  # an ONNX artifact the backend builds its own format from (an engine)
        built = spec.build(artifact, workdir / "built", options)  # type: ignore[misc]
        artifact = load_artifact(built)
        size_source = f"{spec.file_label} (built for this run, {settings.precision})"
    return _Prepared(runner=spec.open_file(artifact.model_path, options),  # type: ignore[misc]
                     feed=_artifact_feed(artifact, settings.batch), name=artifact.source_name,
                     source_record={"artifact": str(folder), **artifact.manifest["source"]},
                     flops_per_sample=artifact.manifest.get("flops_per_sample"),
                     params=artifact.manifest.get("params"), size_bytes=artifact.size_bytes,
                     size_source=size_source,
                     precision=((artifact.manifest.get(artifact.format) or {}).get("precision")
                                or artifact.manifest.get("precision")))


def _artifact_feed(artifact: Any, batch: int) -> dict[str, np.ndarray]:
    """Inputs for an artifact at ``batch``: from the input spec it was made with (a user's
    token ids stay in their range), else from the inputs its manifest records."""
    from edgekit.exporters.calibration import artifact_input_spec

    return artifact_input_spec(artifact.manifest).feed(batch)


def _from_onnx_file(target: OnnxFileTarget, settings: ProfileSettings,
                    threads: int) -> _Prepared:
    spec = get_backend(settings.backend)
    path = target.path
    if spec.artifact_format != "onnx":
        raise _wrong_backend(path, "an ONNX file", "onnx", spec)
    size = sum(p.stat().st_size for p in _with_external_data(path))
    return _Prepared(runner=spec.open_file(path, _options(settings, threads)),  # type: ignore[misc]
                     feed=target.at_batch(settings.batch).inputs.feed(settings.batch),
                     name=target.name, source_record={"onnx_file": str(path)},
                     flops_per_sample=None, params=None, size_bytes=size,
                     size_source=spec.file_label + (" with its external data"
                                                    if size > path.stat().st_size else ""))


def _with_external_data(path: Path) -> list[Path]:
    """An ONNX file and the external data files its initialisers name."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    found = {path}
    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            location = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if location and (path.parent / location).is_file():
                found.add(path.parent / location)
    return sorted(found)


def _from_model(source: ModelSource, settings: ProfileSettings, threads: int,
                workdir: Path) -> _Prepared:
    spec = get_backend(settings.backend)
    cost = model_cost(source.model, source.example_inputs(batch=1))
    if spec.open_module is None:  # the backend runs an artifact: export one and load that
        result = export_onnx(source, workdir / "artifact",
                             OnnxOptions(batch=settings.batch, device=settings.device))
        prepared = _from_artifact(result.folder, settings, threads, workdir, exported=True)
        return replace(prepared, name=source.name, source_record=source.record(),
                       flops_per_sample=cost.flops_per_sample, params=cost.params)
    runner = spec.open_module(source.model, source.inputs.names, source.output_names,
                              _options(settings, threads))
    if source.checkpoint is not None:
        size, size_source = source.checkpoint.path.stat().st_size, "safetensors checkpoint"
    else:
        size = sum(p.numel() * p.element_size() for p in source.model.parameters())
        size_source = "in-memory parameters"
    return _Prepared(runner=runner, feed=source.inputs.feed(settings.batch), name=source.name,
                     source_record=source.record(), flops_per_sample=cost.flops_per_sample,
                     params=cost.params, size_bytes=size, size_source=size_source)


def _prepare(target: Target, settings: ProfileSettings, threads: int,
             workdir: Path) -> _Prepared:
    if isinstance(target, ArtifactTarget):
        return _from_artifact(target.folder, settings, threads, workdir)
    if isinstance(target, OnnxFileTarget):
        return _from_onnx_file(target, settings, threads)
    return _from_model(target, settings, threads, workdir)


def resolve_device(device: str | None, *, as_device: bool = False,
                   sysfs: str | None = None) -> tuple[DeviceProfile, DeviceProfile | None]:
    """The profile the report is labelled with, and the one its figures belong to when this
    machine is not such a device (``as_device``; else that is refused: ``profiles/claim.py``).
    ``sysfs``: the root the sensors are read under, where the machine is identified too."""
    if device is None:
        return detect_profile(), None
    profile = load_profile(device)
    return profile, measured_on(profile, as_device=as_device, root=sysfs_root(sysfs))


class _NoProgress:
    def __call__(self, fraction: float) -> None:
        return None


def _fractions(progress: Progress | None, label: str) -> Callable[[float], None]:
    """Report the timed phase's elapsed fraction to ``progress``, at most every 1 %."""
    if progress is None:
        return _NoProgress()
    last = [0.0]
    progress(ProgressUpdate(label, 0.0, 1.0))

    def update(fraction: float) -> None:
        if fraction - last[0] >= 0.01 or fraction >= 1.0:  # keep reporting off the hot path
            last[0] = fraction
            progress(ProgressUpdate(label, fraction, 1.0))
    return update


def profile(target: Any, settings: ProfileSettings = ProfileSettings(),
            progress: Progress | None = None, meter: EnergyMeter | None = None,
            inputs: tuple[InputOverride, ...] = ()) -> dict[str, Any]:
    """Profile ``target``: anything ``resolve_target`` takes (a registry name, checkpoint,
    artifact folder, .onnx or .pt2 file, a user's callable or module), or a resolved target.

    ``meter`` replaces the meter that ``settings.energy`` would pick (a sensor of your own);
    ``inputs`` (``--input``) set a user model's or ONNX file's input shapes.
    """
    get_backend(settings.backend).check(settings.provider)  # one line where it cannot run here
    resolved = resolve_target(target, inputs=inputs, batch=settings.batch)
    device, here = resolve_device(settings.device, as_device=settings.as_device,
                                  sysfs=settings.sysfs_root)
    threads = settings.threads or available_cores()
    with owned_tempdir("edgekit-profile-") as tmp:
        prepared = _prepare(resolved, settings, threads, tmp)
        meter = meter or open_meter(here or device, settings.energy, root=settings.sysfs_root)
        memory = PeakMemoryTracker()
        memory.start()
        t0 = time.perf_counter()
        prepared.runner.activate()
        creation_s = time.perf_counter() - t0
        try:
            native = prepared.runner.prepare(prepared.feed)
            first_s = timed_call(prepared.runner, native)
            warm_iters = warm_up(prepared.runner, native, settings.plan)
            prepared.runner.reset_phase_samples()  # the phases of the timed iterations only
            bar = _fractions(progress, f"profiling {prepared.name} on {settings.backend}")
            meter.begin()
            try:  # the meter's own clock brackets the phase: its begin/join are not charged
                t_start = meter.clock()
                samples, wall_s = timed_phase(prepared.runner, native, settings.plan, bar)
                t_end = meter.clock()
            except BaseException:
                meter.close()  # stop the sampler; the timing error is the one to report
                raise
            energy = meter.end(timed=(t_start, t_end))
            phases = prepared.runner.phase_samples()
            described = prepared.runner.describe()
        finally:
            prepared.runner.deactivate()
            meter.close()
        mem = memory.stop()
    measured = _Measured(backend=described, creation_s=creation_s, first_s=first_s,
                         warm_iters=warm_iters, samples=samples, timed_s=wall_s, energy=energy,
                         mem=mem)
    report = _report(prepared, settings, measured, device=device, here=here, threads=threads)
    if any(phases.values()):
        report["phases_ms"] = {name: latency_stats(values).to_dict()
                               for name, values in phases.items() if values}
    return report


def _device_doc(device: DeviceProfile, here: DeviceProfile | None) -> dict[str, Any]:
    """The profile named, and where the figures come from when that is another machine."""
    doc = {"profile": device.name, "display_name": device.display_name, "kind": device.kind,
           "power_mode": device.default_power_mode, "calibrated": device.calibrated}
    if here is not None:
        doc["measured_on"] = here.name
        doc["note"] = (f"measured on this machine ({here.display_name}), not a {device.name}: "
                       f"latency, memory, peaks and energy are this machine's")
    return doc


def _report(prepared: _Prepared, settings: ProfileSettings, run: _Measured, *,
            device: DeviceProfile, here: DeviceProfile | None, threads: int) -> dict[str, Any]:
    energy, timed_s = run.energy, run.timed_s
    stats = latency_stats(run.samples)
    n = len(run.samples)
    per_call_s = stats.p50 / 1e3
    precision = prepared.precision or settings.precision
    compute: dict[str, Any] = {"params": prepared.params,
                               "flops_per_sample": prepared.flops_per_sample,
                               "precision": precision}
    measured = here or device  # whose peak the achieved FLOP/s is a share of
    if prepared.flops_per_sample:
        achieved = prepared.flops_per_sample * settings.batch / per_call_s
        peak = measured.peak_for(precision)
        compute.update({
            "achieved_flops_per_s": achieved,
            "basis": "FLOPs per call / median latency",
            "peak_flops_per_s": peak,
            "peak_source": measured.sources.get(f"peak.{precision}")
            or measured.sources.get("peak") if peak else None,
            "share_of_peak": achieved / peak if peak else None,
        })
        if not peak:
            compute["note"] = (f"profile {measured.name} has no {precision} peak figure"
                               + ("; run 'edgekit devices --calibrate'" if measured.generic
                                  else ""))
    energy_doc = energy.to_dict()
    if energy.energy_j == energy.energy_j:  # not NaN
        energy_doc["energy_per_inference_j"] = energy.energy_j / n
        energy_doc["energy_per_sample_j"] = energy.energy_j / (n * settings.batch)
        energy_doc["avg_power_w"] = energy.avg_power_w
    return {
        "target": prepared.name,
        "source": prepared.source_record,
        "backend": run.backend,
        "device": _device_doc(device, here),
        "settings": {"batch": settings.batch, "threads": threads, "precision": precision,
                     "energy": settings.energy, **settings.plan.describe()},
        "creation_s": run.creation_s,
        "first_inference_ms": run.first_s * 1e3,
        "warmup_iterations": run.warm_iters,
        "iterations": n,
        "timed_s": timed_s,
        "latency_ms": stats.to_dict(),
        "throughput": {"inferences_per_s": n / timed_s,
                       "samples_per_s": n * settings.batch / timed_s},
        "memory": run.mem.to_dict(),
        "model_size": {"bytes": prepared.size_bytes, "source": prepared.size_source},
        "compute": compute,
        "energy": energy_doc,
    }
