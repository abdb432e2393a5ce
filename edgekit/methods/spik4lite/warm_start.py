"""Spik4lite from a trained net [ours]: ``--init dense.safetensors`` starts the schedule from the
weights of a trained checkpoint of the same model instead of fresh ones.

The authors train with the gates from scratch. On the digits Spikingformer at keep 0.5 (30
epochs, seeds 0 / 1 / 2) that loses 3.3 / 3.1 / 1.9 points on the labels alone and 0.6 / 1.4 /
1.1 distilling from the dense net (``--teacher``). Started from that dense net (trained 30 epochs
itself, as a user does to compare against), the same schedule lost -0.6 / 0.3 / 1.7 points on
the labels alone and -0.6 / 0.3 / 0.3 with the teacher (benchmarks/README.md, "spik4lite.py"):
pruning a trained net, the usual way of structured pruning, keeps most of what it has learnt.
The gates then choose other channels than from scratch (they cost channels by the trained net's
firing rates): the pruned net is wider at the same keep (39-41k parameters against 26-30k).

A pruned checkpoint is a valid start too: the keep is then counted from its widths.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from edgekit.errors import UsageError
from edgekit.registry import ModelEntry


def trained_on(info: dict) -> tuple[str, str] | None:
    """The (dataset, digest) a checkpoint records (``edgekit train`` writes them), or None."""
    data = (info.get("dataset"), info.get("dataset_digest"))
    return data if all(data) else None  # type: ignore[return-value]


def other_data(role: str, source: str, data: tuple[str, str] | None, dataset_name: str,
               digest: str) -> str | None:
    """Why a checkpoint's data are not this run's (None when they are, or are unknown): what it
    learnt elsewhere, perhaps this run's test samples, then flatters the test accuracy."""
    if data is None or data[1] == digest:
        return None
    name, theirs = data
    return (f"the {role} {source} was trained on other data ('{name}', digest {theirs}) than "
            f"this run ('{dataset_name}', digest {digest}); if those data hold this run's test "
            f"samples, the test accuracy overstates the student's")


@dataclass
class WarmStart:
    """A trained model to prune, and where it came from."""

    model: nn.Module
    model_name: str  # registry name with its variant, as the checkpoint records it
    source: str
    trained_on: tuple[str, str] | None = None

    def check(self, name: str) -> None:
        """The start must be the model being trained (entry and variant)."""
        if name != self.model_name:
            raise UsageError(f"--init {self.source} holds '{self.model_name}', not '{name}'",
                             hint=f"train with the checkpoint's model: edgekit train "
                                  f"{self.model_name} --spik4lite --init {self.source}")

    def other_data(self, dataset_name: str, digest: str) -> str | None:
        return other_data("starting checkpoint", self.source, self.trained_on, dataset_name,
                          digest)

    def to_json(self) -> dict[str, object]:
        record: dict[str, object] = {"checkpoint": self.source, "model": self.model_name}
        if self.trained_on is not None:
            record["dataset"], record["dataset_digest"] = self.trained_on
        return record


def load_start(path: str | Path, entry: ModelEntry) -> WarmStart:
    """A trained checkpoint of ``entry`` to start Spik4lite from (checked, weights verified)."""
    from edgekit.checkpoint import load_checkpoint

    try:
        model, ckpt = load_checkpoint(path)
    except UsageError as exc:
        raise UsageError(f"--init: {exc.message}", hint=exc.hint) from exc
    if ckpt.entry.name != entry.name:
        raise UsageError(f"--init {path} holds '{ckpt.model_name}', not '{entry.name}'",
                         hint=f"start from a checkpoint of {entry.name}: edgekit train "
                              f"{entry.name}")
    return WarmStart(model, ckpt.model_name, str(path), trained_on(ckpt.info))
