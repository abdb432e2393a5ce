"""``edgekit compare``: accuracy against efficiency, with the Pareto frontier marked."""
from __future__ import annotations

import csv
import io
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from edgekit.backends import backend_names
from edgekit.cli.choices import LazyHelpOption, RegistryChoice
from edgekit.cli.common import (
    BATCH,
    JSON_FILE,
    OUTPUT_FILE,
    SECONDS,
    THREADS,
    claimed_device,
    console,
    data_option,
    device_options,
    err_console,
    input_option,
    progress_bars,
    write_json,
)
from edgekit.cli.fleet import compare_fleet_command, fleet_options
from edgekit.compare import compare as run_compare
from edgekit.compare import plot_compare
from edgekit.compare.precision import parse_precisions
from edgekit.compare.table import cells, columns
from edgekit.energy import meter_names
from edgekit.errors import UsageError
from edgekit.fileio import atomic_write_text
from edgekit.inputs import parse_inputs
from edgekit.profiler.run import ProfileSettings
from edgekit.profiler.timing import TimingPlan
from edgekit.provenance import report_document
from edgekit.suites import get_suite, suite_names
from edgekit.suites.run import DEFAULT_PRECISIONS, DEFAULT_SAMPLES, compare_suite

CSV_COLUMNS = ("name", "family", "precision", "params", "flops_per_sample", "size_bytes",
               "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "throughput_per_s",
               "energy_per_inference_j", "energy_source",
               "peak_rss_mib", "pareto_latency", "pareto_energy", "backend")
SPIKING_COLUMNS = ("sops_per_sample", "firing_rate", "energy_45nm_j")


class BackendList(click.ParamType):
    """``onnxruntime`` or a comma-separated list such as ``onnxruntime,torch``."""

    name = "BACKEND[,BACKEND...]"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[str, ...]:
        if isinstance(value, tuple):
            return value
        names = tuple(v.strip() for v in str(value).split(","))
        known = backend_names()
        for name in names:
            if name not in known:
                self.fail(f"{name!r} is not one of {', '.join(known)}", param, ctx)
        if len(set(names)) != len(names):
            self.fail(f"{value!r} names a backend twice", param, ctx)
        return names


def _refuse_with_suite(backends: tuple[str, ...], data: str | None, evaluate: str | None,
                       inputs: tuple[str, ...], from_paths: tuple[str, ...],
                       fleet: str | None) -> None:
    """--suite brings its own models, inputs and scores: options that set those are refused."""
    given = [flag for flag, value in (("--data", data), ("--evaluate", evaluate),
                                      ("--input", inputs), ("--from", from_paths),
                                      ("--fleet", fleet)) if value]
    if given:
        raise UsageError(f"--suite brings its own models, inputs and scores; {given[0]} does not "
                         f"apply to it", hint="give NAMES to pick the suite's members")
    if backends != ("onnxruntime",):
        raise UsageError(f"--suite compares ONNX Runtime artifacts at each precision, not "
                         f"--backend {','.join(backends)}", hint="leave --backend out")


def render_compare(result: dict[str, Any]) -> Table:
    table = Table(title=f"compare on {result['device']['display_name']} · backend "
                        f"{result['backend']}", title_style="bold")
    for col in columns(result):
        left = col in ("", "model", "precision", "backend")
        table.add_column(col, justify="left" if left else "right")
    for r in result["rows"]:
        table.add_row(*cells(result, r))
    return table


def to_csv(result: dict[str, Any]) -> str:
    buf = io.StringIO()
    columns = (*CSV_COLUMNS[:2], result["metric"], *CSV_COLUMNS[2:])
    if result.get("precisions"):
        columns = (*columns, "validated")
    if result.get("estimated_devices"):
        columns = (*columns, "estimated", "estimate_device")
    if any("sops_per_sample" in r for r in result["rows"]):
        columns = (*columns, *SPIKING_COLUMNS)
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(result["rows"])
    return buf.getvalue()


