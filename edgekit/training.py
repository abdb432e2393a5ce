"""Training and evaluation on an entry's dataset, with a progress bar."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgekit.data import Dataset
from edgekit.registry import ModelEntry


@dataclass(frozen=True)
class TrainResult:
    model: nn.Module
    metric: str
    value: float  # on the test split
    epochs: int
    seconds: float
    final_loss: float

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


def train(entry: ModelEntry, dataset: Dataset, variant: str | None = None,
          epochs: int | None = None, seed: int = 0, progress: bool = True,
          model: nn.Module | None = None) -> TrainResult:
    """Train with the entry's trainer, else AdamW + one-cycle cross-entropy for classifiers."""
    if entry.trainer is not None:
        return entry.trainer(entry, dataset, variant=variant, epochs=epochs, seed=seed,
                             progress=progress, model=model)
    settings = entry.train
    epochs = settings.epochs if epochs is None else epochs
    torch.manual_seed(seed)
    model = model if model is not None else entry.build(variant)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    steps_per_epoch = max(1, -(-len(dataset.x_train) // settings.batch_size))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=settings.lr,
                                                total_steps=max(1, epochs * steps_per_epoch))
    loss_fn = nn.CrossEntropyLoss()
    x = torch.from_numpy(dataset.x_train)
    y = torch.from_numpy(dataset.y_train)
    gen = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    loss_value = float("nan")
    with ProgressBar(progress, f"training {entry.name}{':' + variant if variant else ''}",
                   epochs) as advance:
        for _ in range(epochs):
            model.train()
            order = torch.randperm(len(x), generator=gen)
            for start in range(0, len(x), settings.batch_size):
                idx = order[start:start + settings.batch_size]
                loss = loss_fn(model(x[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                loss_value = loss.detach().item()
            advance(loss_value)
    value = evaluate(model, dataset.x_test, dataset.y_test)
    return TrainResult(model.eval(), entry.task.metric, value, epochs,
                       time.perf_counter() - started, loss_value)


class ProgressBar:
    """A rich progress bar over epochs (or nothing, for library callers that ask for quiet)."""

    def __init__(self, enabled: bool, label: str, total: int) -> None:
        self.enabled, self.label, self.total = enabled, label, total
        self._bar = None

    def __enter__(self):
        if not self.enabled:
            return lambda loss: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from edgekit.cli.common import err_console

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(),
                             console=err_console, transient=False)
        self._bar.__enter__()
        task = self._bar.add_task(self.label, total=self.total, loss="-")
        return lambda loss: self._bar.update(task, advance=1, loss=f"{loss:.4f}")

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False
