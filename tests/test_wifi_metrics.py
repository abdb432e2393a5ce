"""MPJPE, PA-MPJPE and Hungarian matching on hand-checked cases."""
from __future__ import annotations

import numpy as np
import pytest

from edgekit.methods.wifi_mamba.matching import hungarian_match, match_poses
from edgekit.methods.wifi_mamba.metrics import evaluate_frames, mpjpe, pa_mpjpe, procrustes_align

pytestmark = pytest.mark.usefixtures("single_thread")


def _pose(seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (14, 3))


def test_mpjpe_of_a_known_shift():
    gt = _pose()
    assert mpjpe(gt + np.array([0.03, 0.04, 0.0]), gt) == pytest.approx(50.0)  # 3-4-5 cm
    assert pa_mpjpe(gt + np.array([0.03, 0.04, 0.0]), gt) == pytest.approx(0.0, abs=1e-9)


def test_pa_mpjpe_removes_rotation_scale_translation_not_shape():
    gt = _pose()
    a = 0.7
    rot = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    pred = 1.3 * gt @ rot.T + np.array([0.5, -2.0, 0.1])
    assert mpjpe(pred, gt) > 100
    np.testing.assert_allclose(procrustes_align(pred, gt), gt, atol=1e-12)
    # a reflection is a shape change, not a rotation: PA-MPJPE must not undo it
    mirrored = gt * np.array([-1.0, 1.0, 1.0])
    assert pa_mpjpe(mirrored, gt) > 10


def test_hungarian_on_a_hand_solved_matrix():
    cost = np.array([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0], [9.0, 9.0, 9.0]])
    rows, cols = hungarian_match(cost)
    # candidates: (0,1)+(1,0)+(2,2) = 1+2+2 = 5 is the unique minimum; query 3 stays unmatched
    assert dict(zip(rows.tolist(), cols.tolist(), strict=False)) == {0: 1, 1: 0, 2: 2}
    assert cost[rows, cols].sum() == 5.0


def test_match_poses_finds_the_permutation():
    gts = np.stack([_pose(1), _pose(2)])
    preds = np.stack([_pose(9) + 5, gts[1] + 0.01, _pose(8) - 5, gts[0] - 0.01])
    rows, cols = match_poses(preds, gts)
    assert dict(zip(cols.tolist(), rows.tolist(), strict=False)) == {0: 3, 1: 1}


def test_evaluate_frames_per_person_count():
    g1, g2 = _pose(1), _pose(2)
    gts = np.zeros((2, 3, 14, 3))
    gts[0, 0] = g1
    gts[1, :2] = [g1, g2]
    shift = np.array([0.0, 0.0, 0.1])  # 100 mm
    preds = [np.stack([g1 + shift, g2 + 10]),
             np.stack([g2, g1 + 2 * shift, g1 + 10])]  # one exact, one 200 mm off
    res = evaluate_frames(preds, gts, np.array([1, 2]))
    assert res["1"]["mpjpe_mm"] == pytest.approx(100.0)
    assert res["2"]["mpjpe_mm"] == pytest.approx(100.0)  # (0 + 200) / 2
    assert res["2"]["pa_mpjpe_mm"] == pytest.approx(0.0, abs=1e-9)
    assert res["all"]["frames"] == 2 and res["all"]["mpjpe_mm"] == pytest.approx(100.0)


def _turned(pose, yaw, shift):
    c, s = np.cos(yaw), np.sin(yaw)
    rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    return pose @ rot.T + np.array(shift)


def test_template_baseline_is_the_body_frame_mean_and_scores_the_mean_pose_badly():
    from edgekit.methods.wifi_mamba.metrics import baseline_scores, template_skeleton
    from edgekit.methods.wifi_mamba.simulator import _TEMPLATE

    # one skeleton standing in many places, facing many ways
    rng = np.random.default_rng(0)
    poses = np.stack([_turned(_TEMPLATE, rng.uniform(0, 2 * np.pi), [*rng.uniform(-2, 2, 2), 0])
                      for _ in range(40)])
    tpl = template_skeleton(poses)
    assert pa_mpjpe(tpl, _TEMPLATE) == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(tpl[:, 2], _TEMPLATE[:, 2], atol=1e-9)  # heights kept
    gts = np.zeros((40, 3, 14, 3))
    gts[:, 0] = poses
    scores = baseline_scores(poses, gts, np.ones(40, int))
    assert scores["template"]["all"]["pa_mpjpe_mm"] == pytest.approx(0.0, abs=1e-6)
    # the world-frame mean of turned skeletons is a collapsed one: far worse after alignment
    assert scores["mean_pose"]["all"]["pa_mpjpe_mm"] > 50
    assert scores["template"]["all"]["frames"] == 40
