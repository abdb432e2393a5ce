"""Simulated WiFi pose data as an ``edgekit.data.Dataset``, and train/evaluate hooks for entries.

Fits the existing ``Dataset`` without new fields: ``x`` is preprocessed CSI ``(F, 2, 270, 20)``;
``y`` holds keypoints ``(F, 3, 14, 3)`` in metres with NaN rows for absent persons (so the person
count is implied), and frames come in sequences of ``FRAMES_PER_SEQUENCE`` consecutive frames.
``train_entry`` and ``evaluate_dataset`` are the entries' ``trainer`` and ``evaluator`` hooks.
Importing registers the dataset ``wifi-pose-sim`` and its task (``WIFI_POSE``) with edgekit.data,
and its variant ``station`` (``--data wifi-pose-sim:station``: one person on a mark).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from edgekit.data import Dataset, DatasetEntry, DatasetVariant, register_dataset
from edgekit.errors import UsageError
from edgekit.methods.wifi_mamba.csi import N_ANT, N_PKT, N_RX, N_SUB, preprocess
from edgekit.methods.wifi_mamba.simulator import PoseData, Station, simulate_dataset
from edgekit.registry import ModelEntry, TaskSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from edgekit.progress import Progress, ProgressUpdate
    from edgekit.training import TrainResult

FRAMES_PER_SEQUENCE = 8
DATASET_NAME = "wifi-pose-sim"
STATION_NAME = "wifi-pose-sim:station"  # the same task, one person on a mark (``Station``)
PREPROCESSING = "phase-per-receiver"


def _labels(data: PoseData) -> np.ndarray:
    y = data.keypoints.copy()
    absent = np.arange(y.shape[1])[None] >= data.n_persons[:, None]
    y[absent] = np.nan
    return y


def load_wifi_pose(train_sequences: int = 300, test_sequences: int = 60,
                   seed: int = 0, station: Station | None = None) -> Dataset:
    """Held-out sequences use other people and motions (another seed) in the same room;
    ``station``: one person acting on a mark (``simulator.Station``) instead of 1-3 walkers."""
    train = simulate_dataset(train_sequences, FRAMES_PER_SEQUENCE, seed=seed, station=station)
    test = simulate_dataset(test_sequences, FRAMES_PER_SEQUENCE, seed=seed + 10_000,
                            station=station)
    # the preprocessing is part of the data: cached checkpoints of the per-antenna phase era
    # must not be reused
    name, protocol = (DATASET_NAME, "") if station is None else (STATION_NAME, f":{station}")
    digest = hashlib.sha256(f"{DATASET_NAME}:{train_sequences}:{test_sequences}:{seed}:"
                            f"{FRAMES_PER_SEQUENCE}:{PREPROCESSING}{protocol}".encode()
                            ).hexdigest()[:12]
    return Dataset(name, preprocess(train.csi), _labels(train), preprocess(test.csi),
                   _labels(test), digest)


# the code that makes the data: a change to any of these simulates the dataset again
DATA_SOURCES = ("simulator.py", "body.py", "csi.py", "dataset.py")


@functools.cache
def _load_default() -> Dataset:
    """Simulated once (about 20 s), then read from ``$EDGEKIT_HOME`` by every process (train,
    compare, report) and kept in memory: compare loads it for every model it scores."""
    return _cached(DATASET_NAME, load_wifi_pose)


@functools.cache
def _load_station() -> Dataset:
    """The station protocol at ``Station()``'s settings, cached as the default is."""
    return _cached(STATION_NAME, functools.partial(load_wifi_pose, station=Station()))


def _cached(name: str, build) -> Dataset:
    from pathlib import Path

    from edgekit.dataset_cache import cached_dataset, source_digest

    here = Path(__file__).parent
    return cached_dataset(name, source_digest(here / f for f in DATA_SOURCES), build)


WIFI_POSE = register_dataset(DatasetEntry(
    name=DATASET_NAME,
    task=TaskSpec(dataset=DATASET_NAME, metric="mpjpe_mm",
                  input_shape=(2, N_RX * N_ANT * N_SUB, N_PKT), num_classes=0,
                  output_names=("poses", "logits"), higher_is_better=False),
    loader=_load_default,
    description="simulated WiFi CSI of 1-3 people with 3D keypoints (docs/methods/wifi_mamba.md)",
    variants={"station": DatasetVariant(
        loader=_load_station,
        description="one person acting on a mark, where limb pose is observable")}))


