"""Training and evaluation on an entry's dataset, reporting progress to the caller's callback."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from edgekit.data import Dataset
from edgekit.errors import UsageError
from edgekit.progress import Progress, ProgressUpdate
from edgekit.registry import ModelEntry, TrainSettings


@dataclass(frozen=True)
class TrainResult:
    model: nn.Module
    metric: str
    value: float  # on the test split
    epochs: int
    seconds: float
    final_loss: float
    details: dict[str, Any] = field(default_factory=dict)  # the trainer's own extra figures

    def metrics(self) -> dict[str, float]:
        return {self.metric: self.value, "train_seconds": round(self.seconds, 2),
                "epochs": self.epochs, "final_loss": round(self.final_loss, 5)}


@torch.inference_mode()
def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 256) -> float:
    """Top-1 accuracy of ``model`` on (x, y)."""
    model.eval()
    correct = 0
    for start in range(0, len(x), batch_size):
        logits = model(torch.from_numpy(x[start:start + batch_size]))
        correct += int((logits.argmax(-1).numpy() == y[start:start + batch_size]).sum())
    return correct / max(1, len(x))


def evaluate_entry(entry: ModelEntry, model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """The entry's own metric on (x, y): its evaluator, or top-1 accuracy for classifiers."""
    return (entry.evaluator or evaluate)(model, x, y)


LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def entry_label(entry: ModelEntry, variant: str | None) -> str:
    return f"{entry.name}{':' + variant if variant else ''}"


def fit(model: nn.Module, dataset: Dataset, loss_fn: LossFn, epochs: int, lr: float,
        settings: TrainSettings, seed: int = 0, progress: Progress | None = None,
        label: str = "training", seconds: float | None = None) -> tuple[float, int]:
    """AdamW + one-cycle over ``epochs`` of shuffled batches; returns the last batch loss and the
    epochs run, and leaves the model in eval mode. ``loss_fn(model, x, y)`` is the task's loss.
    A time budget of ``seconds`` ends training after the epoch in which it runs out."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=settings.weight_decay)
    steps = max(1, epochs * -(-len(dataset.x_train) // settings.batch_size))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    x, y = torch.from_numpy(dataset.x_train), torch.from_numpy(dataset.y_train)
    gen = torch.Generator().manual_seed(seed)
    loss_value, started, done = float("nan"), time.perf_counter(), 0
    advance = loss_steps(progress, label, epochs)
    while done < epochs and (seconds is None or time.perf_counter() - started < seconds):
        model.train()
        order = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), settings.batch_size):
            idx = order[start:start + settings.batch_size]
            loss = loss_fn(model, x[idx], y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_value = loss.detach().item()
        done += 1
        advance(loss_value)
    model.eval()
    return loss_value, done


def _cross_entropy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def train(entry: ModelEntry, dataset: Dataset, variant: str | None = None,
          epochs: int | None = None, seed: int = 0, progress: Progress | None = None,
          model: nn.Module | None = None, seconds: float | None = None,
          trainer: Callable[..., TrainResult] | None = None) -> TrainResult:
    """Train with ``trainer`` (a method's way of training any entry, e.g. Spik4lite's schedule),
    else the entry's trainer, else AdamW + one-cycle cross-entropy for classifiers.

    ``seconds`` is a time budget every trainer honours (for the classifiers here: no epoch starts
    after it ran out)."""
    if seconds is not None and not seconds > 0:
        raise UsageError(f"the time budget must be positive, got {seconds} s")
    trainer = trainer or entry.trainer
    if trainer is not None:
        return trainer(entry, dataset, variant=variant, epochs=epochs, seed=seed,
                       progress=progress, model=model, seconds=seconds)
    settings = entry.train
    epochs = settings.epochs if epochs is None else epochs
    torch.manual_seed(seed)
    model = model if model is not None else entry.build(variant)
    started = time.perf_counter()
    loss_value, done = fit(model, dataset, _cross_entropy, epochs, settings.lr, settings, seed,
                           progress, f"training {entry_label(entry, variant)}", seconds=seconds)
    value = evaluate(model, dataset.x_test, dataset.y_test)
    return TrainResult(model, entry.task.metric, value, done,
                       time.perf_counter() - started, loss_value)


def loss_steps(progress: Progress | None, label: str, total: int) -> Callable[[float], None]:
    """A callback that counts one step of ``total`` per call and reports it with its loss."""
    if progress is None:
        return lambda loss: None
    done = [0]
    progress(ProgressUpdate(label, 0, total))

    def advance(loss: float) -> None:
        done[0] += 1
        progress(ProgressUpdate(label, done[0], total, f"loss {loss:.4f}"))
    return advance
