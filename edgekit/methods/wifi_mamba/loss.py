"""Hungarian-matched set loss for pose queries (DETR/PETR style).

Per sample, the G true persons are matched to G of the Q queries by minimising
``mean-joint L1 distance - w_cls · p(person)``; matched queries regress their person's keypoints
(L1, metres) and all queries learn a person/no-person score (binary cross-entropy, non-persons
down-weighted as DETR does for its "no object" class).

Beside the world-coordinate L1, a body-frame L1 compares the two skeletons each in its own body
frame (origin at the hip centre, forward axis from the shoulders and hips): it ignores where the
person stands and which way they face, so the shape of the pose is learnt even while the
position is still wrong [ours; PA-MPJPE, the metric it serves, aligns the same way and more].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from edgekit.methods.wifi_mamba.matching import hungarian_match

_R_SH, _L_SH, _R_HIP, _L_HIP = 2, 5, 8, 11


def body_frame(poses: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """``(..., J, 3)`` skeletons in their own body frame: translated to the hip centre and turned
    about the vertical so that the left-minus-right shoulder and hip vector lies along +x."""
    hips = 0.5 * (poses[..., _R_HIP, :] + poses[..., _L_HIP, :])
    lat = (poses[..., _L_SH, :2] + poses[..., _L_HIP, :2]
           - poses[..., _R_SH, :2] - poses[..., _R_HIP, :2])
    lat = lat / torch.sqrt((lat ** 2).sum(-1, keepdim=True) + eps)
    cos, sin = lat[..., :1], lat[..., 1:]  # (..., 1) each
    rel = poses - hips.unsqueeze(-2)
    x, y = rel[..., 0], rel[..., 1]
    return torch.stack([cos * x + sin * y, -sin * x + cos * y, rel[..., 2]], dim=-1)


def body_frame_l1(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """Mean over joints of the L1 distance of ``(..., J, 3)`` skeletons in their body frames."""
    return (body_frame(pred) - body_frame(gt)).abs().sum(-1).mean()


def set_loss(poses: torch.Tensor, logits: torch.Tensor, gt: torch.Tensor, n_persons: torch.Tensor,
             cls_cost: float = 0.2, cls_weight: float = 0.2, neg_weight: float = 0.1,
             body_weight: float = 1.0) -> torch.Tensor:
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
    if body_weight:
        pose_loss = pose_loss + body_weight * body_frame_l1(poses[b_t, q_t], gt[b_t, g_t])
    target = torch.zeros_like(logits)
    target[b_t, q_t] = 1.0
    weight = torch.full_like(logits, neg_weight)
    weight[b_t, q_t] = 1.0
    cls_loss = (F.binary_cross_entropy_with_logits(logits, target, weight, reduction="sum")
                / max(1, len(b_idx)))
    return pose_loss + cls_weight * cls_loss
