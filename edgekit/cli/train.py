"""``edgekit train``: train a registry model on its dataset and write a checkpoint."""
from __future__ import annotations

from pathlib import Path

import click

from edgekit.checkpoint import save_checkpoint
from edgekit.cli.common import (
    COUNT,
    JSON_FILE,
    SECONDS,
    SEED,
    console,
    data_option,
    progress_bars,
    write_json,
)
from edgekit.data import load_dataset
from edgekit.errors import UsageError
from edgekit.fileio import check_output
from edgekit.provenance import report_document
from edgekit.registry import split_name
from edgekit.training import train as run_training


class _TrainCommand(click.Command):
    """``train`` with the options of the methods' training modes (``--spik4lite``), added when
    the command is first parsed or shown, so starting the CLI does not import every method."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not getattr(self, "_modes_added", False):
            from edgekit import methods

            self._modes_added = True
            self.params.extend(o for mode in methods.train_modes() for o in mode.options)
        return super().get_params(ctx)


# Over 8 parameters: a click command: one parameter per command-line option, documented in its
# --help
@click.command("train", cls=_TrainCommand)
@click.argument("model")
@click.option("--epochs", type=COUNT, help="Epochs (default: the entry's).")
@data_option
@click.option("--seconds", type=SECONDS,
              help="Time budget for training; every model's trainer stops when it runs out.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Checkpoint path (.safetensors); default ./MODEL.safetensors.")
@click.option("--json", "json_path", type=JSON_FILE,
              help="Write the metrics as JSON.")
@click.option("--force", is_flag=True,
              help="Replace -o even if it exists and edgekit did not write it.")
def train(model: str, epochs: int | None, seconds: float | None, data: str | None, seed: int,
          output: str | None, json_path: str | None, force: bool,
          **mode_options: object) -> None:
    """Train MODEL and save a safetensors checkpoint.

    MODEL is a registry name or NAME:VARIANT.
    """
    entry, variant = split_name(model)
    from edgekit import methods

    trainer = None
    for mode in methods.train_modes():  # a method's own way of training (--spik4lite)
        trainer = mode.select(entry, mode_options) or trainer
    out = Path(output or f"{model.replace(':', '-')}.safetensors")
    if out.suffix != ".safetensors":
        raise UsageError(f"-o {out}: checkpoints end in .safetensors")
    check_output(out, force=force)  # before any work
    dataset = load_dataset(entry.task, data)
    console.print(f"training [bold]{model}[/bold] on {dataset!r}")
    with progress_bars(transient=False) as progress:
        result = run_training(entry, dataset, variant, epochs=epochs, seed=seed,
                              progress=progress, seconds=seconds, trainer=trainer)
    save_checkpoint(result.model, out, metrics=result.metrics(),
                    extra={"dataset": dataset.name, "dataset_digest": dataset.digest, "seed": seed})
    console.print(f"{result.metric} on the test split: [bold]{result.value:.4f}[/bold] "
                  f"({result.epochs} epochs, {result.seconds:.1f} s)")
    console.print(f"checkpoint: {out}")
    write_json(json_path, report_document("train", {"model": model, "checkpoint": str(out),
                                                    "dataset": dataset.name, **result.metrics(),
                                                    "details": result.details}))

