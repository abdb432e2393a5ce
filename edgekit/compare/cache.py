"""Trained checkpoints cached per model, config and dataset, so compare trains each only once."""
from __future__ import annotations

from pathlib import Path

from edgekit.checkpoint import read_checkpoint, save_checkpoint
from edgekit.data import Dataset
from edgekit.errors import UsageError
from edgekit.paths import edgekit_home
from edgekit.progress import Progress
from edgekit.registry import ModelEntry, config_digest
from edgekit.training import train


def cache_path(entry: ModelEntry, variant: str | None, dataset: Dataset) -> Path:
    key = config_digest({"config": entry.config_for(variant), "train": entry.train,
                         "data": dataset.digest})
    stem = entry.name + (f"-{variant}" if variant else "")
    return edgekit_home() / "checkpoints" / f"{stem}-{key}.safetensors"


def cached_checkpoint(entry: ModelEntry, variant: str | None, dataset: Dataset,
                      progress: Progress | None = None) -> Path:
    """Path to a trained checkpoint for this entry/variant/dataset, training one if none exists."""
    path = cache_path(entry, variant, dataset)
    if path.is_file() and _intact(path):
        return path
    result = train(entry, dataset, variant, progress=progress)
    save_checkpoint(result.model, path, metrics=result.metrics(),
                    extra={"dataset": dataset.name, "dataset_digest": dataset.digest})
    return path


def _intact(path: Path) -> bool:
    """A damaged cache entry is retrained, never trusted."""
    try:
        read_checkpoint(path)
    except UsageError:
        return False
    return True
