"""Hungarian-matched set loss for pose queries (DETR/PETR style; methods.md §6).

Per sample, the G true persons are matched to G of the Q queries by minimising
``mean-joint L1 distance - w_cls · p(person)``; matched queries regress their person's keypoints
(L1, metres) and all queries learn a person/no-person score (binary cross-entropy, non-persons
down-weighted as DETR does for its "no object" class).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from edgekit.methods.wifi_mamba.matching import hungarian_match


def set_loss(poses: torch.Tensor, logits: torch.Tensor, gt: torch.Tensor, n_persons: torch.Tensor,
             cls_cost: float = 0.2, cls_weight: float = 0.2, neg_weight: float = 0.1
             ) -> torch.Tensor:
    """poses (B, Q, J, 3), logits (B, Q), gt (B, N, J, 3), n_persons (B,) -> scalar loss."""
    bsz, q = logits.shape
    with torch.no_grad():
        dist = (poses.unsqueeze(2) - gt.unsqueeze(1)).abs().sum(-1).mean(-1)  # (B, Q, N)
        cost = (dist - cls_cost * torch.sigmoid(logits).unsqueeze(-1)).numpy()
    b_idx, q_idx, g_idx = [], [], []
    for b in range(bsz):
        n = int(n_persons[b])
        rows, cols = hungarian_match(cost[b, :, :n])
        b_idx += [b] * len(rows)
        q_idx += rows.tolist()
        g_idx += cols.tolist()
    b_t, q_t, g_t = (torch.as_tensor(i, dtype=torch.long) for i in (b_idx, q_idx, g_idx))
    pose_loss = (poses[b_t, q_t] - gt[b_t, g_t]).abs().sum(-1).mean()
    target = torch.zeros_like(logits)
    target[b_t, q_t] = 1.0
    weight = torch.full_like(logits, neg_weight)
    weight[b_t, q_t] = 1.0
    cls_loss = (F.binary_cross_entropy_with_logits(logits, target, weight, reduction="sum")
                / max(1, len(b_idx)))
    return pose_loss + cls_weight * cls_loss
