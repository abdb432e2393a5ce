"""The Spik4lite schedule (Spik4lite, ICML 2026): warm-up, removal cycles, static fine-tune.

1. Warm-up: the net is gated (``wrap``) and trained on ``task loss + λ · energy penalty`` with the
   Gumbel temperature annealed 1.0 -> 0.5 over the gated epochs.
2. Removal cycles: each cycle trains the same way while every gate averages its hard keep
   decisions; at its end the channels under 0.5 are removed (per-step caps 30 % for the patch
   embedding, 50 % elsewhere), each consumer compensated and BatchNorm recalibrated on a few
   training batches. Cycle i of K aims at keep ``1 - (1 - target)·i/K`` of the prunable
   channels, so the last one lands on ``target_keep``.
3. Static fine-tune: the gates are deleted (each layer back under its own name) and the narrow net
   trains without the penalty.

With a teacher (``distillation``, distill.py [ours]) the static fine-tune blends the task loss
with the teacher's softened outputs; the phases before it are those of a run without one.

The optimizer (AdamW, one-cycle learning rate over the whole schedule, as the dense nets train
here; the authors: cosine with warm-up) runs through the whole schedule; removal slices its state
with the weights. The record keeps, after every gated epoch, the gates' mean soft keep probability
and the fraction of gated channels under 0.5, and per removal how many channels the target forced
out although their gates kept them.

λ: the paper's 0.01 (``PAPER_LAMBDA``) works over ~150k steps on CIFAR-10; a digits run has a few
hundred, and at 0.01 the penalty's gradient on a gate is 0.6-3 % of the task's, so the gates
never switch a channel off and every removal is forced. The default here, ``LAMBDA`` = 3 [ours],
is a weight at which the gates of both digits nets do (``benchmarks/spik4lite_lambda.py``).
"""
from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.data import Dataset
from edgekit.errors import UsageError
from edgekit.methods.spik4lite.compensation import recalibrate_bn
from edgekit.methods.spik4lite.distill import Distillation
from edgekit.methods.spik4lite.gates import (
    energy_penalty,
    set_temperature,
    soft_keep,
    temperature,
)
from edgekit.methods.spik4lite.gates import gated_layers as gates_of
from edgekit.methods.spik4lite.groups import channel_groups
from edgekit.methods.spik4lite.prune import count_channels, describe, prune
from edgekit.methods.spik4lite.warm_start import WarmStart
from edgekit.methods.spik4lite.wrap import unwrap, wrap
from edgekit.progress import Progress, ProgressUpdate
from edgekit.registry import ModelEntry
from edgekit.training import TrainLoop, TrainResult, entry_label, evaluate

PAPER_LAMBDA = 0.01  # [code] --lambda-energy: the authors' weight of the energy penalty
# [ours] the default here: a digits run has a few hundred steps, not the authors' ~150k, and at
# λ = 0.01 the penalty's gradient on a gate is 0.6 % (Spikingformer) to 3 % (SpikingResformer) of
# the task's, so no gate switches a channel off; at 3 the gates of both nets do, in 10 epochs
# (benchmarks/spik4lite_lambda.py measures both; see benchmarks/README.md)
LAMBDA = 3.0
CALIBRATION_BATCHES = 4