# Over 8 parameters: a click command: one parameter per command-line option, documented in its
# --help
@click.command("compare")
@click.argument("names", nargs=-1)
@device_options
@click.option("--backend", "backends", type=BackendList(), default="onnxruntime",
              show_default=True, cls=LazyHelpOption,
              help_text=lambda: f"One of {', '.join(backend_names())}, or several separated by "
                                "commas (onnxruntime,torch): one row per model and backend.")
@click.option("--batch", type=BATCH, default=1, show_default=True)
@click.option("--threads", type=THREADS, help="Intra-op threads (default: all usable cores).")
@click.option("--duration", type=SECONDS, default=1.0, show_default=True,
              help="Timed seconds per model.")
@click.option("--energy", type=RegistryChoice(meter_names, "meter"), default="auto",
              show_default=True)
@click.option("--sysfs-root", type=click.Path(exists=True, file_okay=False),
              help="Read the energy sensors under this folder instead of / (a container that "
                   "mounts the host's /sys elsewhere); default: $EDGEKIT_SYSFS_ROOT or /.")
@data_option
@click.option("--precision", "precisions",
              help="Comma-separated precisions such as fp32,fp16,int8: one row per model and "
                   "precision, each an ONNX Runtime artifact made as 'edgekit export --to onnx "
                   "--precision' makes it (needs --backend onnxruntime).")
@click.option("--plot", "plot_path", type=OUTPUT_FILE, help="Write a PNG plot.")
@click.option("--csv", "csv_path", type=OUTPUT_FILE, help="Write the table as CSV.")
@click.option("--json", "json_path", type=JSON_FILE,
              help="Write the report as JSON.")
@click.option("--from", "from_paths", type=click.Path(dir_okay=False), multiple=True,
              help="Merge this saved compare report (repeat it) instead of measuring.")
@click.option("--evaluate", type=click.Path(),
              help="Your own models: score each with FUNCTION of path/to/file.py:FUNCTION, "
                   "called with predict(inputs dict) -> outputs dict; it returns a number "
                   "(higher is better) or {metric, value, higher_is_better}.")
@click.option("--estimate-device", "estimate_devices", multiple=True, metavar="NAME|all",
              help="Add an estimated row per model for this device profile (repeatable; 'all'): "
                   "latency from 'edgekit estimate', energy not measured, marked ~, off the "
                   "fronts.")
@click.option("--suite", type=RegistryChoice(suite_names, "suite"),
              help="Run a suite of real-size models instead of NAMES (NAMES then pick its "
                   "members): each at every --precision (default fp32,fp16,int8), scored by "
                   "top-1 agreement with its own FP32 outputs on --suite-samples random inputs.")
@click.option("--suite-samples", type=click.IntRange(min=1), default=DEFAULT_SAMPLES,
              show_default=True, help="Inputs per suite member for the agreement score.")
