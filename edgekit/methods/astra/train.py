"""ASTRA training: plain ViT pre-training, then fine-tuning through the partitioned VQ forward.

The paper fine-tunes a pre-trained ViT with the VQ exchange in place (loss = task + beta *
commitment, NAVQ noise scaled by lambda). Pre-training runs the unpartitioned model (mode
"single", the VQ unused); fine-tuning runs ``run_partitioned(mode="astra")`` at
``config.partitions`` ranks in training mode, which also moves the codebooks by EMA.
"""
from __future__ import annotations

import time
from dataclasses import asdict

import torch
import torch.nn.functional as F

from edgekit.data import Dataset
from edgekit.methods.astra.vit import AstraViT, run_partitioned
from edgekit.progress import Progress
from edgekit.registry import ModelEntry, TrainSettings
from edgekit.training import TrainResult, entry_label, evaluate, fit

FINETUNE_LR_RATIO = 0.1  # fine-tuning peak LR relative to pre-training


def _plain_loss(model: AstraViT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(run_partitioned(model, x, 1, "single").logits, y)


def _astra_loss(model: AstraViT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    cfg = model.config
    out = run_partitioned(model, x, cfg.partitions, "astra", cfg.noise_scale)
    return F.cross_entropy(out.logits, y) + cfg.beta * out.commitment


def pretrain(model: AstraViT, dataset: Dataset, epochs: int, settings: TrainSettings,
             seed: int = 0, progress: Progress | None = None, label: str = "pre-training",
             seconds: float | None = None) -> tuple[float, int]:
    """Cross-entropy on the unpartitioned ViT; returns the last batch loss and the epochs run."""
    torch.manual_seed(seed)
    return fit(model, dataset, _plain_loss, epochs, settings.lr, settings, seed, progress, label,
               seconds=seconds)


def finetune(model: AstraViT, dataset: Dataset, epochs: int, settings: TrainSettings,
             seed: int = 0, progress: Progress | None = None, label: str = "ASTRA fine-tuning",
             seconds: float | None = None) -> tuple[float, int]:
    """CE + beta * commitment through the ASTRA forward (NAVQ lambda = config.noise_scale);
    returns the last batch loss and the epochs run."""
    torch.manual_seed(seed)
    return fit(model, dataset, _astra_loss, epochs, settings.lr * FINETUNE_LR_RATIO, settings,
               seed, progress, label, seconds=seconds)


def with_config(model: AstraViT, **overrides: float | int) -> AstraViT:
    """A copy of ``model``'s weights under a changed config (e.g. other VQ groups or lambda);
    codebooks whose shape changes start fresh and are seeded by the next training batch."""
    new = AstraViT(**{**asdict(model.config), **overrides})
    own = new.state_dict()
    new.load_state_dict({k: v for k, v in model.state_dict().items()
                         if k in own and own[k].shape == v.shape}, strict=False)
    if hasattr(model, "edgekit_cfg"):
        new.edgekit_cfg = {**model.edgekit_cfg,
                           "config": {**model.edgekit_cfg["config"], **overrides}}
    return new


def train_astra(entry: ModelEntry, dataset: Dataset, variant: str | None = None,
                epochs: int | None = None, seed: int = 0, progress: Progress | None = None,
                model: AstraViT | None = None, seconds: float | None = None) -> TrainResult:
    """The entry's trainer: ``epochs`` (default the entry's) of pre-training, then
    ``config.finetune_epochs`` of ASTRA fine-tuning (at most ``epochs`` when given), both within
    the time budget ``seconds`` when given."""
    settings = entry.train
    pre_epochs = settings.epochs if epochs is None else epochs
    torch.manual_seed(seed)
    model = model if model is not None else entry.build(variant)
    name = entry_label(entry, variant)
    started = time.perf_counter()
    loss, total = pretrain(model, dataset, pre_epochs, settings, seed, progress,
                           f"pre-training {name}", seconds=seconds)
    if model.partitioned:
        ft_epochs = model.config.finetune_epochs
        ft_epochs = ft_epochs if epochs is None else min(epochs, ft_epochs)
        left = None if seconds is None else max(0.0, seconds - (time.perf_counter() - started))
        loss, done = finetune(model, dataset, ft_epochs, settings, seed, progress,
                              f"ASTRA fine-tuning {name}", seconds=left)
        total += done
    value = evaluate(model, dataset.x_test, dataset.y_test)
    return TrainResult(model.eval(), entry.task.metric, value, total,
                       time.perf_counter() - started, loss)