@dataclass(frozen=True)
class Schedule:
    """Epochs of each phase; ``split`` derives them from a total."""

    warmup: int
    cycles: int
    cycle_epochs: int
    finetune: int

    @classmethod
    def split(cls, epochs: int, cycles: int = 3) -> Schedule:
        """20 % warm-up, ``cycles`` cycles of 10 % each, the rest fine-tune (one epoch at least
        for each)."""
        warmup = max(1, epochs // 5)
        cycle_epochs = max(1, epochs // 10)
        return cls(warmup, cycles, cycle_epochs, max(1, epochs - warmup - cycles * cycle_epochs))

    @property
    def total(self) -> int:
        return self.warmup + self.cycles * self.cycle_epochs + self.finetune


def check_target(target_keep: float) -> float:
    if not 0 < target_keep <= 1:
        raise UsageError(f"--target-keep must be in (0, 1], got {target_keep}",
                         hint="the fraction of prunable channels to keep, e.g. 0.5")
    return target_keep


@dataclass(frozen=True)
class Spik4liteConfig:
    """What a Spik4lite run does beyond plain training: the keep it aims at, the penalty's
    weight, the phases (``None``: ``Schedule.split`` of the entry's epochs), a teacher whose
    softened outputs join the task loss in the fine-tune, and a trained net to start from (a
    copy of it is pruned) instead of fresh weights."""

    target_keep: float = 0.5
    lam: float = LAMBDA
    schedule: Schedule | None = None
    distillation: Distillation | None = None
    init: WarmStart | None = None

    def __post_init__(self) -> None:
        check_target(self.target_keep)


def train_spik4lite(entry: ModelEntry, dataset: Dataset,
                    config: Spik4liteConfig = Spik4liteConfig(), *, variant: str | None = None,
                    seed: int = 0, progress: Progress | None = None,
                    model: nn.Module | None = None, seconds: float | None = None) -> TrainResult:
    """Train ``entry`` with the Spik4lite schedule through ``TrainLoop``; the result's model is
    pruned and ungated. The keywords are those every trainer takes (``edgekit.training.train``)."""
    if not entry.spiking:
        raise UsageError(f"'{entry.name}' is not a spiking model; Spik4lite gates spiking nets",
                         hint="pick a model with spiking=True (edgekit models)")
    torch.manual_seed(seed)
    init, distillation, lam = config.init, config.distillation, config.lam
    model = _starting_net(entry, variant, model, init)
    settings = entry.train
    schedule = config.schedule or Schedule.split(settings.epochs)
    probe = torch.from_numpy(dataset.x_train[:settings.batch_size])
    if distillation is not None:
        distillation.check(model, probe)
    calibration = _calibration_batches(dataset)
    width = count_channels(channel_groups(model, probe))
    wrap(model, probe)
    # one-cycle over the whole schedule, as the dense nets train here (the authors: cosine with
    # warm-up over all epochs); a constant rate leaves the fine-tuned net short of the dense one
    loop = TrainLoop(model, dataset, settings, schedule.total, settings.lr, seed, seconds)
    label = f"spik4lite {entry_label(entry, variant)}"
    gated_steps = (schedule.warmup + schedule.cycles * schedule.cycle_epochs) \
        * loop.steps_per_epoch
    report_progress(progress, label, 0, schedule.total, "warm-up")
    removals: list[dict[str, Any]] = []
    gates: list[dict[str, float]] = []  # where the gates stand after each gated epoch

    def anneal(step: int) -> None:  # per batch over the gated epochs
        set_temperature(model, temperature(step, gated_steps))

    def gated_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x), y) + lam * energy_penalty(model)

    def static_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        return loss if distillation is None else distillation.loss(x, logits, loss)

    def after_gated(phase: str) -> Callable[[float], None]:
        def after(loss: float) -> None:
            p = soft_keep(model)
            gates.append({"epoch": loop.epochs_done, "mean_keep": round(float(p.mean()), 4),
                          "below_half": round(float((p < 0.5).float().mean()), 4)})
            report_progress(progress, label, loop.epochs_done, schedule.total,
                            f"{phase} loss {loss:.4f}")
        return after

    loop.run(schedule.warmup, gated_loss, after_gated("warm-up"), anneal)
    for cycle in range(1, schedule.cycles + 1):
        for _, gate in gates_of(model):
            gate.start_accumulating()
        loop.run(schedule.cycle_epochs, gated_loss,
                 after_gated(f"cycle {cycle}/{schedule.cycles}"), anneal)
        goal = 1 - (1 - config.target_keep) * cycle / schedule.cycles
        current = count_channels(channel_groups(model, probe))
        report = prune(model, probe, loop.opt, batches=calibration,
                       target_keep=min(1.0, goal * width / current))
        recalibrate_bn(model, calibration)
        removals.append({"cycle": cycle, **describe(report)})
    unwrap(model)
    _drop_gates_from(loop.opt, list(model.parameters()))
    loop.run(schedule.finetune, static_loss, lambda loss: report_progress(
        progress, label, loop.epochs_done, schedule.total, f"fine-tune loss {loss:.4f}"))
    model.eval()
    kept = count_channels(channel_groups(model, probe))
    value = evaluate(model, dataset.x_test, dataset.y_test)
    details = {"spik4lite": {"target_keep": config.target_keep, "keep": round(kept / width, 4),
                             "channels_before": width, "channels_after": kept, "lambda": lam,
                             "schedule": vars(schedule), "removals": removals, "gates": gates,
                             "distillation": distillation.to_json() if distillation else None,
                             "init": init.to_json() if init else None}}
    return TrainResult(model, entry.task.metric, value, loop.epochs_done,
                       time.perf_counter() - loop.started, loop.last_loss, details)


def _starting_net(entry: ModelEntry, variant: str | None, model: nn.Module | None,
                  init: WarmStart | None) -> nn.Module:
    """A copy of ``init``'s trained net, else ``model``, else a fresh net of the entry."""
    if init is None:
        return model if model is not None else entry.build(variant)
    if model is not None:
        raise UsageError("give the model to start from either as model or as init")
    init.check(entry_label(entry, variant))
    return copy.deepcopy(init.model)


def _calibration_batches(dataset: Dataset) -> list[torch.Tensor]:
    """The first training batches of 64, for BatchNorm recalibration after each removal."""
    batches = [torch.from_numpy(dataset.x_train[i * 64:(i + 1) * 64])
               for i in range(CALIBRATION_BATCHES)]
    return [b for b in batches if len(b)]


def _drop_gates_from(opt: torch.optim.Optimizer, live: list[nn.Parameter]) -> None:
    """The gates' parameters and state leave the optimizer once ``unwrap`` deleted them."""
    opt.param_groups[0]["params"] = live
    del opt.param_groups[1:]
    for p in [p for p in opt.state if not any(p is q for q in live)]:
        del opt.state[p]


def report_progress(progress: Progress | None, label: str, done: int, total: int,
                    note: str) -> None:
    if progress is not None:
        progress(ProgressUpdate(label, done, total, note))
