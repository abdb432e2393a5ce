"""Train and evaluate WiFi pose models on simulated CSI; MPJPE per person count on held-out data.

    edgekit train wifi-mamba --seconds S --json FILE   (and wifi-petr, the baseline)
    edgekit train wifi-mamba --validation 0.1          (keep the weights best on held-out
                                                        training sequences: ``hold_out``)

Both models see the same frames: windows of consecutive frames from one sequence. WiFi-Mamba runs
through a window frame by frame carrying its persistent SSM memory (gradients flow through the
memory, truncated at the window); the baseline sees the window's frames independently. On held-out
sequences WiFi-Mamba streams through each whole sequence with its memory; it is also scored
without memory (every frame from a zero state), which isolates what the memory contributes.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from edgekit.methods.wifi_mamba.csi import preprocess
from edgekit.methods.wifi_mamba.loss import set_loss
from edgekit.methods.wifi_mamba.metrics import baseline_scores, evaluate_frames
from edgekit.methods.wifi_mamba.simulator import PoseData


@dataclass(frozen=True)
class PoseSplit:
    x: np.ndarray  # (F, 2, 270, 20) preprocessed
    keypoints: np.ndarray  # (F, 3, 14, 3)
    n_persons: np.ndarray  # (F,)
    sequence: np.ndarray  # (F,)

    @classmethod
    def from_data(cls, data: PoseData) -> PoseSplit:
        return cls(preprocess(data.csi), data.keypoints, data.n_persons, data.sequence)


def _streams(model: nn.Module) -> bool:
    return hasattr(model, "forward_stream")


def _windows(seq: np.ndarray, window: int) -> np.ndarray:
    starts = np.arange(len(seq) - window + 1)
    return starts[seq[starts] == seq[starts + window - 1]]


def _valid(split: PoseSplit) -> np.ndarray:
    """Every present person's skeleton ``(N, 14, 3)``."""
    return split.keypoints[np.arange(split.keypoints.shape[1])[None] < split.n_persons[:, None]]


def mean_pose(split: PoseSplit) -> torch.Tensor:
    return torch.from_numpy(_valid(split).mean(0))  # (14, 3)


def baselines(train: PoseSplit, test: PoseSplit) -> dict[str, Any]:
    """Scores on ``test`` of the mean pose and the body-frame template fitted on ``train``."""
    return baseline_scores(_valid(train), test.keypoints, test.n_persons)


