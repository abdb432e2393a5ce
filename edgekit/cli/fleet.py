"""``edgekit fleet``: the scheduler, the device agent and the fleet's status; and the ``--fleet``
and ``--from`` halves of ``edgekit compare`` and ``edgekit profile``.

Workers run the client's code: every machine in a fleet must be trusted (docs/fleet.md).
"""
from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from contextlib import closing
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import (
    JSON_FILE,
    SECONDS,
    claimed_device,
    console,
    err_console,
    progress_bars,
    write_json,
)
from edgekit.errors import UsageError
from edgekit.fileio import atomic_write_text
from edgekit.provenance import report_document

if TYPE_CHECKING:
    from edgekit.profiler.run import ProfileSettings

_TLS = click.option("--tls", "tls_dir", type=click.Path(exists=True, file_okay=False),
                    help="Mutual TLS: a folder with ca.pem, cert.pem and key.pem "
                         "(docs/fleet.md). Default: plain TCP.")
_CSV_COLUMNS = ("device", "name", "family", "params", "flops_per_sample", "latency_p50_ms",
                "latency_p99_ms", "throughput_per_s", "energy_per_inference_j", "energy_source",
                "peak_rss_mib", "pareto_latency", "pareto_energy", "worker", "measured_on")


def _devices(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise UsageError("--devices needs profile names separated by commas")
    return names


def fleet_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--fleet``, ``--devices``, ``--tls``, ``--job-timeout``, shared by compare and profile."""
    options = [
        click.option("--fleet", "fleet_scheduler", metavar="SCHEDULER",
                     help="Measure on the fleet of this scheduler (host:port) instead of here."),
        click.option("--devices", "fleet_devices",
                     help="With --fleet: device kinds (profile names, comma-separated); "
                          "default: every kind connected."),
        _TLS,
        click.option("--job-timeout", type=SECONDS, default=600.0, show_default=True,
                     help="With --fleet: a job running longer on a device fails."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _limits(job_timeout: float) -> Any:
    from edgekit.fleet import Limits

    return Limits(job_timeout_s=job_timeout)


def _client(scheduler: str, tls_dir: str | None) -> Any:
    from edgekit.fleet import connect

    return connect(scheduler, tls_dir=tls_dir)


def _print_failures(failures: list[dict[str, Any]]) -> None:
    """One line per failure, however long, whatever the terminal (a log, a file): the error
    names the device (and the worker) already."""
    for f in failures:
        error = " ".join(f["error"].split())
        if not error.startswith(f["device"]):
            error = f"{f['device']}: {error}"
        err_console.print(f"[yellow]failed: {escape(f['name'])} on {escape(error)}[/yellow]",
                          soft_wrap=True)


def render_fleet_compare(result: dict[str, Any]) -> Table:
    from edgekit.compare.table import format_score

    metric = result["metric"]
    table = Table(title=f"compare on {len(result['devices'])} devices · backend "
                        f"{result['backend']}", title_style="bold")
    for col in ("", "device", "model", metric, "params", "MFLOPs", "p50 ms", "p99 ms",
                "samples/s", "mJ/inf"):
        table.add_column(col, justify="left" if col in ("", "device", "model") else "right",
                         no_wrap=col == "device")
    for r in result["rows"]:
        mark = ("*" if r["pareto_latency"] else "") + ("†" if r["pareto_energy"] else "")
        energy = r["energy_per_inference_j"]
        flops = r.get("flops_per_sample")
        device = r["device"] + (f" (on {r['measured_on']})" if r.get("measured_on") else "")
        table.add_row(mark, device, r["name"], format_score(metric, r[metric]),
                      "-" if r.get("params") is None else f"{r['params']:,}",
                      "-" if flops is None else f"{flops / 1e6:.3f}",
                      f"{r['latency_p50_ms']:.3f}", f"{r['latency_p99_ms']:.3f}",
                      f"{r['throughput_per_s']:.0f}",
                      "-" if math.isnan(energy) else f"{energy * 1e3:.4f}")
    return table


def _to_csv(result: dict[str, Any]) -> str:
    buf = io.StringIO()
    columns = (*_CSV_COLUMNS[:3], result["metric"], *_CSV_COLUMNS[3:])
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(result["rows"])
    return buf.getvalue()


def show_fleet_compare(result: dict[str, Any], *, csv_path: str | None, plot_path: str | None,
                       json_path: str | None) -> None:
    """The merged table, its files, and one line per failed job (exit 1 when any failed)."""
    from edgekit.fleet.plot import plot_fleet

    console.print(render_fleet_compare(result))
    metric = result["metric"] + ("" if result["higher_is_better"] else " (lower is better)")
    console.print(f"* on the device's {metric}-latency frontier, † on its {metric}-energy "
                  "frontier; energy: " + escape(", ".join(result["energy_sources"])))
    if csv_path:
        atomic_write_text(csv_path, _to_csv(result))
        err_console.print(f"[dim]wrote {csv_path}[/dim]")
    if plot_path and result["rows"]:
        plot_fleet(result, plot_path)
        err_console.print(f"[dim]wrote {plot_path}[/dim]")
    write_json(json_path, report_document("compare", result))
    _print_failures(result["failures"])


# Over 8 parameters: the fleet half of the compare command: the compare options it reads, keyword-
# only, passed on from the click command
def compare_fleet_command(names: list[str], settings: ProfileSettings, *,
                          from_paths: list[str], data: str | None, csv_path: str | None,
                          plot_path: str | None, json_path: str | None,
                          fleet_scheduler: str | None, fleet_devices: str | None,
                          tls_dir: str | None, job_timeout: float, evaluate: str | None = None,
                          inputs: tuple[Any, ...] = ()) -> None:
    """``edgekit compare --fleet`` (measure on every selected device kind) or ``--from``
    (merge saved reports); exit 1 when a job failed."""
    from edgekit.fleet import fleet_compare, merge_reports

    if from_paths:
        if names or fleet_scheduler:
            raise UsageError("--from merges saved reports: give no model names and no --fleet")
        result = merge_reports(from_paths)
    else:
        if settings.device is not None:
            raise UsageError("--device does not apply with --fleet",
                             hint="choose device kinds with --devices NAME,...")
        with closing(_client(fleet_scheduler or "", tls_dir)) as client, \
                progress_bars(transient=False) as progress:
            result = fleet_compare(names, client, settings, devices=_devices(fleet_devices),
                                   data=data, limits=_limits(job_timeout), progress=progress,
                                   evaluate=evaluate, inputs=inputs)
    show_fleet_compare(result, csv_path=csv_path, plot_path=plot_path, json_path=json_path)
    if result["failures"] and not from_paths:
        raise click.exceptions.Exit(1)


def profile_fleet_command(target: str, settings: ProfileSettings, *, json_path: str | None,
                          fleet_scheduler: str, fleet_devices: str | None, tls_dir: str | None,
                          job_timeout: float, inputs: tuple[Any, ...] = ()) -> None:
    """``edgekit profile --fleet``: one table per device; exit 1 when a job failed."""
    from edgekit.cli.profile_table import render_profile
    from edgekit.fleet import fleet_profile

    if settings.device is not None:
        raise UsageError("--device does not apply with --fleet",
                         hint="choose device kinds with --devices NAME,...")

    with closing(_client(fleet_scheduler, tls_dir)) as client, \
            progress_bars(transient=True) as progress:
        result = fleet_profile(target, client, settings, devices=_devices(fleet_devices),
                               limits=_limits(job_timeout), progress=progress, inputs=inputs)
    for report in result["reports"]:
        console.print(render_profile(report))
    write_json(json_path, report_document("fleet-profile", result))
    _print_failures(result["failures"])
    if result["failures"]:
        raise click.exceptions.Exit(1)


@click.group("fleet")
def fleet() -> None:
    """Run a device fleet: scheduler, workers, status.

    One worker per device, labelled with its device profile; 'edgekit compare --fleet' and
    'edgekit profile --fleet' send it jobs. Workers run the client's code: join only trusted
    machines (docs/fleet.md).
    """


@fleet.command("scheduler")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Where to listen; 0.0.0.0 (every interface) to let other machines join.")
@click.option("--port", type=click.IntRange(0, 65535), default=8786, show_default=True)
@click.option("--dashboard", metavar="[HOST:]PORT", is_flag=False, flag_value="8787",
              help="Serve Dask's HTTP dashboard (no authentication) on this port, on localhost "
                   "unless a host is given; --dashboard alone: 8787. Default: no HTTP server.")
@_TLS
def scheduler(host: str, port: int, dashboard: str | None, tls_dir: str | None) -> None:
    """Run the fleet's scheduler until interrupted."""
    from edgekit.fleet.scheduler import dashboard_address, run_scheduler

    def ready(where: str, url: str | None) -> None:
        err_console.print(f"fleet scheduler listening on {where}", soft_wrap=True)
        if url is not None:
            err_console.print(f"dashboard on {url} (no authentication)", soft_wrap=True)

    run_scheduler(host, port, tls_dir=tls_dir, ready=ready,
                  dashboard=None if dashboard is None else dashboard_address(dashboard))


@fleet.command("worker")
@click.argument("scheduler")
@click.option("--device", metavar="NAME",
              help="Device profile this machine serves as (default: detected); refused when "
                   "its hardware is not such a device.")
@click.option("--as-device", metavar="NAME",
              help="Serve under another device's profile (a rehearsal on one machine): every "
                   "report says it was measured here, with this machine's peaks and energy.")
@click.option("--name", help="Worker name in 'fleet status' (default: host/profile/pid).")
@_TLS
def worker(scheduler: str, device: str | None, as_device: str | None, name: str | None,
           tls_dir: str | None) -> None:
    """Join SCHEDULER's fleet as this device.

    One job at a time, until interrupted or the scheduler closes."""
    from edgekit.fleet.engine import address, check_listening, security
    from edgekit.fleet.worker import describe_device, run_worker

    device, labelled = claimed_device(device, as_device)
    security(tls_dir)  # a bad --tls folder or address, or no scheduler there: one line, first
    check_listening(address(scheduler, tls_dir is not None), 10.0)
    found = describe_device(device, labelled)
    profile = found["profile"]
    here = f", measured on this {found['measured_on']}" if found.get("measured_on") else ""
    err_console.print(f"joining {scheduler} as a {profile}{here} (resource device:{profile}=1, "
                      f"1 thread; sensors: {', '.join(found['sensors']) or 'none'})")
    run_worker(scheduler, found, name=name, tls_dir=tls_dir)


@fleet.command("status")
@click.argument("scheduler")
@_TLS
@click.option("--json", "json_path", type=JSON_FILE, help="Write the status as JSON.")
def status(scheduler: str, tls_dir: str | None, json_path: str | None) -> None:
    """Devices at SCHEDULER: profile, sensors, busy/idle."""
    from edgekit.fleet import fleet_devices

    with closing(_client(scheduler, tls_dir)) as client:
        devices = fleet_devices(client)
    table = Table(title=f"fleet at {scheduler}: {len(devices)} devices", title_style="bold")
    for col in ("profile", "worker", "host", "sensors", "state", "edgekit"):
        table.add_column(col)
    for d in devices:
        label = d.profile + (f" (labelled; really {d.measured_on})" if d.measured_on else "")
        table.add_row(label, d.name, d.host or "?", ", ".join(d.sensors) or "none",
                      "busy" if d.busy else "idle", d.edgekit or "?")
    console.print(table)
    write_json(json_path, report_document("fleet-status",
                                          {"devices": [d.to_dict() for d in devices]}))
