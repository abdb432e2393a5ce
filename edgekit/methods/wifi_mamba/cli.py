"""WiFi pose training on the command line: ``edgekit train wifi-mamba --validation 0.1`` holds
out a tenth of the training sequences and keeps the weights that scored best on them, instead
of the last ones (a small pose model overfits its training frames well before a long budget
ends; benchmarks/wifi_pose.py selects the same way)."""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import click

from edgekit.bounds import COUNT, OPEN_FRACTION
from edgekit.cli.common import console
from edgekit.errors import UsageError
from edgekit.methods import TrainMode
from edgekit.methods.wifi_mamba.dataset import train_entry
from edgekit.registry import ModelEntry

FAMILY = "wifi_mamba"
DEFAULT_EVERY = 100


def select(entry: ModelEntry, options: Mapping[str, Any]) -> Callable[..., Any] | None:
    """The pose trainer with model selection when ``--validation`` is given."""
    fraction, every = options.get("validation"), options.get("validate_every")
    if fraction is None:
        if every is not None:
            raise UsageError("--validate-every needs --validation")
        return None
    if entry.family != FAMILY:
        raise UsageError(f"--validation selects among the weights of a WiFi pose model; "
                         f"'{entry.name}' is not one", hint="wifi-mamba or wifi-petr")
    every = every or DEFAULT_EVERY

    def trainer(entry: ModelEntry, dataset: Any, **kwargs: Any) -> Any:
        result = train_entry(entry, dataset, validation=fraction, validate_every=every, **kwargs)
        say_selection(result.details["selection"])
        return result
    return functools.update_wrapper(trainer, train_entry)


def say_selection(record: Mapping[str, Any]) -> None:
    """Which step's weights were kept, and on how much held-out data that was judged."""
    held = f"{record['sequences']} held-out sequence(s), {record['frames']} frames"
    if record["kept_step"] is None:
        console.print(f"validation: no finite score on {held}; kept the last weights")
        return
    console.print(f"validation: kept step {record['kept_step']} of "
                  f"{record['validation_mpjpe_mm'][-1][0]} (MPJPE "
                  f"{record['kept_validation_mpjpe_mm']:.1f} mm on {held})")


TRAIN_MODES = [TrainMode(options=(
    click.Option(["--validation"], type=OPEN_FRACTION,
                 help="WiFi pose models: hold out this fraction of the training sequences and "
                      "keep the weights that score best on them (MPJPE)."),
    click.Option(["--validate-every"], type=COUNT,
                 help=f"WiFi pose models: steps between validations (default {DEFAULT_EVERY}; "
                      f"with --validation)."),
), select=select)]