def to_split(x: np.ndarray, y: np.ndarray):
    """(x, y) of a pose ``Dataset`` -> ``PoseSplit`` (zero-padded keypoints, counts, sequences)."""
    from edgekit.methods.wifi_mamba.train import PoseSplit

    present = ~np.isnan(y).any(axis=(2, 3))  # (F, 3)
    return PoseSplit(x, np.nan_to_num(y, nan=0.0).astype(np.float32),
                     present.sum(1).astype(np.int64),
                     np.arange(len(x), dtype=np.int64) // FRAMES_PER_SEQUENCE)


def evaluate_dataset(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """MPJPE (mm) over all test frames: the entry's metric (lower is better)."""
    from edgekit.methods.wifi_mamba.train import evaluate_pose_model

    return evaluate_pose_model(model, to_split(x, y))["all"]["mpjpe_mm"]


# Over 8 parameters: the trainer signature every registry entry shares (entry, dataset, variant,
# epochs, seed, progress, model, seconds) plus WiFi-Mamba's validation split and interval
def train_entry(entry: ModelEntry, dataset: Dataset, variant: str | None = None,
                epochs: int | None = None, seed: int = 0, progress: Progress | None = None,
                model: nn.Module | None = None, seconds: float | None = None,
                validation: float | None = None, validate_every: int = 100) -> TrainResult:
    """``edgekit.training.train``'s signature: an epoch is one pass worth of windows. With a
    time budget ``seconds``, training runs that long on a time-based cosine schedule instead.

    ``validation``: hold out this fraction of the training sequences (whole sequences, drawn with
    ``seed``), score MPJPE on them every ``validate_every`` steps and keep the weights that
    scored best (``train.train_pose_model``); the test split stays unseen until the end.

    The result's details hold MPJPE per person count and, for a model with memory, the score
    without it (every frame from a zero state), which isolates what the memory contributes;
    with ``validation``, the selection record (``selection``: the curve and the step kept)."""
    from edgekit.methods.wifi_mamba.train import (
        _streams,
        _windows,
        baselines,
        evaluate_pose_model,
        hold_out,
        train_pose_model,
    )
    from edgekit.training import TrainResult, entry_label, loss_steps

    settings = entry.train
    epochs = settings.epochs if epochs is None else epochs
    torch.manual_seed(seed)  # the initial weights too, so a run is reproducible from its seed
    model = model if model is not None else entry.build(variant)
    split = to_split(dataset.x_train, dataset.y_train)
    held, curve = None, []
    if validation is not None:
        try:
            split, held = hold_out(split, validation, seed=seed)
        except ValueError as exc:
            raise UsageError(f"cannot hold out {validation:g} of {dataset.name}'s training "
                             f"sequences for validation: {exc}") from exc
    progress, validated = _noting_best(progress, curve)

    def on_validate(step: int, mm: float) -> None:
        curve.append([step, mm])
        validated()

    windows = len(_windows(split.sequence, 4))
    steps = max(1, epochs * windows // settings.batch_size)
    started = time.perf_counter()
    label = f"training {entry_label(entry, variant)}"
    if seconds is None:
        on_step = loss_steps(progress, f"{label} ({steps} steps)", steps)
    else:
        on_step = _seconds_steps(progress, f"{label} ({seconds:g} s)", seconds)
    steps, loss = train_pose_model(model, split, seconds=seconds or float("inf"),
                                   batch=settings.batch_size, lr=settings.lr, seed=seed,
                                   max_steps=None if seconds else steps, on_step=on_step,
                                   validation=held, validate_every=validate_every,
                                   on_validate=on_validate)
    test = to_split(dataset.x_test, dataset.y_test)
    details = {"steps": steps, "test": evaluate_pose_model(model, test),
               "baselines": baselines(split, test)}
    if held is not None:
        details["selection"] = selection_record(held, validation, validate_every, curve)
    if _streams(model):
        details["test_without_memory"] = evaluate_pose_model(model, test, memory=False)
    if seconds is not None:  # epochs worth of windows that the budget allowed
        epochs = steps * settings.batch_size // max(1, windows)
    return TrainResult(model.eval(), entry.task.metric, details["test"]["all"]["mpjpe_mm"],
                       epochs, time.perf_counter() - started, loss, details)


def selection_record(held, fraction: float, validate_every: int,
                     curve: list[list[float]]) -> dict[str, object]:
    """What model selection saw and kept: the validation MPJPE curve ([step, mm]; a non-finite
    score as None, so the record stays valid JSON) and the step whose weights the model ended
    with (the best finite score; None if there was none)."""
    curve = [[step, float(mm) if np.isfinite(mm) else None] for step, mm in curve]
    scored = [c for c in curve if c[1] is not None]
    kept = min(scored, key=lambda c: c[1]) if scored else None
    return {"fraction": fraction, "sequences": int(len(np.unique(held.sequence))),
            "frames": int(len(held.x)), "validate_every": validate_every,
            "validation_mpjpe_mm": curve, "kept_step": kept[0] if kept else None,
            "kept_validation_mpjpe_mm": kept[1] if kept else None}


def _noting_best(progress: Progress | None,
                 curve: list[list[float]]) -> tuple[Progress | None, Callable[[], None]]:
    """``progress`` with the best validation MPJPE so far beside the loss (model selection),
    and a callback that shows a new score at once (the last one comes after the last step)."""
    last: list[ProgressUpdate] = []

    def report(update: ProgressUpdate) -> None:
        last[:] = [update]
        scored = [mm for _, mm in curve if np.isfinite(mm)]
        if scored and progress is not None:
            update = dataclasses.replace(update, note=f"{update.note}, best validation "
                                                      f"{min(scored):.1f} mm".lstrip(", "))
        if progress is not None:
            progress(update)

    def validated() -> None:
        if last:
            report(last[0])
    return (report if progress is not None else None), validated


def _seconds_steps(progress: Progress | None, label: str, seconds: float):
    """An ``on_step(loss)`` callback that reports the elapsed share of a time budget."""
    if progress is None:
        return None
    from edgekit.progress import ProgressUpdate

    started = time.perf_counter()
    progress(ProgressUpdate(label, 0.0, 1.0))

    def on_step(loss: float) -> None:
        done = min(1.0, (time.perf_counter() - started) / seconds)
        progress(ProgressUpdate(label, done, 1.0, f"loss {loss:.4f}"))
    return on_step