@input_option
@fleet_options
def compare(names: tuple[str, ...], device: str | None, as_device: str | None,
            backends: tuple[str, ...], batch: int,
            threads: int | None, duration: float, energy: str, sysfs_root: str | None,
            data: str | None, precisions: str | None,
            plot_path: str | None, csv_path: str | None, json_path: str | None,
            from_paths: tuple[str, ...], evaluate: str | None, suite: str | None,
            suite_samples: int, inputs: tuple[str, ...], estimate_devices: tuple[str, ...],
            **fleet: Any) -> None:
    """Compare models on their task metric, latency and energy.

    \b
    NAMES are registry entries (ENTRY or ENTRY:VARIANT), checkpoints, artifact folders, or your
    own models (.onnx, .pt2, path/to/file.py:callable, package.module:callable). Built-in models
    are scored on their datasets; yours on --data FILE.npz (an array per input, named after it,
    and labels: top-1 accuracy of the first output) or by --evaluate; with neither, the table
    shows the efficiency columns alone. With --fleet they are measured on every device kind of
    a fleet; with --from, saved reports are merged instead. With --suite, a suite's models
    (edgekit.suites) are compared, each member's rows with their own Pareto fronts.
    """
    device, labelled = claimed_device(device, as_device)
    settings = ProfileSettings(backend=backends[0], device=device, as_device=labelled,
                               batch=batch, threads=threads,
                               plan=TimingPlan(duration_s=duration), energy=energy,
                               sysfs_root=sysfs_root)
    if (from_paths or fleet["fleet_scheduler"]) and precisions:
        raise UsageError("--precision applies to a compare run here, not to --from or a fleet")
    if from_paths and (evaluate or inputs):
        raise UsageError("--evaluate and --input apply to a compare run, not to --from")
    if (from_paths or fleet["fleet_scheduler"]) and estimate_devices:
        raise UsageError("--estimate-device applies to a compare run here, not to --from or a "
                         "fleet")
    if (from_paths or fleet["fleet_scheduler"]) and len(backends) > 1:
        raise UsageError("several backends apply to a compare run here, not to --from or a fleet")
    if suite is not None and estimate_devices:
        raise UsageError("--estimate-device applies to a compare of NAMES, not to --suite",
                         hint="estimate a suite member with 'edgekit estimate'")
    if suite is not None:
        _refuse_with_suite(backends, data, evaluate, inputs, from_paths, fleet["fleet_scheduler"])
        with progress_bars(transient=False) as progress:
            result = compare_suite(get_suite(suite), settings, models=list(names) or None,
                                   precisions=parse_precisions(precisions or DEFAULT_PRECISIONS),
                                   samples=suite_samples, progress=progress)
    elif from_paths or fleet["fleet_scheduler"]:
        compare_fleet_command(list(names), settings, from_paths=list(from_paths), data=data,
                              csv_path=csv_path, plot_path=plot_path, json_path=json_path,
                              evaluate=evaluate, inputs=tuple(parse_inputs(inputs)), **fleet)
        return
    else:
        with progress_bars(transient=False) as progress:
            result = run_compare(list(names), settings, data=data, progress=progress,
                                 precisions=precisions, backends=backends, evaluate=evaluate,
                                 inputs=tuple(parse_inputs(inputs)),
                                 estimate_devices=estimate_devices)
    console.print(render_compare(result))
    if suite is not None:
        console.print(f"random weights: {result['metric']} is top-1 agreement with each model's "
                      f"own FP32 outputs on {suite_samples} random inputs, not accuracy; "
                      f"the fronts are drawn within each model's rows")
    if not result.get("scored", True):
        console.print("not scored: give --data FILE.npz (an array per input and labels) or "
                      "--evaluate file.py:fn; the fronts are over the costs alone")
    metric = result["metric"] + ("" if result["higher_is_better"] else " (lower is better)")
    console.print(f"* on the {metric}-latency frontier, † on the {metric}-energy frontier; energy: "
                  + escape(", ".join(result["energy_sources"])))
    spiking = [r for r in result["rows"] if "sops_per_sample" in r]
    if spiking:
        console.print(f"MSOPs, 45nm µJ: spiking rows, counted as 'edgekit simulate' counts them on "
                      f"the first {spiking[0]['spiking_samples']} test samples; "
                      f"{spiking[0]['energy_45nm_formula']}, Horowitz ISSCC 2014 45 nm")
    if result.get("estimated_devices"):
        console.print("~ estimated: latency is the roofline lower bound of 'edgekit estimate' "
                      "from the profile's peaks, energy not measured; off the fronts")
    if any(r.get("validated") is False for r in result["rows"]):
        console.print("! outside the precision's tolerance against the FP32 reference (its "
                      f"{result['metric']} shows what that costs)")
    for reason in result["refused"]:
        err_console.print(f"refused: {reason}", markup=False, highlight=False)
    if csv_path:
        atomic_write_text(csv_path, to_csv(result))
        err_console.print(f"[dim]wrote {csv_path}[/dim]")
    if plot_path:
        plot_compare(result, plot_path)
        err_console.print(f"[dim]wrote {plot_path}[/dim]")
    write_json(json_path, report_document("compare", result))
