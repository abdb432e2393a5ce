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


StepHook = Callable[[int], None]  # called with the run's step number before each step


class TrainLoop:
    """AdamW + one-cycle learning rate over a run of ``epochs`` epochs of shuffled batches,
    under an optional time budget of ``seconds`` (no epoch starts after it ran out).

    ``fit`` runs it in one phase; a schedule of several phases (Spik4lite: gated epochs, removal,
    fine-tune) calls ``run`` once per phase, each with its own loss, so the optimizer's state,
    the learning-rate schedule, the shuffling and the budget carry across them."""

    def __init__(self, model: nn.Module, dataset: Dataset, settings: TrainSettings, epochs: int,
                 lr: float, seed: int = 0, seconds: float | None = None) -> None:
        self.model, self.batch_size, self.seconds = model, settings.batch_size, seconds
        self.x, self.y = torch.from_numpy(dataset.x_train), torch.from_numpy(dataset.y_train)
        self.steps_per_epoch = -(-len(self.x) // self.batch_size)
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr,
                                     weight_decay=settings.weight_decay)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(
            self.opt, max_lr=lr, total_steps=max(1, epochs * self.steps_per_epoch))
        self.gen = torch.Generator().manual_seed(seed)
        self.started = time.perf_counter()
        self.epochs_done, self.steps_done, self.last_loss = 0, 0, float("nan")

    def out_of_time(self) -> bool:
        return self.seconds is not None and time.perf_counter() - self.started >= self.seconds

    def epoch(self, loss_fn: LossFn, before_step: StepHook | None = None) -> float:
        """One pass over the shuffled training split; returns the last batch's loss."""
        self.model.train()
        order = torch.randperm(len(self.x), generator=self.gen)
        for start in range(0, len(self.x), self.batch_size):
            idx = order[start:start + self.batch_size]
            if before_step is not None:
                before_step(self.steps_done)
            loss = loss_fn(self.model, self.x[idx], self.y[idx])
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.sched.step()
            self.steps_done += 1
            self.last_loss = loss.detach().item()
        self.epochs_done += 1
        return self.last_loss

    def run(self, epochs: int, loss_fn: LossFn,
            after_epoch: Callable[[float], None] = lambda loss: None,
            before_step: StepHook | None = None) -> None:
        """Up to ``epochs`` epochs of ``loss_fn``, none started once the budget ran out;
        ``after_epoch`` gets each epoch's last loss."""
        for _ in range(epochs):
            if self.out_of_time():
                return
            after_epoch(self.epoch(loss_fn, before_step))


# Over 8 parameters: astra/train.py passes them positionally; TrainLoop is the grouped form
def fit(model: nn.Module, dataset: Dataset, loss_fn: LossFn, epochs: int, lr: float,
        settings: TrainSettings, seed: int = 0, progress: Progress | None = None,
        label: str = "training", seconds: float | None = None) -> tuple[float, int]:
    """``TrainLoop`` in one phase: returns the last batch loss and the epochs run, and leaves the
    model in eval mode. ``loss_fn(model, x, y)`` is the task's loss."""
    loop = TrainLoop(model, dataset, settings, epochs, lr, seed, seconds)
    loop.run(epochs, loss_fn, after_epoch=loss_steps(progress, label, epochs))
    model.eval()
    return loop.last_loss, loop.epochs_done


def _cross_entropy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


# Over 8 parameters: the keywords every trainer takes (ModelEntry.trainer), and the trainer
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
