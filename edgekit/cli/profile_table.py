"""The table ``edgekit profile`` prints for one profile report, shared with ``profile --fleet``
(one per device)."""
from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import si_rate


def _bytes(value: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def _gpu_memory(figures: dict[str, Any]) -> str:
    """Every ``*_bytes`` figure the backend reported, named after its key: each backend
    measures GPU memory its own way (TensorRT: the engine's scratch and the I/O buffers;
    torch: the caching allocator's peaks), so no key is common to all of them."""
    return ", ".join(f"{key.removesuffix('_bytes').replace('_', ' ')} {_bytes(value)}"
                     for key, value in figures.items() if key.endswith("_bytes"))


def render_profile(report: dict[str, Any]) -> Table:
    lat = report["latency_ms"]
    settings = report["settings"]
    device = report["device"]
    label = device["profile"] + (f" (measured on {device['measured_on']})"
                                 if device.get("measured_on") else "")
    table = Table(title=f"{report['target']} · {report['backend']['backend']} · {label}",
                  show_header=False, title_style="bold")
    table.add_column("what", style="bold")
    table.add_column("value")
    if device.get("measured_on"):
        table.add_row("device", f"[yellow]{escape(device['note'])}[/yellow]")
    table.add_row("settings", f"batch {settings['batch']}, threads {settings['threads']}, "
                              f"{settings['precision']}, {report['iterations']} iterations "
                              f"in {report['timed_s']:.2f} s")
    table.add_row("creation", f"{report['creation_s'] * 1e3:.1f} ms")
    table.add_row("first inference", f"{report['first_inference_ms']:.3f} ms")
    table.add_row("latency (ms)",
                  f"min {lat['min']:.3f}  mean {lat['mean']:.3f}  p50 {lat['p50']:.3f}  "
                  f"p90 {lat['p90']:.3f}  p95 {lat['p95']:.3f}  p99 {lat['p99']:.3f}  "
                  f"max {lat['max']:.3f}")
    for phase, st in report.get("phases_ms", {}).items():
        table.add_row(f"  {phase.replace('_', '-')} (ms)",
                      f"min {st['min']:.3f}  mean {st['mean']:.3f}  p50 {st['p50']:.3f}  "
                      f"p90 {st['p90']:.3f}  p99 {st['p99']:.3f}  max {st['max']:.3f}")
    gpu_mem = report["backend"].get("gpu_memory")
    if gpu_mem:
        table.add_row("GPU memory", _gpu_memory(gpu_mem))
    thr = report["throughput"]
    table.add_row("throughput", f"{thr['inferences_per_s']:.1f} inferences/s, "
                                f"{thr['samples_per_s']:.1f} samples/s")
    mem = report["memory"]
    table.add_row("memory", f"peak RSS {mem['peak_rss_mib']:.1f} MiB "
                            f"(+{mem['increase_mib']:.1f} MiB), {mem['method']}")
    size = report["model_size"]
    table.add_row("model size", f"{size['bytes'] / 1024:.1f} KiB ({size['source']})")
    comp = report["compute"]
    if comp.get("flops_per_sample"):
        share = comp.get("share_of_peak")
        peak_rate = si_rate(comp["peak_flops_per_s"], "FLOP/s", ".2f", ".0f")
        achieved = si_rate(comp["achieved_flops_per_s"], "FLOP/s", ".2f", ".0f")
        peak = (f"{share * 100:.2f}% of peak {peak_rate}" if share
                else comp.get("note", "no peak figure"))
        table.add_row("compute", f"{comp['params']:,} params, {comp['flops_per_sample'] / 1e6:.3f} "
                                 f"MFLOPs/sample, achieved {achieved} ({peak})")
    en = report["energy"]
    if "energy_per_inference_j" in en:
        table.add_row("energy", f"{en['energy_per_inference_j'] * 1e3:.4f} mJ/inference, "
                                f"avg {en['avg_power_w']:.2f} W " + escape(f"[{en['source']}]"))
    else:
        table.add_row("energy", escape(f"unavailable [{en['source']}]"))
    parts = en.get("components") or {}
    if parts and "energy_per_inference_j" in en:
        n = report["iterations"]
        listed = ", ".join(f"{name} {j / n * 1e3:.4f}" for name, j in parts.items())
        role = ("summed into the total" if en.get("components_summed", True)
                else "sub-rails of the total, not added to it")
        table.add_row("  components", escape(f"{listed} mJ/inference ({role})"))
    for name, why in (en.get("omitted") or {}).items():
        table.add_row("", f"[yellow]left out {escape(name)}: {escape(why)}[/yellow]")
    if en.get("note"):
        table.add_row("", f"[dim]{escape(en['note'])}[/dim]")
    if en.get("warning"):
        table.add_row("", f"[yellow]warning: {escape(en['warning'])}[/yellow]")
    return table
