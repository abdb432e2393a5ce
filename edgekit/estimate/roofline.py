"""Price an ``Analysis`` on a device profile at a precision: roofline latency and memory fit.

Per layer, time = max(FLOPs / peak FLOP/s at the precision, bytes / memory bandwidth), the
roofline model (Williams, Waterman and Patterson, CACM 2009); the model's time is the sum over
layers. It is a lower bound: no kernel launch or framework overhead, compute and memory
traffic overlapping perfectly, every byte crossing DRAM once per layer at the peak rate. Bytes
are the weights read plus the activations read and written, floating-point tensors at the
precision's width (int8: a fully quantised graph), integer tensors at their own.
"""
from __future__ import annotations

from typing import Any

from edgekit.estimate.layers import Analysis
from edgekit.precisions import calibrated_names, get_precision
from edgekit.profiles import DeviceProfile

FORMULAS = {
    "latency": "sum over layers of max(FLOPs / peak[precision], bytes / memory bandwidth): a "
               "roofline lower bound (no launch overheads, perfect overlap, every byte from "
               "DRAM once per layer)",
    "bytes": "weights read + activations read and written; floating-point tensors at the "
             "precision's width, integer tensors at their own",
    "peak_activations": "largest sum of live activations under a simple sequential liveness "
                        "(a tensor lives from the op that makes it to the last op that reads it; "
                        "no buffer reuse)",
    "fits": "weights + peak activations <= device memory",
}
JETSON_NOTE = ("memory shared by CPU and GPU: the OS, the runtime and other processes take part "
               "of it")


def _cite(profile: DeviceProfile, field: str) -> str | None:
    return profile.sources.get(field)


def roofline(analysis: Analysis, profile: DeviceProfile, precision: str,
             per_layer: bool = False) -> dict[str, Any]:
    """The estimate of ``analysis`` on ``profile`` at ``precision``, as report data; with
    ``per_layer``, each layer's time and bound too (``layers_ms``, ``layers_bound``)."""
    width = get_precision(precision).element_bytes
    peak = profile.peak_for(precision)
    bandwidth = profile.memory_bandwidth_bytes_s
    weights = analysis.weights.bytes_at(width)
    activations = analysis.peak_activations(width)
    needed = weights + activations
    missing = [what for what, value in (("peak", peak), ("memory bandwidth", bandwidth))
               if not value]
    row: dict[str, Any] = {
        "device": profile.name, "precision": precision, "element_bytes": width,
        "peak_flops_per_s": peak, "peak_source": _cite(profile, f"peak.{precision}"),
        "memory_bandwidth_bytes_s": bandwidth,
        "bandwidth_source": _cite(profile, "memory.bandwidth_gbs"),
        "latency_ms": None, "compute_bound_layers": None, "memory_bound_layers": None,
        "bytes": sum(layer.weights.bytes_at(width) + layer.activations.bytes_at(width)
                     for layer in analysis.layers),
        "weights_bytes": weights, "peak_activations_bytes": activations,
        "memory_bytes": profile.memory_bytes, "fits": None, "memory_share": None,
        "estimate": True,
    }
    if profile.memory_bytes:
        row.update(fits=needed <= profile.memory_bytes,
                   memory_share=needed / profile.memory_bytes)
        if profile.kind == "jetson":
            row["memory_note"] = JETSON_NOTE
    if missing:
        hint = ("; run 'edgekit devices --calibrate'"
                if profile.generic and precision in calibrated_names() else "")
        row["note"] = f"no {' or '.join(missing)} figure for {precision} in {profile.name}{hint}"
        return row
    times = [(layer, layer.flops / peak,
              (layer.weights.bytes_at(width) + layer.activations.bytes_at(width)) / bandwidth)
             for layer in analysis.layers]
    compute = sum(c > m for _, c, m in times)
    row.update(latency_ms=sum(max(c, m) for _, c, m in times) * 1e3,
               compute_bound_layers=compute, memory_bound_layers=len(times) - compute)
    if per_layer:
        row.update(layers_ms=[max(c, m) * 1e3 for _, c, m in times],
                   layers_bound=["compute" if c > m else "memory" for _, c, m in times])
    return row
