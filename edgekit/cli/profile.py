"""``edgekit profile``: latency, throughput, memory, FLOP/s and energy of one target."""
from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from edgekit.backends import backend_names, list_backends
from edgekit.cli.choices import LazyHelpOption, RegistryChoice
from edgekit.cli.common import (
    BATCH,
    COUNT,
    JSON_FILE,
    NON_NEGATIVE_SECONDS,
    SECONDS,
    THREADS,
    claimed_device,
    console,
    device_options,
    input_option,
    progress_bars,
    si_rate,
    write_json,
)
from edgekit.cli.fleet import fleet_options, profile_fleet_command
from edgekit.energy import meter_names
from edgekit.inputs import parse_inputs
from edgekit.profiler.run import ProfileSettings
from edgekit.profiler.run import profile as run_profile
from edgekit.profiler.timing import TimingPlan
from edgekit.provenance import report_document


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


def _provider_names() -> list[str]:
    return sorted({p for s in list_backends() for p in s.providers})


def _provider_help() -> str:
    return ("Where it runs: " + "; ".join(f"{s.name}: {', '.join(s.providers)}"
                                          for s in list_backends() if s.providers)
            + ". Default: cpu.")


@click.command("profile")
@click.argument("target")
@click.option("--backend", type=RegistryChoice(backend_names, "backend"), default="torch",
              show_default=True)
@click.option("--provider", type=RegistryChoice(_provider_names, "provider"), cls=LazyHelpOption,
              help_text=_provider_help)
@click.option("--cuda-graph", is_flag=True,
              help="Replay the inference from a captured CUDA graph: TensorRT (trtexec "
                   "--useCudaGraph), or torch with --provider cuda.")
@device_options
@click.option("--batch", type=BATCH, default=1, show_default=True)
@click.option("--threads", type=THREADS, help="Intra-op threads (default: all usable cores).")
@click.option("--warmup", type=NON_NEGATIVE_SECONDS, default=0.2, show_default=True,
              help="Warm-up seconds.")
@click.option("--duration", type=SECONDS, default=3.0, show_default=True, help="Timed seconds.")
@click.option("--iterations", type=COUNT,
              help="A fixed number of timed iterations (overrides --duration).")
@click.option("--energy", type=RegistryChoice(meter_names, "meter"), default="auto",
              show_default=True,
              help="Energy meter; 'auto' uses the profile's sensor and falls back to an estimate.")
@click.option("--sysfs-root", type=click.Path(exists=True, file_okay=False),
              help="Read the energy sensors under this folder instead of / (a container that "
                   "mounts the host's /sys elsewhere); default: $EDGEKIT_SYSFS_ROOT or /.")
@click.option("--json", "json_path", type=JSON_FILE,
              help="Write the report as JSON.")
@input_option
@fleet_options
def profile(target: str, backend: str, provider: str | None, cuda_graph: bool,
            device: str | None, as_device: str | None,
            batch: int, threads: int | None, warmup: float, duration: float,
            iterations: int | None, energy: str, sysfs_root: str | None,
            json_path: str | None, inputs: tuple[str, ...], **fleet: Any) -> None:
    """Measure latency, throughput, memory and energy of TARGET.

    \b
    TARGET is a registry name, a checkpoint, an artifact folder (ONNX or TensorRT engine), an
    .onnx or .pt2 file, or your own model as path/to/file.py:callable or
    package.module:callable. With --fleet it is exported once here and profiled on every device
    kind.
    """
    overrides = tuple(parse_inputs(inputs))
    device, labelled = claimed_device(device, as_device)
    settings = ProfileSettings(backend=backend, device=device, as_device=labelled, batch=batch,
                               threads=threads,
                               plan=TimingPlan(warmup_s=warmup, duration_s=duration,
                                               iterations=iterations), energy=energy,
                               provider=provider, cuda_graph=cuda_graph,
                               sysfs_root=sysfs_root)
    if fleet["fleet_scheduler"]:
        profile_fleet_command(target, settings, json_path=json_path, inputs=overrides, **fleet)
        return
    with progress_bars(transient=True) as progress:
        report = run_profile(target, settings, progress=progress, inputs=overrides)
    console.print(render_profile(report))
    write_json(json_path, report_document("profile", report))