def input_stats(split: PoseSplit) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and std (2, 270) over frames and packets of the training split."""
    x = torch.from_numpy(split.x)
    return x.mean(dim=(0, 3)), x.std(dim=(0, 3))


def hold_out(split: PoseSplit, fraction: float, seed: int = 0) -> tuple[PoseSplit, PoseSplit]:
    """(rest, held out): whole sequences, ``fraction`` of them drawn at random, held out for
    model selection, so the test split is never looked at before scoring."""
    if not 0 < fraction < 1:
        raise ValueError(f"hold-out fraction must be in (0, 1), got {fraction}")
    seqs = np.unique(split.sequence)
    count = max(1, round(fraction * len(seqs)))
    if count >= len(seqs):
        raise ValueError(f"{len(seqs)} sequence(s) are too few to hold out {fraction:g} of them")
    held = np.isin(split.sequence, np.random.default_rng(seed).choice(seqs, count, replace=False))
    return _subset(split, ~held), _subset(split, held)


def _subset(split: PoseSplit, keep: np.ndarray) -> PoseSplit:
    return PoseSplit(split.x[keep], split.keypoints[keep], split.n_persons[keep],
                     split.sequence[keep])


# Over 8 parameters: the training loop's hyperparameters, keyword defaults a caller can leave alone;
# train_entry fills them from the registry
def train_pose_model(model: nn.Module, split: PoseSplit, seconds: float = 120.0,
                     batch: int = 16, window: int = 4, lr: float = 2e-3, seed: int = 0,
                     max_steps: int | None = None,
                     on_step: Callable[[float], None] | None = None,
                     validation: PoseSplit | None = None, validate_every: int = 100,
                     on_validate: Callable[[int, float], None] | None = None,
                     ) -> tuple[int, float]:
    """AdamW with a time-based cosine schedule; returns (steps, final loss).

    ``on_step(loss)`` is called after every step (a progress bar). With ``validation``, MPJPE on
    it is measured every ``validate_every`` steps and at the end (``on_validate(step, mm)``), and
    the model ends with the weights that scored best there: a model that overfits its training
    frames is judged at its best, whatever the step budget."""
    if validation is not None and validate_every < 1:
        raise ValueError(f"validate_every must be at least 1, got {validate_every}")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model.head.set_mean_pose(mean_pose(split))
    model.input_norm.set_stats(*input_stats(split))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    starts = _windows(split.sequence, window)
    x, kp, n = (torch.from_numpy(a) for a in (split.x, split.keypoints, split.n_persons))
    started, steps, loss_value = time.perf_counter(), 0, float("nan")
    best: tuple[float, dict[str, torch.Tensor]] | None = None

    def validate() -> None:
        nonlocal best
        score = evaluate_pose_model(model, validation)["all"]["mpjpe_mm"]
        model.train()
        if on_validate is not None:
            on_validate(steps, score)
        if math.isfinite(score) and (best is None or score < best[0]):  # a nan never wins
            best = score, {k: v.detach().clone() for k, v in model.state_dict().items()}

    model.train()
    while True:
        frac = (time.perf_counter() - started) / seconds
        if max_steps is not None:
            frac = max(frac, steps / max_steps)
        if frac >= 1:
            break
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (steps + 1) / 50) * 0.5 * (1 + math.cos(math.pi * frac))
        idx = torch.from_numpy(rng.choice(starts, batch)[:, None]
                               + np.arange(window)[None])  # (B, W)
        if _streams(model):
            memory, loss = None, 0.0
            for w in range(window):
                f = idx[:, w]
                poses, logits, memory = model.forward_stream(x[f], memory)
                loss = loss + set_loss(poses, logits, kp[f], n[f]) / window
        else:
            f = idx.reshape(-1)
            poses, logits = model(x[f])
            loss = set_loss(poses, logits, kp[f], n[f])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps += 1
        loss_value = float(loss.detach())
        if on_step is not None:
            on_step(loss_value)
        if validation is not None and steps % validate_every == 0:
            validate()
    if validation is not None:
        if steps % validate_every:
            validate()
        if best is not None:
            model.load_state_dict(best[1])
    return steps, loss_value


@torch.inference_mode()
def predict(model: nn.Module, split: PoseSplit, memory: bool = True, batch: int = 64) -> np.ndarray:
    """(F, Q, 14, 3) predictions; streaming models carry memory through each sequence in order."""
    model.eval()
    x = torch.from_numpy(split.x)
    if not (memory and _streams(model)):
        return np.concatenate([model(x[i:i + batch])[0].numpy() for i in range(0, len(x), batch)])
    out = np.zeros((len(x), model.cfg.queries, *split.keypoints.shape[2:]), np.float32)
    seqs = [np.flatnonzero(split.sequence == s) for s in np.unique(split.sequence)]
    for lo in range(0, len(seqs), batch):
        group = seqs[lo:lo + batch]
        length = max(len(s) for s in group)
        mem = None
        for t in range(length):  # sequences of equal length advance together
            live = [s[t] for s in group if t < len(s)]
            if len(live) != len(group):
                raise ValueError("streaming evaluation needs sequences of equal length")
            poses, _, mem = model.forward_stream(x[live], mem)
            out[live] = poses.numpy()
    return out


def evaluate_pose_model(model: nn.Module, split: PoseSplit, memory: bool = True) -> dict[str, Any]:
    return evaluate_frames(predict(model, split, memory), split.keypoints, split.n_persons)
