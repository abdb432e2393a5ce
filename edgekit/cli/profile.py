"""``edgekit profile``: latency, throughput, memory, FLOP/s and energy of one target."""
from __future__ import annotations

from typing import Any

import click

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
    write_json,
)
from edgekit.cli.fleet import fleet_options, profile_fleet_command
from edgekit.cli.profile_table import render_profile
from edgekit.energy import meter_names
from edgekit.inputs import parse_inputs
from edgekit.profiler.run import ProfileSettings
from edgekit.profiler.run import profile as run_profile
from edgekit.profiler.timing import TimingPlan
from edgekit.provenance import report_document


def _provider_names() -> list[str]:
    return sorted({p for s in list_backends() for p in s.providers})


def _provider_help() -> str:
    return ("Where it runs: " + "; ".join(f"{s.name}: {', '.join(s.providers)}"
                                          for s in list_backends() if s.providers)
            + ". Default: cpu.")


# Over 8 parameters: a click command: one parameter per command-line option, documented in its
# --help
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
