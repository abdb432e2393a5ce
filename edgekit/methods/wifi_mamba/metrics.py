"""Pose metrics in millimetres: MPJPE and PA-MPJPE, and their breakdown by person count.

MPJPE is the mean Euclidean distance between predicted and true joints (Ionescu et al.,
Human3.6M, TPAMI 2014). PA-MPJPE first aligns the prediction to the truth by the similarity
transform (scale, rotation, translation) that minimises the squared error: orthogonal Procrustes
with Umeyama's reflection correction (Umeyama, TPAMI 1991).

Multi-person frames follow Person-in-WiFi 3D's convention [ours where it is silent]: each true
person is matched to one predicted query by the Hungarian algorithm on MPJPE, and the frame's
error is the mean over its true persons; detection quality (missed or extra persons) is a
separate question that these numbers do not answer.

Two baselines that see no CSI frame a model's figures: the mean pose (the training keypoints'
average in world coordinates, a blurred skeleton at the average place) and the template (the
average training skeleton in the body frame, a well-formed skeleton that knows neither where
the person is nor how they move). PA-MPJPE forgives the template its place and heading, so a
model has learnt pose only if it beats the template there.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from edgekit.methods.wifi_mamba.body import body_frame
from edgekit.methods.wifi_mamba.matching import match_poses

MM = 1000.0  # keypoints are in metres


def mpjpe(pred: np.ndarray, gt: np.ndarray) -> float:
    """Mean per-joint position error in mm of ``(..., J, 3)`` arrays in metres."""
    return float(np.linalg.norm(np.asarray(pred) - np.asarray(gt), axis=-1).mean() * MM)


def procrustes_align(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """``pred`` (J, 3) under the similarity transform that best fits it to ``gt`` (J, 3)."""
    pred, gt = np.asarray(pred, np.float64), np.asarray(gt, np.float64)
    mu_p, mu_g = pred.mean(0), gt.mean(0)
    p, g = pred - mu_p, gt - mu_g
    u, s, vt = np.linalg.svd(p.T @ g)  # (3, 3)
    d = np.sign(np.linalg.det(u @ vt))
    flip = np.diag([1.0, 1.0, d])  # no reflections
    rot = u @ flip @ vt
    var = (p ** 2).sum()
    scale = (s * np.diag(flip)).sum() / var if var > 0 else 1.0
    return scale * p @ rot + mu_g


def pa_mpjpe(pred: np.ndarray, gt: np.ndarray) -> float:
    """MPJPE in mm after Procrustes alignment, averaged over persons of ``(..., J, 3)`` arrays."""
    pred = np.asarray(pred).reshape(-1, *np.shape(pred)[-2:])
    gt = np.asarray(gt).reshape(-1, *np.shape(gt)[-2:])
    return float(np.mean([mpjpe(procrustes_align(p, g), g)
                          for p, g in zip(pred, gt, strict=False)]))


def frame_errors(pred: np.ndarray, gt: np.ndarray) -> tuple[float, float]:
    """(MPJPE, PA-MPJPE) in mm of one frame: ``pred`` (Q, J, 3) queries, ``gt`` (G, J, 3)."""
    rows, cols = match_poses(pred, gt)
    matched, truth = pred[rows], gt[cols]
    return mpjpe(matched, truth), pa_mpjpe(matched, truth)


def evaluate_frames(preds: Iterable[np.ndarray], gts: np.ndarray,
                    n_persons: np.ndarray) -> dict[str, dict[str, float]]:
    """MPJPE and PA-MPJPE (mm) per person count and overall, over frames.

    ``preds`` yields (Q, J, 3) per frame; ``gts`` is (F, N_max, J, 3) with ``n_persons`` (F,) valid
    rows. Returns ``{"1": {...}, "2": {...}, "all": {"mpjpe_mm", "pa_mpjpe_mm", "frames"}}``.
    """
    by_count: dict[int, list[tuple[float, float]]] = {}
    for pred, gt, n in zip(preds, gts, n_persons, strict=False):
        by_count.setdefault(int(n), []).append(frame_errors(np.asarray(pred), gt[:int(n)]))
    out: dict[str, dict[str, float]] = {}
    everything: list[tuple[float, float]] = []
    for n in sorted(by_count):
        errs = np.array(by_count[n])
        everything.extend(by_count[n])
        out[str(n)] = {"mpjpe_mm": float(errs[:, 0].mean()),
                       "pa_mpjpe_mm": float(errs[:, 1].mean()), "frames": len(errs)}
    if everything:
        errs = np.array(everything)
        out["all"] = {"mpjpe_mm": float(errs[:, 0].mean()), "pa_mpjpe_mm": float(errs[:, 1].mean()),
                      "frames": len(errs)}
    return out


def to_body_frame(kpts: np.ndarray) -> np.ndarray:
    """``(..., J, 3)`` skeletons with the hip centre at the origin and the body's lateral
    (right-to-left) axis along +x, forward along +y; heights unchanged."""
    kpts = np.asarray(kpts, np.float64)
    lat, fwd = body_frame(kpts)
    hips = 0.5 * (kpts[..., 8, :] + kpts[..., 11, :]) * np.array([1.0, 1.0, 0.0])
    rel = kpts - hips[..., None, :]
    return np.stack([(rel * lat[..., None, :]).sum(-1), (rel * fwd[..., None, :]).sum(-1),
                     rel[..., 2]], axis=-1)


def template_skeleton(kpts: np.ndarray) -> np.ndarray:
    """The mean body-frame skeleton ``(J, 3)`` of skeletons ``(N, J, 3)``."""
    return to_body_frame(kpts).mean(0)


def baseline_scores(train_kpts: np.ndarray, gts: np.ndarray, n_persons: np.ndarray,
                    queries: int = 3) -> dict[str, dict[str, dict[str, float]]]:
    """``evaluate_frames`` of the two constant baselines fitted on ``train_kpts`` (N, J, 3), the
    valid training skeletons: ``mean_pose`` and ``template`` (placed at the mean hip centre,
    facing +y: its MPJPE means little, its PA-MPJPE is the bar for pose)."""
    train_kpts = np.asarray(train_kpts, np.float64)
    hips = 0.5 * (train_kpts[:, 8] + train_kpts[:, 11]) * np.array([1.0, 1.0, 0.0])
    poses = {"mean_pose": train_kpts.mean(0),
             "template": template_skeleton(train_kpts) + hips.mean(0)}
    return {name: evaluate_frames(
        (np.broadcast_to(pose, (queries, *pose.shape)) for _ in range(len(gts))), gts, n_persons)
        for name, pose in poses.items()}
