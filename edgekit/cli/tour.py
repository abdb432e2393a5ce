"""``edgekit tour``: run the demo tour (``make demo``) and write its report."""
from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli.common import console, err_console, write_json
from edgekit.errors import CheckFailed, UsageError
from edgekit.interpreter import module_command
from edgekit.provenance import report_document


def _check_folder(out: Path, force: bool) -> None:
    """The tour writes its own files into ``out`` and deletes nothing; a non-empty folder that no
    tour wrote (no tour.json) is still refused without --force, as its files may share names."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out} is a file", hint="give a folder")
    if force or not out.is_dir() or not any(out.iterdir()) or (out / "tour.json").is_file():
        return
    raise UsageError(f"{out} is a folder the tour did not write (no tour.json in it)",
                     hint="choose another -o, or pass --force to write into it")


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of the finished child processes: on a loaded machine a
    step's wall time says little, its CPU time what it would need alone."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _install_weights(weights: dict[str, Path]) -> None:
    """Copy the shipped demo checkpoints, each checked against its SHA-256, into the tour's
    cache (files the tour owns; a corrupted one stops the tour before any step)."""
    from edgekit.demo_weights import install

    for name, dest in weights.items():
        install(name, dest)
    console.print(f"[bold]demo weights[/bold] {len(weights)} trained checkpoints checked and "
                  f"copied to {escape(str(next(iter(weights.values())).parent))}")


def _shown(args: tuple[str, ...], out: Path) -> list[str]:
    from edgekit.tour import shown

    return ["edgekit", *(shown(a, out) for a in args)]


def _run(args: tuple[str, ...], cwd: Path | None) -> None:
    shown = " ".join(args)
    if cwd is not None:
        cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(module_command("edgekit", *args), cwd=cwd, check=False)
    if proc.returncode != 0:
        raise CheckFailed(f"tour step 'edgekit {shown}' failed with exit code {proc.returncode}",
                          hint="its output is above")


@click.command("tour")
@click.option("-o", "--output", type=click.Path(file_okay=False), default="edgekit-demo",
              show_default=True, help="Folder for the report, tables, plots and JSON.")
@click.option("--full", is_flag=True,
              help="The long tour: every model trained to its schedule, longer measurements.")
@click.option("--force", is_flag=True, help="Write into a folder the tour did not write.")
def tour(output: str, full: bool, force: bool) -> None:
    """A tour of every method, ending in one HTML report.

    Runs the commands a newcomer would type, each method against its own baseline: the digits
    comparison (reference nets, WBMM and its depthwise twin, an SSA spiking net and its ReLU
    twin, Spikingformer unpruned and pruned by Spik4lite), simulate of the spiking net, profile
    and validate, ZipMoE benches (tiny experts, and small ones read at an edge board's storage
    speed), ASTRA against one device and sequence parallelism over 10 Mbps-1 Gbps links, and
    WiFi-Mamba against its baseline on the station protocol; then 'edgekit report', which
    judges each method's claim. The short tour uses the trained checkpoints shipped with
    edgekit (checked by SHA-256, copied under $EDGEKIT_HOME/tour; the page says what it cut);
    --full trains every model to its schedule and measures longer.
    """
    from edgekit.tour import plan

    out = Path(output)
    _check_folder(out, force)
    out.mkdir(parents=True, exist_ok=True)
    planned = plan(out, full=full)
    started = time.perf_counter()
    times = []
    if planned.weights:
        _install_weights(planned.weights)
    for i, step in enumerate(planned.steps, start=1):
        head = f"[bold]{i}/{len(planned.steps)}[/bold] {escape(step.title)}"
        if step.cached is not None and step.cached.exists():
            console.print(f"{head} [dim](cached: {escape(str(step.cached))})[/dim]")
            times.append({"step": step.title, "command": _shown(step.args, out),
                          "seconds": 0.0, "cpu_seconds": 0.0, "cached": True})
            continue
        console.print(f"{head}\n[dim]$ edgekit {escape(' '.join(step.args))}[/dim]")
        t0, cpu0 = time.perf_counter(), _children_cpu_s()
        _run(step.args, step.cwd)
        times.append({"step": step.title, "command": _shown(step.args, out),
                      "seconds": round(time.perf_counter() - t0, 2),
                      "cpu_seconds": round(_children_cpu_s() - cpu0, 2), "cached": False})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    write_json(out / "tour.json", report_document("tour", {
        "full": full, "steps": times, "shortened": planned.shortened,
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(sum(s["cpu_seconds"] for s in times), 1),
        "cpu_count": os.cpu_count(), "load_average_1min_at_end": load}))
    report = out / "report.html"
    console.print(f"[bold]report[/bold]\n[dim]$ edgekit report ... -o {escape(str(report))}[/dim]")
    _run(("report", *map(str, planned.report_inputs), "-o", str(report),
          *(("--force",) if force else ())), None)
    err_console.print(f"tour done in {time.perf_counter() - started:.0f} s: open {report}")
