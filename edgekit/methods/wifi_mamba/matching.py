"""Hungarian matching of predicted poses to ground-truth persons (scipy.optimize).

Set prediction as in DETR/PETR (Carion et al., ECCV 2020; Shi et al., CVPR 2022): each
ground-truth person is assigned to exactly one query by minimising a summed cost, with
``scipy.optimize.linear_sum_assignment`` (the Hungarian algorithm, Kuhn 1955).
"""
from __future__ import annotations

import numpy as np


def hungarian_match(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the minimum-cost assignment of a ``(Q, G)`` cost matrix (Q >= G)."""
    from scipy.optimize import linear_sum_assignment

    cost = np.asarray(cost, dtype=np.float64)
    if cost.ndim != 2:
        raise ValueError(f"cost must be 2-D, got shape {cost.shape}")
    if cost.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows, cols = linear_sum_assignment(cost)
    return rows.astype(np.int64), cols.astype(np.int64)


def pose_cost(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """``(Q, G)`` mean per-joint Euclidean distance between predictions (Q,J,3) and truths
    (G,J,3)."""
    diff = pred[:, None] - gt[None]  # (Q, G, J, 3)
    return np.linalg.norm(diff, axis=-1).mean(-1)


def match_poses(pred: np.ndarray, gt: np.ndarray, logits: np.ndarray | None = None,
                score_weight: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Match queries to persons by pose distance, minus ``score_weight`` x person probability."""
    cost = pose_cost(pred, gt)
    if logits is not None and score_weight:
        cost = cost - score_weight * (1 / (1 + np.exp(-np.asarray(logits, np.float64))))[:, None]
    return hungarian_match(cost)
