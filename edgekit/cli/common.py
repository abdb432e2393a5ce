"""What every CLI command shares: the console, JSON output, name completion in errors."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

# Option types for bounded numbers, re-exported for the commands (edgekit.bounds: shared
# with the ASTRA worker, which is library code and never imports the CLI).
from edgekit.bounds import (  # noqa: F401
    BATCH,
    COUNT,
    MAX_THREADS,
    NON_NEGATIVE,
    NON_NEGATIVE_SECONDS,
    POSITIVE,
    SAMPLES,
    SECONDS,
    SEED,
    THREADS,
    TIMESTEPS,
    FiniteFloatRange,
)
from edgekit.errors import UsageError
from edgekit.fileio import atomic_write_json
from edgekit.progress import ProgressUpdate

# Piped output (files, CI logs, the README's examples) gets a wide console instead of 80 columns,
# so tables are not truncated. No emoji codes: a name such as "wifi-pose-sim:station:" would
# print as one.
console = Console(emoji=False) if sys.stdout.isatty() else Console(width=160, emoji=False)
err_console = Console(stderr=True, emoji=False)



class OutputFile(click.Path):
    """A file to write (``--json``, ``--csv``, ``--plot``): refused at parse time (exit 2) when
    empty or an existing folder, so a command never does its work only to fail at the end."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("needs a file name, got an empty string", param, ctx)
        value = super().convert(value, param, ctx)
        # the nearest folder that exists must be a writable folder (the rest is created)
        folder = Path(os.fspath(value)).expanduser().absolute().parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            self.fail(f"{value}: {folder} is not a folder", param, ctx)
        if not os.access(folder, os.W_OK):
            self.fail(f"{value}: folder {folder} is not writable", param, ctx)
        return value


OUTPUT_FILE = OutputFile()
JSON_FILE = OUTPUT_FILE

# ``--data`` of every command that loads a model's dataset (edgekit.data.load_dataset)
data_option = click.option(
    "--data", type=click.Path(),
    help="Your own .npz with arrays x and y, or a variant of the model's built-in dataset as "
         "DATASET:VARIANT (wifi-pose-sim:station).")


# ``--input`` of every command whose TARGET may be a user's model or an ONNX file
input_option = click.option(
    "--input", "inputs", multiple=True, metavar="NAME:DIMS[:DTYPE[:LOW..HIGH]]",
    help="An input of your own model or ONNX file, trtexec-style (repeatable): "
         "input_ids:1x128:int64:0..30522. Sets what the model's example inputs or graph leave "
         "open (a symbolic dimension, a token-id range).")


def device_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--device NAME`` (checked against this machine's hardware) and ``--as-device NAME`` (this
    machine's figures labelled with another profile, and saying so); see ``claimed_device``."""
    command = click.option(
        "--as-device", metavar="NAME",
        help="Label this machine's figures with another device's profile (a rehearsal); the "
             "report says they were measured here, with this machine's peaks and energy.")(command)
    return click.option(
        "--device", metavar="NAME",
        help="Device profile (default: the detected one); refused when this machine is not "
             "such a device.")(command)


def claimed_device(device: str | None, as_device: str | None) -> tuple[str | None, bool]:
    """``(profile name, labelled only)`` from ``--device`` and ``--as-device``."""
    if device is not None and as_device is not None:
        raise UsageError("give --device or --as-device, not both",
                         hint="--as-device NAME labels this machine's figures with NAME's profile")
    return (as_device, True) if as_device is not None else (device, False)


def si_rate(value: float | None, unit: str, spec: str = ".3g", below: str = ".3g") -> str:
    """``value`` per second with a T/G/M prefix (``12.3 GFLOP/s``); ``spec`` formats the scaled
    figure, ``below`` one under a million; '-' for none or zero."""
    if not value:
        return "-"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:{spec}} {prefix}{unit}"
    return f"{value:{below}} {unit}"


def write_json(path: str | Path | None, document: dict[str, Any]) -> None:
    """Write a report atomically when ``--json FILE`` was given, and say where it went."""
    if path is None:
        return
    if not str(path).strip():
        raise UsageError("--json needs a file name, got an empty string")
    if Path(path).is_dir():
        raise UsageError(f"--json {path} is a folder", hint="give a file name")
    try:
        atomic_write_json(path, document)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    err_console.print(f"[dim]wrote {path}[/dim]")


@contextlib.contextmanager
def progress_bars(*, transient: bool) -> Iterator[Callable[[ProgressUpdate], None]]:
    """A progress callback for library calls: one rich bar on stderr per label, shown from the
    first report on (a command that fails before any work prints only its error line)."""
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[count]}"),
               TextColumn("{task.fields[note]}"), TimeElapsedColumn())
    bars = Progress(*columns, console=err_console, transient=transient)
    tasks: dict[str, TaskID] = {}

    def show(update: ProgressUpdate) -> None:
        count = f"{update.done:g}/{update.total:g}" if update.total != 1.0 else ""
        if not tasks:
            bars.start()
        if update.label not in tasks:
            tasks[update.label] = bars.add_task(update.label, total=update.total,
                                                count=count, note=update.note)
        bars.update(tasks[update.label], completed=update.done, count=count, note=update.note)

    try:
        yield show
    finally:
        if tasks:
            bars.stop()
