"""Distillation from a dense teacher in Spik4lite's static fine-tune [ours].

Spik4lite's removal takes capacity away that fine-tuning on the labels alone does not give back
on a small net: the digits Spikingformer lost 3.3 points at keep 0.5 in 30 epochs, and most of it
sits in its narrow tokenizer (benchmarks/README.md). Knowledge distillation (Hinton, Vinyals and
Dean, "Distilling the Knowledge in a Neural Network", 2015) trains the narrow net on the dense
net's softened outputs as well:

    loss = (1 - α) · CE(s, y) + α · T² · KL(softmax(t / T) ‖ softmax(s / T))

with s, t the student's and teacher's logits; T² keeps the soft term's gradient at the scale of
the hard one's as T changes. The authors' code has no such term; it is opt-in (``--teacher``),
and the teacher is any trained checkpoint of the same task, usually the dense net of the same
entry (the keep 1.0 row of a sweep), which a user has trained anyway to compare against.

Only the static fine-tune distils: warm-up and removal cycles train exactly as without a teacher,
so the gates, not the teacher, choose what is removed, and the pruned net's widths are those of
the plain schedule. Distilling in every phase was tried first: it lost less accuracy (0.3-0.8
points over three seeds) but steered the gates to keep other channels, a net of twice the
parameters and 3.2x the FLOPs at the same keep 0.5 (Spikingformer, seed 0: 55.8k against 26.7k,
6.28 against 1.94 MFLOPs), which bought its accuracy with the latency the removal is for.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.errors import UsageError
from edgekit.methods.spik4lite.warm_start import other_data, trained_on
from edgekit.registry import ModelEntry

# [ours] α and T, from the digits Spikingformer at keep 0.5, 30 epochs, distilling in the fine-tune
# from its dense net (97.5 / 98.9 / 98.9 % for seeds 0 / 1 / 2): α = 0.9, T = 4 gave 96.9 / 97.5 /
# 97.8 %, α = 1 97.2 / 98.1 % (seeds 1 / 2), α = 0.9, T = 2 96.7 % (seed 1), against 94.2 / 95.8 /
# 96.9 % without a teacher.
DISTILL_WEIGHT = 0.9
DISTILL_TEMPERATURE = 4.0


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor,
                      temperature: float) -> torch.Tensor:
    """T² · KL(softmax(teacher / T) ‖ softmax(student / T)), averaged over the batch."""
    return F.kl_div(F.log_softmax(student / temperature, dim=-1),
                    F.log_softmax(teacher / temperature, dim=-1),
                    log_target=True, reduction="batchmean") * temperature ** 2


@dataclass
class Distillation:
    """A frozen teacher and the weights of the soft term."""

    teacher: nn.Module
    weight: float = DISTILL_WEIGHT
    temperature: float = DISTILL_TEMPERATURE
    source: str = "(in memory)"  # where the teacher came from (a checkpoint path)
    trained_on: tuple[str, str] | None = None  # its checkpoint's (dataset, digest), if recorded

    def __post_init__(self) -> None:
        if not 0 < self.weight <= 1:
            raise UsageError(f"the distillation weight must be in (0, 1], got {self.weight}")
        if not 0 < self.temperature < float("inf"):
            raise UsageError(f"the distillation temperature must be positive, got "
                             f"{self.temperature}")
        self.teacher.eval()  # its forward runs under no_grad (loss), so no weight is touched

    def loss(self, x: torch.Tensor, logits: torch.Tensor, task_loss: torch.Tensor) -> torch.Tensor:
        """The task loss blended with the soft term on the teacher's logits for ``x``."""
        with torch.no_grad():
            target = self.teacher(x)
        soft = distillation_loss(logits, target, self.temperature)
        return (1 - self.weight) * task_loss + self.weight * soft

    def check(self, student: nn.Module, probe: torch.Tensor) -> None:
        """The teacher must answer the student's inputs with outputs of the student's shape."""
        with torch.no_grad():
            try:
                theirs = self.teacher(probe)
            except (RuntimeError, ValueError) as exc:
                raise UsageError(f"the teacher {self.source} cannot run the student's "
                                 f"inputs ({str(exc).splitlines()[0]})") from exc
            was_training = student.training
            student.eval()
            ours = student(probe)
            student.train(was_training)
        if theirs.shape != ours.shape:
            raise UsageError(f"the teacher {self.source} outputs {tuple(theirs.shape)} where the "
                             f"student outputs {tuple(ours.shape)}",
                             hint="distil from a model of the same task")

    def other_data(self, dataset_name: str, digest: str) -> str | None:
        """Why the teacher's data are not the student's (None when they are, or are unknown):
        its soft labels then carry what it learnt elsewhere."""
        return other_data("teacher", self.source, self.trained_on, dataset_name, digest)

    def to_json(self) -> dict[str, object]:
        record: dict[str, object] = {"teacher": self.source, "weight": self.weight,
                                     "temperature": self.temperature}
        if self.trained_on is not None:
            record["teacher_dataset"], record["teacher_dataset_digest"] = self.trained_on
        return record


def load_teacher(path: str | Path, student: ModelEntry, weight: float = DISTILL_WEIGHT,
                 temperature: float = DISTILL_TEMPERATURE) -> Distillation:
    """A teacher from an edgekit checkpoint of a model with the student's task."""
    from edgekit.checkpoint import load_checkpoint

    try:
        model, ckpt = load_checkpoint(path)
    except UsageError as exc:
        raise UsageError(f"the teacher: {exc.message}", hint=exc.hint) from exc
    if ckpt.entry.task.dataset != student.task.dataset:
        raise UsageError(f"the teacher {path} is '{ckpt.entry.name}', trained for "
                         f"'{ckpt.entry.task.dataset}', not '{student.task.dataset}'",
                         hint=f"train a teacher first: edgekit train {student.name}")
    return Distillation(model, weight, temperature, source=str(path),
                        trained_on=trained_on(ckpt.info))
