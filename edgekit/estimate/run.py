"""``edgekit estimate``: what a target would cost on devices the user does not have.

The target is analysed once (its layers, weights and live activations: ``torch_graph`` for a
torch module, ``onnx_graph`` for an ONNX file or artifact) and priced on each device profile at
each precision (``roofline``). With ``measure`` the target is also profiled here with the
profiler, and the measured latency is set beside the estimate for this machine's profile, with
their ratio: it tells the user how far to trust the estimates for the other devices.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgekit.errors import UnknownNameError, UsageError
from edgekit.estimate.layers import Analysis
from edgekit.estimate.onnx_graph import analyse_onnx
from edgekit.estimate.roofline import FORMULAS, roofline
from edgekit.estimate.torch_graph import analyse_module
from edgekit.inputs import InputOverride, check_batch
from edgekit.precisions import all_names, get_precision
from edgekit.profiles import DeviceProfile, detect_profile, list_profiles, load_profile
from edgekit.targets import ModelSource, OnnxFileTarget, Target, resolve_target

PRECISIONS = ("fp32", "fp16", "int8")
ALL = "all"


def analyse(target: Target, batch: int = 1) -> Analysis:
    """The layers of a resolved target (a torch module, an ONNX file or an ONNX artifact)."""
    if isinstance(target, ModelSource):
        return analyse_module(target.model, target.example_inputs(batch), target.name)
    if isinstance(target, OnnxFileTarget):
        return analyse_onnx(target.path, target.inputs, batch, target.name)
    from edgekit.exporters import load_artifact
    from edgekit.inputs import spec_from_onnx

    artifact = load_artifact(target.folder)
    if not artifact.model_path.name.endswith(".onnx"):
        raise UsageError(f"{target.folder} holds a {artifact.format} model; edgekit estimates "
                         f"from a torch module or an ONNX graph",
                         hint=f"give the model it came from: {artifact.source_name}")
    spec = spec_from_onnx(artifact.model_path, batch=batch)
    return analyse_onnx(artifact.model_path, spec, batch, artifact.source_name)


def device_profiles(devices: Sequence[str] | None) -> list[DeviceProfile]:
    """The profiles named (``all``: every one a model runs on; none: the detected one). The
    detected profile stands in for its file, since it carries this machine's memory size."""
    detected = detect_profile()
    if not devices:
        return [detected]
    if ALL in devices:
        chosen = [p for p in list_profiles() if p.kind != "neuromorphic"]
    else:
        chosen = [load_profile(name) for name in dict.fromkeys(devices)]
    for profile in chosen:
        if profile.kind == "neuromorphic":
            raise UsageError(f"{profile.name} is a neuromorphic cost table without peaks or "
                             f"bandwidth", hint=f"price a spiking net with 'edgekit simulate "
                                                f"MODEL --chip {profile.name}'")
    return [detected if p.name == detected.name else p for p in chosen]


def _check_precisions(precisions: Sequence[str]) -> None:
    for name in precisions:
        if name not in all_names():
            raise UnknownNameError("precision", name, all_names())
        if get_precision(name).element_bytes is None:
            raise UsageError(f"precision {name} declares no element width (bits); edgekit "
                             f"cannot size its tensors")


def _layer_rows(analysis: Analysis, estimates: list[dict[str, Any]],
                precisions: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for index, layer in enumerate(analysis.layers):
        widths = {p: get_precision(p).element_bytes for p in precisions}
        row = {"name": layer.name, "kind": layer.kind, "flops": layer.flops, "ops": layer.ops,
               "weight_bytes": {p: layer.weights.bytes_at(w) for p, w in widths.items()},
               "bytes": {p: layer.weights.bytes_at(w) + layer.activations.bytes_at(w)
                         for p, w in widths.items()},
               "time_ms": {}, "bound": {}}
        for est in estimates:
            if est["latency_ms"] is not None:
                key = f"{est['device']}/{est['precision']}"
                row["time_ms"][key] = est["layers_ms"][index]
                row["bound"][key] = est["layers_bound"][index]
        rows.append(row)
    for est in estimates:  # kept per layer above, not twice
        est.pop("layers_ms", None)
        est.pop("layers_bound", None)
    return rows


def estimate(target: Any, devices: Sequence[str] | None = None,
             precisions: Sequence[str] = PRECISIONS, *, inputs: Sequence[InputOverride] = (),
             batch: int = 1) -> dict[str, Any]:
    """Estimates of ``target`` (anything ``resolve_target`` takes) on ``devices`` (profile
    names, or ``["all"]``; None: the detected profile) at ``precisions``, as report data."""
    check_batch(batch)
    _check_precisions(precisions)
    profiles = device_profiles(devices)
    resolved = resolve_target(target, inputs=inputs, batch=batch)
    analysis = analyse(resolved, batch)
    estimates = [roofline(analysis, profile, precision, per_layer=True)
                 for profile in profiles for precision in precisions]
    return {
        "target": analysis.name,
        "batch": batch,
        "estimate": True,
        "method": analysis.method,
        "flop_rule": analysis.flop_rule,
        "formulas": FORMULAS,
        "flops": analysis.flops,
        "weights": {"floating_point_elements": analysis.weights.floats,
                    "other_bytes": analysis.weights.fixed},
        "not_counted": analysis.uncounted,
        "devices": [{"name": p.name, "display_name": p.display_name, "kind": p.kind,
                     "calibrated": p.calibrated} for p in profiles],
        "estimates": estimates,
        "layers": _layer_rows(analysis, estimates, precisions),
    }


def measure_beside(target: Any, report: dict[str, Any], *, duration_s: float = 2.0,
                   threads: int | None = None,
                   inputs: Sequence[InputOverride] = ()) -> dict[str, Any]:
    """Profile ``target`` here (the profiler, fp32, the report's batch) and set its median
    latency beside the fp32 estimate for this machine's profile, with the ratio. Resolve the
    target once (``resolve_target``) and pass it to both calls, so one model is built."""
    from edgekit.profiler.run import ProfileSettings, profile
    from edgekit.profiler.timing import TimingPlan

    resolved = resolve_target(target, inputs=inputs, batch=report["batch"])
    backend = "torch" if isinstance(resolved, ModelSource) else "onnxruntime"
    here = detect_profile()
    here_row = next((e for e in report["estimates"]
                         if e["device"] == here.name and e["precision"] == "fp32"), None)
    if here_row is None:
        here_row = roofline(analyse(resolved, report["batch"]), here, "fp32")
    if here_row["latency_ms"] is None:
        raise UsageError(f"--measure compares with the estimate for this machine's profile "
                         f"{here.name}, which has no fp32 peak or bandwidth",
                         hint="run 'edgekit devices --calibrate' first")
    provider = "cuda" if here.kind in ("gpu", "jetson") else None  # where the estimate is for
    settings = ProfileSettings(backend=backend, batch=report["batch"], threads=threads,
                               plan=TimingPlan(duration_s=duration_s), energy="none",
                               provider=provider)
    measured = profile(resolved, settings)
    p50 = measured["latency_ms"]["p50"]
    return {"device": here.name, "calibrated": here.calibrated, "backend": backend,
            "provider": provider or "cpu",
            "precision": "fp32", "threads": measured["settings"]["threads"],
            "measured_p50_ms": p50, "estimated_ms": here_row["latency_ms"],
            "ratio": p50 / here_row["latency_ms"],
            "ratio_formula": "measured median latency / roofline estimate (>= 1 expected: the "
                             "estimate is a lower bound)"}
