"""Spik4lite on the command line: ``edgekit train ENTRY --spik4lite [--target-keep 0.5]`` trains
any spiking registry entry with the Spik4lite schedule and saves the pruned net's checkpoint."""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import click

from edgekit.bounds import COUNT, KEEP_FRACTION, NON_NEGATIVE
from edgekit.cli.common import console, err_console
from edgekit.errors import UsageError
from edgekit.methods import TrainMode
from edgekit.methods.spik4lite.distill import DISTILL_WEIGHT, load_teacher
from edgekit.methods.spik4lite.trainer import (
    LAMBDA,
    PAPER_LAMBDA,
    Schedule,
    Spik4liteConfig,
    train_spik4lite,
)
from edgekit.methods.spik4lite.warm_start import load_start
from edgekit.registry import ModelEntry

DEFAULT_KEEP = 0.5
OWN_OPTIONS = ("target_keep", "cycles", "energy_lambda", "teacher", "distill_weight", "init")


def select(entry: ModelEntry, options: Mapping[str, Any]) -> Callable[..., Any] | None:
    """The Spik4lite trainer when ``--spik4lite`` is given; its options alone are an error."""
    if not options.get("spik4lite"):
        if any(options.get(k) is not None for k in OWN_OPTIONS):
            flags = [f"--{k.replace('_', '-')}" for k in OWN_OPTIONS]
            raise UsageError(f"{', '.join(flags[:-1])} and {flags[-1]} need --spik4lite")
        return None
    if not entry.spiking:
        raise UsageError(f"'{entry.name}' is not a spiking model; --spik4lite gates spiking nets",
                         hint="pick a model with spiking=True (edgekit models)")
    keep = options.get("target_keep") or DEFAULT_KEEP
    cycles = options.get("cycles") or 3
    lam = options.get("energy_lambda")
    lam = LAMBDA if lam is None else lam
    weight = options.get("distill_weight")
    if weight is not None and options.get("teacher") is None:
        raise UsageError("--distill-weight needs --teacher")
    distillation = (load_teacher(options["teacher"], entry, weight or DISTILL_WEIGHT)
                    if options.get("teacher") is not None else None)
    init = load_start(options["init"], entry) if options.get("init") is not None else None

    def trainer(entry: ModelEntry, dataset: Any, **kwargs: Any) -> Any:
        epochs = kwargs.pop("epochs", None) or entry.train.epochs
        for source in (distillation, init):
            other = source and source.other_data(dataset.name, dataset.digest)
            if other:
                err_console.print(f"[yellow]warning:[/yellow] {other}")
        config = Spik4liteConfig(target_keep=keep, lam=lam,
                                 schedule=Schedule.split(epochs, cycles),
                                 distillation=distillation, init=init)
        result = train_spik4lite(entry, dataset, config, **kwargs)
        say_keep(result.details["spik4lite"], cycles)
        return result
    return functools.update_wrapper(trainer, train_spik4lite)


def say_keep(record: Mapping[str, Any], cycles: int) -> None:
    """The keep reached, and a warning when the per-step caps stopped short of the target."""
    reached, target = record["keep"], record["target_keep"]
    console.print(f"spik4lite: kept {record['channels_after']} of {record['channels_before']} "
                  f"prunable channels ({reached:.3f}; target {target})")
    if reached > target + 0.02:
        err_console.print(f"[yellow]warning:[/yellow] the target keep {target} was not reached "
                          f"in {cycles} removal cycle(s): one step removes at most half of a "
                          f"channel group (30 % in the tokenizer); give more --cycles")


TRAIN_MODES = [TrainMode(options=(
    click.Option(["--spik4lite"], is_flag=True,
                 help="Train with Spik4lite: gated channels, physical removal, fine-tune "
                      "(spiking models)."),
    click.Option(["--target-keep"], type=KEEP_FRACTION,
                 help=f"Spik4lite: fraction of prunable channels to keep (default "
                      f"{DEFAULT_KEEP})."),
    click.Option(["--cycles"], type=COUNT, help="Spik4lite: removal cycles (default 3)."),
    click.Option(["--energy-lambda"], type=NON_NEGATIVE,
                 help=f"Spik4lite: weight of the energy penalty (default {LAMBDA}; the paper's "
                      f"{PAPER_LAMBDA} switches no gate off in a digits-sized run)."),
    click.Option(["--teacher"], type=click.Path(dir_okay=False),
                 help="Spik4lite: distil from this trained checkpoint of the same task, e.g. "
                      "the dense net (edgekit train MODEL)."),
    click.Option(["--distill-weight"], type=KEEP_FRACTION,
                 help=f"Spik4lite: share of the teacher's soft loss (default "
                      f"{DISTILL_WEIGHT}; needs --teacher)."),
    click.Option(["--init"], type=click.Path(dir_okay=False),
                 help="Spik4lite: prune this trained checkpoint of the same model (e.g. the "
                      "dense net) instead of training from fresh weights."),
), select=select)]
