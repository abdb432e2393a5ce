"""``edgekit estimate``: roofline latency and memory fit of a target on devices not at hand."""
from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import (
    BATCH,
    COUNT,
    JSON_FILE,
    SECONDS,
    THREADS,
    console,
    input_option,
    si_rate,
    write_json,
)
from edgekit.estimate import PRECISIONS, measure_beside
from edgekit.estimate import estimate as run_estimate
from edgekit.inputs import parse_inputs
from edgekit.provenance import report_document
from edgekit.targets import resolve_target


def _size(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def _fits(row: dict[str, Any]) -> str:
    if row["fits"] is None:
        return "- (memory size unknown)"
    verdict = "yes" if row["fits"] else "[red]no[/red]"
    share = row["memory_share"] * 100
    return f"{verdict} ({f'{share:.2g}' if share >= 0.01 else '<0.01'} % of " \
           f"{_size(row['memory_bytes'])})"


def render_estimates(report: dict[str, Any]) -> Table:
    table = Table(title=f"estimate · {escape(report['target'])} · batch {report['batch']} · "
                        f"{report['flops'] / 1e6:,.2f} MFLOPs (all figures estimates)",
                  title_style="bold")
    for column in ("device", "precision", "peak", "bandwidth", "latency (est.)",
                   "bound layers c/m", "weights", "peak act.", "fits (est.)"):
        table.add_column(column, justify="left" if column in ("device", "precision") else "right")
    for row in report["estimates"]:
        latency = (f"{row['latency_ms']:.4g} ms" if row["latency_ms"] is not None
                   else "[dim]-[/dim]")
        bound = (f"{row['compute_bound_layers']}/{row['memory_bound_layers']}"
                 if row["latency_ms"] is not None else "-")
        unit = "OP/s" if row["precision"].startswith("int") else "FLOP/s"
        table.add_row(row["device"], row["precision"], si_rate(row["peak_flops_per_s"], unit),
                      si_rate(row["memory_bandwidth_bytes_s"], "B/s"), latency, bound,
                      _size(row["weights_bytes"]), _size(row["peak_activations_bytes"]),
                      _fits(row))
    return table


def render_layers(report: dict[str, Any], limit: int) -> Table | None:
    """The ``limit`` slowest layers (in model order) on the first device and precision with a
    latency, or None when no profile had the figures for one."""
    first = next((e for e in report["estimates"] if e["latency_ms"] is not None), None)
    if first is None:
        return None
    key, precision = f"{first['device']}/{first['precision']}", first["precision"]
    layers = report["layers"]
    slowest = sorted(range(len(layers)), key=lambda i: -layers[i]["time_ms"][key])[:limit]
    shown = f"the {len(slowest)} slowest of {len(layers)} layers" \
        if len(slowest) < len(layers) else f"{len(layers)} layers"
    table = Table(title=f"per layer on {first['device']} at {precision}: {shown} "
                        f"(estimates; every layer in --json)", title_style="bold")
    for column in ("layer", "kind", "MFLOPs", f"bytes ({precision})", "time (est.)", "bound"):
        table.add_column(column, justify="left" if column in ("layer", "kind", "bound")
                         else "right")
    for i in sorted(slowest):
        layer = layers[i]
        table.add_row(escape(layer["name"]), escape(layer["kind"]), f"{layer['flops'] / 1e6:.3f}",
                      _size(layer["bytes"][precision]), f"{layer['time_ms'][key] * 1e3:.3g} µs",
                      layer["bound"][key])
    return table


def _footer(report: dict[str, Any]) -> None:
    for row in report["estimates"]:
        if row.get("note"):
            console.print(f"[dim]{escape(row['note'])}[/dim]")
    notes = {row["memory_note"] for row in report["estimates"] if row.get("memory_note")}
    for note in notes:
        console.print(f"[dim]jetson: {escape(note)}[/dim]")
    if report["not_counted"]:
        listed = ", ".join(f"{op} x{n}" for op, n in report["not_counted"].items())
        console.print(f"FLOPs not counted (0 in the totals): {escape(listed)}")
    console.print(f"FLOPs: {escape(report['flop_rule'])}")
    for what, formula in report["formulas"].items():
        console.print(f"{what.replace('_', ' ')} (estimate) = {escape(formula)}")


def _measured_line(measured: dict[str, Any]) -> str:
    return (f"measured here on {measured['device']} ({measured['backend']}, fp32, "
            f"{measured['threads']} threads): median {measured['measured_p50_ms']:.4g} ms; "
            f"estimated {measured['estimated_ms']:.4g} ms; measured / estimated = "
            f"{measured['ratio']:.3g}x")


# Over 8 parameters: a click command: one parameter per command-line option, documented in its
# --help
@click.command("estimate")
@click.argument("target")
@click.option("--device", "devices", multiple=True, metavar="NAME|all",
              help="A device profile (repeatable), or 'all' for every profile a model runs on. "
                   "Default: the detected one.")
@click.option("--precision", "precisions", default=",".join(PRECISIONS), show_default=True,
              help="Comma-separated precisions to estimate.")
@click.option("--batch", type=BATCH, default=1, show_default=True)
@click.option("--layers", "layer_rows", type=COUNT, default=12, show_default=True,
              help="Rows of the per-layer table (the slowest layers).")
@click.option("--measure", is_flag=True,
              help="Also profile TARGET here (fp32) and print the measured latency beside the "
                   "estimate for this machine's profile, with their ratio.")
@click.option("--duration", type=SECONDS, default=2.0, show_default=True,
              help="Timed seconds of --measure.")
@click.option("--threads", type=THREADS, help="Intra-op threads of --measure (default: all).")
@click.option("--json", "json_path", type=JSON_FILE, help="Write the report as JSON.")
@input_option
def estimate(target: str, devices: tuple[str, ...], precisions: str, batch: int,
                     layer_rows: int, measure: bool, duration: float, threads: int | None,
                     json_path: str | None, inputs: tuple[str, ...]) -> None:
    """Estimate a model's latency and memory on devices you do not have.

    \b
    TARGET is a registry name, a checkpoint, an ONNX artifact folder, an .onnx or .pt2 file,
    or your own model as path/to/file.py:callable or package.module:callable. Latency is a
    roofline lower bound from each profile's cited peaks and memory bandwidth.
    """
    overrides = tuple(parse_inputs(inputs))
    resolved = resolve_target(target, inputs=overrides, batch=batch)
    names = tuple(dict.fromkeys(p.strip() for p in precisions.split(",")))
    report = run_estimate(resolved, list(devices) or None, names, batch=batch)
    if measure:
        report["measured"] = measure_beside(resolved, report, duration_s=duration,
                                            threads=threads)
    console.print(render_estimates(report))
    layers = render_layers(report, layer_rows)
    if layers is not None:
        console.print(layers)
    _footer(report)
    if measure:
        console.print(_measured_line(report["measured"]))
    write_json(json_path, report_document("estimate", report))
